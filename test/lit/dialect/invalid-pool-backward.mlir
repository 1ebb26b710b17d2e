// max_pool2d_backward: grad_output has the shape of the forward pool's output (3x3 windows, stride 2, padding
// 1 on a 9x9 input: 5x5).
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-pool-backward.mlir:[[# @LINE + 3]]:9: error: 'prim.max_pool2d_backward' op grad_output 1x2x4x4 must have the pool's output shape 1x2x5x5 (input 1x2x9x9){{$}}
// CHECK-NOT: {{.}}
func.func @f(%dy: tensor<1x2x4x4xf32>, %x: tensor<1x2x9x9xf32>) -> tensor<1x2x9x9xf32> {
  %dx = "prim.max_pool2d_backward"(%dy, %x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = 0, layout = "NCHW"} : (tensor<1x2x4x4xf32>, tensor<1x2x9x9xf32>) -> tensor<1x2x9x9xf32>
  return %dx : tensor<1x2x9x9xf32>
}

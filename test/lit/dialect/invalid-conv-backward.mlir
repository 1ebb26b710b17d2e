// conv2d_backward_data: the forward input's size (input_size) must give grad_output's size (a 12x12 input, 3x3
// filter, stride 2 gives 5x5, not 4x4).
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-conv-backward.mlir:[[# @LINE + 3]]:9: error: 'prim.conv2d_backward_data' op grad_output is 4x4 but a 12x12 input (input_size) with a 3x3 filter gives a 5x5 output{{$}}
// CHECK-NOT: {{.}}
func.func @f(%dy: tensor<1x4x4x4xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x3x12x12xf32> {
  %dx = "prim.conv2d_backward_data"(%dy, %w) {strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1, layout = "NCHW", filter_layout = "KCRS", input_size = array<i64: 12, 12>} : (tensor<1x4x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<1x3x12x12xf32>
  return %dx : tensor<1x3x12x12xf32>
}

// layer_norm_backward: grad_output has the input's shape.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-layer-norm-backward.mlir:[[# @LINE + 3]]:9: error: 'prim.layer_norm_backward' op input 2x7x5 must have the shape of grad_output 2x5x7{{$}}
// CHECK-NOT: {{.}}
func.func @f(%dy: tensor<2x5x7xf32>, %x: tensor<2x7x5xf32>) -> tensor<2x7x5xf32> {
  %dx = "prim.layer_norm_backward"(%dy, %x) {epsilon = 1.0e-5, normalized_ndim = 1, operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x5x7xf32>, tensor<2x7x5xf32>) -> tensor<2x7x5xf32>
  return %dx : tensor<2x7x5xf32>
}

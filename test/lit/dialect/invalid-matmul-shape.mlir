// matmul: the contraction sizes must agree.
// The diagnostic is exactly one line, file:line:col of the op, naming the op; exit status 1.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-matmul-shape.mlir:[[# @LINE + 3]]:8: error: 'prim.matmul' op contraction sizes differ: 2x3 @ 4x5{{$}}
// CHECK-NOT: {{.}}
func.func @f(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  %y = "prim.matmul"(%a, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return %y : tensor<2x5xf32>
}

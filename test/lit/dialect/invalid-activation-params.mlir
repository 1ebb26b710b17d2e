// clamp takes two parameters.
// The diagnostic is exactly one line, file:line:col of the op, naming the op; exit status 1.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-activation-params.mlir:[[# @LINE + 3]]:8: error: 'prim.matmul' op activation 'clamp' takes 2 parameters, got 1{{$}}
// CHECK-NOT: {{.}}
func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x5xf32>) -> tensor<2x5xf32> {
  %y = "prim.matmul"(%a, %b) {activation = "clamp", activation_params = array<f64: 6.0>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
  return %y : tensor<2x5xf32>
}

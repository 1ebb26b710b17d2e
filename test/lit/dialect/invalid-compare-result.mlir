// A comparison's result is a bool (i8): an f32 result is rejected, naming the inferred element type.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-compare-result.mlir:[[# @LINE + 3]]:8: error: 'prim.compare' op result element type f32 differs from the inferred bool{{$}}
// CHECK-NOT: {{.}}
func.func @f(%a: tensor<2x3xi64>, %b: tensor<2x3xi64>) -> tensor<2x3xf32> {
  %y = "prim.compare"(%a, %b) {kind = "lt"} : (tensor<2x3xi64>, tensor<2x3xi64>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

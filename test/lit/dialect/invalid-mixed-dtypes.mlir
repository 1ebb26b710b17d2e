// The operands of an arithmetic op share one element type: f32 + f16 is rejected.
// The diagnostic is exactly one line, file:line:col of the op, naming the op; exit status 1.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-mixed-dtypes.mlir:[[# @LINE + 3]]:8: error: 'prim.add' op operands mix dtypes f16, f32{{$}}
// CHECK-NOT: {{.}}
func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) -> tensor<2x3xf32> {
  %y = "prim.add"(%a, %b) : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// Malformed text: the parser's diagnostic, one line at the offending token (the missing ')').
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-syntax.mlir:[[# @LINE + 3]]:22: error: expected ')' to end operand list{{$}}
// CHECK-NOT: {{.}}
func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y = "prim.relu"(%a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// Every attribute of the op table is required (IRDL).
// The diagnostic is exactly one line, file:line:col of the op, naming the op; exit status 1.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-missing-attr.mlir:[[# @LINE + 3]]:8: error: 'prim.softmax' op attribute "axis" is expected but not provided{{$}}
// CHECK-NOT: {{.}}
func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y = "prim.softmax"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

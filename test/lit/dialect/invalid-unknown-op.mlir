// prim does not allow unknown operations.
// The diagnostic is exactly one line, file:line:col of the op, naming the op; exit status 1.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-unknown-op.mlir:[[# @LINE + 3]]:8: error: unregistered operation 'prim.frobnicate' found in dialect ('prim') that does not allow unknown operations{{$}}
// CHECK-NOT: {{.}}
func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y = "prim.frobnicate"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// reshape keeps the element count: 2x3 (6) to 7 is rejected.
// The diagnostic is exactly one line, file:line:col of the op, naming the op; exit status 1.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// Read from stdin, the file is called <stdin>.
// RUN: not openprim-opt - --verify-only < %s 2>&1 | filecheck %s --check-prefix=STDIN
// CHECK: {{^(.*/)?}}invalid-reshape.mlir:[[# @LINE + 4]]:8: error: 'prim.reshape' op cannot reshape 2x3 to 7: element counts differ{{$}}
// CHECK-NOT: {{.}}
// STDIN: {{^}}<stdin>:[[# @LINE + 2]]:8: error: 'prim.reshape' op cannot reshape 2x3 to 7: element counts differ{{$}}
func.func @f(%a: tensor<2x3xf32>) -> tensor<7xf32> {
  %y = "prim.reshape"(%a) : (tensor<2x3xf32>) -> tensor<7xf32>
  return %y : tensor<7xf32>
}

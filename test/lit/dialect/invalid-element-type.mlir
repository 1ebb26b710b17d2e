// A float-only op refuses an integer tensor (integers take cast, compare, where, gather, integer arithmetic).
// The diagnostic is exactly one line, file:line:col of the op, naming the op; exit status 1.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-element-type.mlir:[[# @LINE + 3]]:8: error: 'prim.relu' op takes float tensors (f32, f16, bf16), got i32: cast the operand first{{$}}
// CHECK-NOT: {{.}}
func.func @f(%a: tensor<2x3xi32>) -> tensor<2x3xi32> {
  %y = "prim.relu"(%a) : (tensor<2x3xi32>) -> tensor<2x3xi32>
  return %y : tensor<2x3xi32>
}

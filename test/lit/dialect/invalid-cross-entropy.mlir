// cross_entropy: one integer target per row of the logits.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-cross-entropy.mlir:[[# @LINE + 3]]:8: error: 'prim.cross_entropy' op targets must be [4] (one class per row of the logits), got 5{{$}}
// CHECK-NOT: {{.}}
func.func @f(%x: tensor<4x7xf32>, %t: tensor<5xi64>) -> tensor<1xf32> {
  %l = "prim.cross_entropy"(%x, %t) : (tensor<4x7xf32>, tensor<5xi64>) -> tensor<1xf32>
  return %l : tensor<1xf32>
}

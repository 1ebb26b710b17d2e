// reduce: kind is one of sum, mean, max, min.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-reduce.mlir:[[# @LINE + 3]]:8: error: 'prim.reduce' op kind must be one of ('sum', 'mean', 'max', 'min'), got 'prod'{{$}}
// CHECK-NOT: {{.}}
func.func @f(%x: tensor<5x7xf32>) -> tensor<5xf32> {
  %y = "prim.reduce"(%x) {kind = "prod", axes = array<i64: 1>, keepdims = 0} : (tensor<5x7xf32>) -> tensor<5xf32>
  return %y : tensor<5xf32>
}

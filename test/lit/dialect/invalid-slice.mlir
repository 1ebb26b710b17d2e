// slice: every axis needs 0 <= start < end <= size (an end past the axis is rejected, not clamped).
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-slice.mlir:[[# @LINE + 3]]:8: error: 'prim.slice' op axis 1 of size 7: needs 0 <= start < end <= 7, got start 2, end 9{{$}}
// CHECK-NOT: {{.}}
func.func @f(%x: tensor<5x7xf32>) -> tensor<5x7xf32> {
  %y = "prim.slice"(%x) {starts = array<i64: 0, 2>, ends = array<i64: 5, 9>, steps = array<i64: 1, 1>} : (tensor<5x7xf32>) -> tensor<5x7xf32>
  return %y : tensor<5x7xf32>
}

// slice (static starts, ends, steps on every axis) and reduce (sum/mean/max/min over axes, keepdims).
// RUN: openprim-opt %s --verify-only | filecheck %s

// Rows 1 and 3 of 5 (step 2), columns 2..6 of 7: 2x5.
// CHECK-LABEL: func.func @slice
// CHECK: "prim.slice"(%arg0) {ends = array<i64: 5, 7>, starts = array<i64: 1, 2>, steps = array<i64: 2, 1>} : (tensor<5x7xf32>) -> tensor<2x5xf32>
func.func @slice(%x: tensor<5x7xf32>) -> tensor<2x5xf32> {
  %0 = "prim.slice"(%x) {starts = array<i64: 1, 2>, ends = array<i64: 5, 7>, steps = array<i64: 2, 1>} : (tensor<5x7xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// Axes may be negative; keepdims = 1 keeps them as size 1, 0 drops them (every axis: a 0-d result).
// CHECK-LABEL: func.func @reduce
// CHECK:      "prim.reduce"(%arg0) {axes = array<i64: 1, -1>, keepdims = 1 : i64, kind = "mean"} : (tensor<2x3x5xf16>) -> tensor<2x1x1xf16>
// CHECK-NEXT: "prim.reduce"(%arg0) {axes = array<i64: 0, 2>, keepdims = 0 : i64, kind = "max"} : (tensor<2x3x5xf16>) -> tensor<3xf16>
// CHECK-NEXT: "prim.reduce"(%arg0) {axes = array<i64: 0, 1, 2>, keepdims = 0 : i64, kind = "sum"} : (tensor<2x3x5xf16>) -> tensor<f16>
func.func @reduce(%x: tensor<2x3x5xf16>) -> (tensor<2x1x1xf16>, tensor<3xf16>, tensor<f16>) {
  %0 = "prim.reduce"(%x) {kind = "mean", axes = array<i64: 1, -1>, keepdims = 1} : (tensor<2x3x5xf16>) -> tensor<2x1x1xf16>
  %1 = "prim.reduce"(%x) {kind = "max", axes = array<i64: 0, 2>, keepdims = 0} : (tensor<2x3x5xf16>) -> tensor<3xf16>
  %2 = "prim.reduce"(%x) {kind = "sum", axes = array<i64: 0, 1, 2>, keepdims = 0} : (tensor<2x3x5xf16>) -> tensor<f16>
  return %0, %1, %2 : tensor<2x1x1xf16>, tensor<3xf16>, tensor<f16>
}

// A transpose that moves only size-1 dims is a view: prim-select makes it a reshape (no kernel).
// ConvNeXt's head: global pool -> LayerNorm2d (permute to NHWC, LayerNorm, permute back) -> flatten; after
// the layout rewrite the permutes of the [N, 1, 1, C] map (the pool's back to NCHW, LayerNorm2d's two)
// are all views.
// RUN: openprim-opt %s -p prim-select | filecheck %s

// CHECK-LABEL: func.func @pool_norm_head
// CHECK:      "prim.global_avg_pool"(%{{.+}}) {layout = "NHWC"}
// CHECK-NOT:  "prim.transpose"
// CHECK:      %[[N:.+]] = "prim.layer_norm"
// CHECK-NEXT: %[[R:.+]] = "prim.reshape"(%[[N]]) : (tensor<2x1x1x3xf32>) -> tensor<2x3x1x1xf32>
// CHECK-NOT:  "prim.transpose"
// CHECK:      return
func.func @pool_norm_head(%x: tensor<2x3x5x5xf32>) -> tensor<2x3xf32> {
  %s = "prim.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %p = "prim.global_avg_pool"(%x) {layout = "NCHW"} : (tensor<2x3x5x5xf32>) -> tensor<2x3x1x1xf32>
  %t = "prim.transpose"(%p) {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x3x1x1xf32>) -> tensor<2x1x1x3xf32>
  %n = "prim.layer_norm"(%t, %s, %s) {epsilon = 1.0e-6, normalized_ndim = 1, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<2x1x1x3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x1x1x3xf32>
  %b = "prim.transpose"(%n) {perm = array<i64: 0, 3, 1, 2>} : (tensor<2x1x1x3xf32>) -> tensor<2x3x1x1xf32>
  %f = "prim.reshape"(%b) : (tensor<2x3x1x1xf32>) -> tensor<2x3xf32>
  return %f : tensor<2x3xf32>
}

// A transpose that reorders dims larger than 1 stays.
// CHECK-LABEL: func.func @real_transpose_stays
// CHECK:      "prim.transpose"(%arg0) {perm = array<i64: 1, 0, 2>}
func.func @real_transpose_stays(%x: tensor<2x3x1xf32>) -> tensor<3x2x1xf32> {
  %t = "prim.transpose"(%x) {perm = array<i64: 1, 0, 2>} : (tensor<2x3x1xf32>) -> tensor<3x2x1xf32>
  return %t : tensor<3x2x1xf32>
}

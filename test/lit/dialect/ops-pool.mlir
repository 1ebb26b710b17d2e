// Pooling: max_pool2d (dilated, padded), avg_pool2d with ceil_mode, global_avg_pool (both layouts).
// RUN: openprim-opt %s --verify-only | filecheck %s

// CHECK-LABEL: func.func @pools
// CHECK:      %[[M:.+]] = "prim.max_pool2d"(%arg0)
// CHECK-SAME: ceil_mode = 0 : i64, dilations = array<i64: 1, 1>, kernel = array<i64: 3, 3>, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>
// CHECK-SAME: (tensor<1x2x5x5xf32>) -> tensor<1x2x3x3xf32>
// CHECK:      %[[A:.+]] = "prim.avg_pool2d"(%[[M]])
// CHECK-SAME: ceil_mode = 1 : i64, count_include_pad = 0 : i64
// CHECK-SAME: (tensor<1x2x3x3xf32>) -> tensor<1x2x2x2xf32>
// CHECK:      %[[G:.+]] = "prim.global_avg_pool"(%[[A]]) {layout = "NCHW"} : (tensor<1x2x2x2xf32>) -> tensor<1x2x1x1xf32>
// CHECK:      "prim.global_avg_pool"(%arg1) {layout = "NHWC"} : (tensor<1x4x4x2xf32>) -> tensor<1x1x1x2xf32>
func.func @pools(%x: tensor<1x2x5x5xf32>, %y: tensor<1x4x4x2xf32>) -> (tensor<1x2x1x1xf32>, tensor<1x1x1x2xf32>) {
  %0 = "prim.max_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = 0, layout = "NCHW"} : (tensor<1x2x5x5xf32>) -> tensor<1x2x3x3xf32>
  %1 = "prim.avg_pool2d"(%0) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, ceil_mode = 1, count_include_pad = 0, layout = "NCHW"} : (tensor<1x2x3x3xf32>) -> tensor<1x2x2x2xf32>
  %2 = "prim.global_avg_pool"(%1) {layout = "NCHW"} : (tensor<1x2x2x2xf32>) -> tensor<1x2x1x1xf32>
  %3 = "prim.global_avg_pool"(%y) {layout = "NHWC"} : (tensor<1x4x4x2xf32>) -> tensor<1x1x1x2xf32>
  return %2, %3 : tensor<1x2x1x1xf32>, tensor<1x1x1x2xf32>
}

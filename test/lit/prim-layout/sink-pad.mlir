// A constant pad between an NCHW convolution and an NCHW max pool (BiT's stem) runs in NHWC: the
// transpose moves past it, its pads move to the NHWC axes (H by 1 and 2, W by 3 and 4, value kept), and the
// transposes of the two layers cancel. Only the network's two ends keep a transpose.
// RUN: openprim-opt %s -p prim-layout | filecheck %s

// CHECK-LABEL: func.func @stem
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x3x6x5xf32>) -> tensor<2x6x5x3xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[A:.+]] = "prim.conv2d"(%[[X]], %{{[^,]+}}) {{.*}}layout = "NHWC"{{.*}} -> tensor<2x6x5x4xf32>
// CHECK-NEXT:  %[[P:.+]] = "prim.pad"(%[[A]]) {pads = array<i64: 0, 1, 3, 0, 0, 2, 4, 0>, value = -1.500000e+00 : f64} : (tensor<2x6x5x4xf32>) -> tensor<2x9x12x4xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[M:.+]] = "prim.max_pool2d"(%[[P]]) {{.*}}layout = "NHWC"
// CHECK-NEXT:  %[[Y:.+]] = "prim.transpose"(%[[M]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  return %[[Y]]
func.func @stem(%x: tensor<2x3x6x5xf32>) -> tensor<2x4x4x6xf32> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<4x3x1x1xf32>} : () -> tensor<4x3x1x1xf32>
  %a = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x3x6x5xf32>, tensor<4x3x1x1xf32>) -> tensor<2x4x6x5xf32>
  %p = "prim.pad"(%a) {pads = array<i64: 0, 0, 1, 3, 0, 0, 2, 4>, value = -1.5 : f64} : (tensor<2x4x6x5xf32>) -> tensor<2x4x9x12xf32>
  %m = "prim.max_pool2d"(%p) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0, layout = "NCHW"} : (tensor<2x4x9x12xf32>) -> tensor<2x4x4x6xf32>
  return %m : tensor<2x4x4x6xf32>
}

// A channel shuffle of an NCHW map (reshape [N, C, H, W] -> [N, g, C/g, H, W], transpose (0, 2, 1, 3, 4),
// reshape back) between two NCHW convolutions runs in NHWC: reshape [N, H, W, g, C/g], transpose of the
// last two axes, reshape back; the transposes of the convolutions on either side cancel.
// A reshape -> transpose -> reshape that moves a spatial axis is no channel shuffle and stays NCHW.
// RUN: openprim-opt %s -p prim-layout | filecheck %s

// CHECK-LABEL: func.func @shuffle
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x4x5x6xf32>) -> tensor<1x5x6x4xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[A:.+]] = "prim.conv2d"(%[[X]], %{{[^,]+}}) {{.*}}layout = "NHWC"{{.*}} -> tensor<1x5x6x12xf32>
// CHECK-NEXT:  %[[R:.+]] = "prim.reshape"(%[[A]]) : (tensor<1x5x6x12xf32>) -> tensor<1x5x6x4x3xf32>
// CHECK-NEXT:  %[[T:.+]] = "prim.transpose"(%[[R]]) {perm = array<i64: 0, 1, 2, 4, 3>} : (tensor<1x5x6x4x3xf32>) -> tensor<1x5x6x3x4xf32>
// CHECK-NEXT:  %[[M:.+]] = "prim.reshape"(%[[T]]) : (tensor<1x5x6x3x4xf32>) -> tensor<1x5x6x12xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[B:.+]] = "prim.conv2d"(%[[M]], %{{[^,]+}}) {{.*}}layout = "NHWC"
// CHECK-NEXT:  %[[Y:.+]] = "prim.transpose"(%[[B]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  return %[[Y]]
func.func @shuffle(%x: tensor<1x4x5x6xf32>) -> tensor<1x2x5x6xf32> {
  %w1 = "prim.constant"() {value = dense<0.5> : tensor<12x4x1x1xf32>} : () -> tensor<12x4x1x1xf32>
  %w2 = "prim.constant"() {value = dense<0.25> : tensor<2x12x1x1xf32>} : () -> tensor<2x12x1x1xf32>
  %a = "prim.conv2d"(%x, %w1) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x5x6xf32>, tensor<12x4x1x1xf32>) -> tensor<1x12x5x6xf32>
  %r = "prim.reshape"(%a) : (tensor<1x12x5x6xf32>) -> tensor<1x4x3x5x6xf32>
  %t = "prim.transpose"(%r) {perm = array<i64: 0, 2, 1, 3, 4>} : (tensor<1x4x3x5x6xf32>) -> tensor<1x3x4x5x6xf32>
  %m = "prim.reshape"(%t) : (tensor<1x3x4x5x6xf32>) -> tensor<1x12x5x6xf32>
  %b = "prim.conv2d"(%m, %w2) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x12x5x6xf32>, tensor<2x12x1x1xf32>) -> tensor<1x2x5x6xf32>
  return %b : tensor<1x2x5x6xf32>
}

// CHECK-LABEL: func.func @not_a_shuffle
// CHECK:       "prim.conv2d"
// CHECK-NEXT:  %[[A:.+]] = "prim.transpose"(%{{.+}}) {perm = array<i64: 0, 3, 1, 2>} : (tensor<1x5x6x12xf32>) -> tensor<1x12x5x6xf32>
// CHECK-NEXT:  %[[R:.+]] = "prim.reshape"(%[[A]]) : (tensor<1x12x5x6xf32>) -> tensor<1x4x3x5x6xf32>
// CHECK-NEXT:  %[[T:.+]] = "prim.transpose"(%[[R]]) {perm = array<i64: 0, 1, 2, 4, 3>} : (tensor<1x4x3x5x6xf32>) -> tensor<1x4x3x6x5xf32>
// CHECK-NEXT:  "prim.reshape"(%[[T]]) : (tensor<1x4x3x6x5xf32>) -> tensor<1x12x6x5xf32>
func.func @not_a_shuffle(%x: tensor<1x4x5x6xf32>) -> tensor<1x12x6x5xf32> {
  %w1 = "prim.constant"() {value = dense<0.5> : tensor<12x4x1x1xf32>} : () -> tensor<12x4x1x1xf32>
  %a = "prim.conv2d"(%x, %w1) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x5x6xf32>, tensor<12x4x1x1xf32>) -> tensor<1x12x5x6xf32>
  %r = "prim.reshape"(%a) : (tensor<1x12x5x6xf32>) -> tensor<1x4x3x5x6xf32>
  %t = "prim.transpose"(%r) {perm = array<i64: 0, 1, 2, 4, 3>} : (tensor<1x4x3x5x6xf32>) -> tensor<1x4x3x6x5xf32>
  %m = "prim.reshape"(%t) : (tensor<1x4x3x6x5xf32>) -> tensor<1x12x6x5xf32>
  return %m : tensor<1x12x6x5xf32>
}

// An NCHW squeeze-and-excitation block: the channel scale [N, C, 1, 1] multiplies the image [N, C, H, W]
// (a broadcast). The transpose of the image moves past the multiply and the scale is transposed back to
// [N, 1, 1, C], which cancels with the transpose that made it: the block runs in NHWC between the
// network's two layout transposes, with none around the multiply.
// RUN: openprim-opt %s -p prim-layout | filecheck %s

// CHECK-LABEL: func.func @se
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[Y:.+]] = "prim.conv2d"(%[[X]], %{{[^,]+}}) {{.*}}layout = "NHWC"
// CHECK-NEXT:  %[[P:.+]] = "prim.global_avg_pool"(%[[Y]]) {layout = "NHWC"} : (tensor<1x5x6x8xf32>) -> tensor<1x1x1x8xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[S:.+]] = "prim.conv2d"(%[[P]], %{{[^,]+}}) {{.*}}layout = "NHWC"
// CHECK-NEXT:  %[[M:.+]] = "prim.mul"(%[[Y]], %[[S]]) : (tensor<1x5x6x8xf32>, tensor<1x1x1x8xf32>) -> tensor<1x5x6x8xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[Z:.+]] = "prim.conv2d"(%[[M]], %{{[^,]+}}) {{.*}}layout = "NHWC"
// CHECK-NEXT:  %[[R:.+]] = "prim.transpose"(%[[Z]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  return %[[R]]
func.func @se(%x: tensor<1x4x5x6xf32>) -> tensor<1x2x5x6xf32> {
  %w1 = "prim.constant"() {value = dense<0.5> : tensor<8x4x1x1xf32>} : () -> tensor<8x4x1x1xf32>
  %w2 = "prim.constant"() {value = dense<0.25> : tensor<8x8x1x1xf32>} : () -> tensor<8x8x1x1xf32>
  %w3 = "prim.constant"() {value = dense<0.125> : tensor<2x8x1x1xf32>} : () -> tensor<2x8x1x1xf32>
  %y = "prim.conv2d"(%x, %w1) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x5x6xf32>, tensor<8x4x1x1xf32>) -> tensor<1x8x5x6xf32>
  %p = "prim.global_avg_pool"(%y) {layout = "NCHW"} : (tensor<1x8x5x6xf32>) -> tensor<1x8x1x1xf32>
  %s = "prim.conv2d"(%p, %w2) {activation = "sigmoid", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x8x1x1xf32>, tensor<8x8x1x1xf32>) -> tensor<1x8x1x1xf32>
  %m = "prim.mul"(%y, %s) : (tensor<1x8x5x6xf32>, tensor<1x8x1x1xf32>) -> tensor<1x8x5x6xf32>
  %z = "prim.conv2d"(%m, %w3) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x8x5x6xf32>, tensor<2x8x1x1xf32>) -> tensor<1x2x5x6xf32>
  return %z : tensor<1x2x5x6xf32>
}

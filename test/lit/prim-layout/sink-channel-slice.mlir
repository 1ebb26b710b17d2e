// A slice on the channel axis of an NCHW map between two NCHW convolutions (ShuffleNetV2's channel split)
// runs in NHWC: the transpose moves past it, the slice's bounds move to the last axis, and the
// transposes of the two convolutions cancel. Only the network's two ends keep a transpose.
// RUN: openprim-opt %s -p prim-layout | filecheck %s

// CHECK-LABEL: func.func @split
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>} : (tensor<3x4x5x6xf32>) -> tensor<3x5x6x4xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[A:.+]] = "prim.conv2d"(%[[X]], %{{[^,]+}}) {{.*}}layout = "NHWC"{{.*}} -> tensor<3x5x6x7xf32>
// CHECK-NEXT:  %[[S:.+]] = "prim.slice"(%[[A]]) {ends = array<i64: 3, 5, 6, 7>, starts = array<i64: 0, 0, 0, 2>, steps = array<i64: 1, 1, 1, 2>} : (tensor<3x5x6x7xf32>) -> tensor<3x5x6x3xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[B:.+]] = "prim.conv2d"(%[[S]], %{{[^,]+}}) {{.*}}layout = "NHWC"
// CHECK-NEXT:  %[[Y:.+]] = "prim.transpose"(%[[B]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  return %[[Y]]
func.func @split(%x: tensor<3x4x5x6xf32>) -> tensor<3x2x5x6xf32> {
  %w1 = "prim.constant"() {value = dense<0.5> : tensor<7x4x1x1xf32>} : () -> tensor<7x4x1x1xf32>
  %w2 = "prim.constant"() {value = dense<0.25> : tensor<2x3x1x1xf32>} : () -> tensor<2x3x1x1xf32>
  %a = "prim.conv2d"(%x, %w1) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<3x4x5x6xf32>, tensor<7x4x1x1xf32>) -> tensor<3x7x5x6xf32>
  %s = "prim.slice"(%a) {starts = array<i64: 0, 2, 0, 0>, ends = array<i64: 3, 7, 5, 6>, steps = array<i64: 1, 2, 1, 1>} : (tensor<3x7x5x6xf32>) -> tensor<3x3x5x6xf32>
  %b = "prim.conv2d"(%s, %w2) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<3x3x5x6xf32>, tensor<2x3x1x1xf32>) -> tensor<3x2x5x6xf32>
  return %b : tensor<3x2x5x6xf32>
}

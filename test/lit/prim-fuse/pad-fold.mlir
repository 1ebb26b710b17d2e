// A zero pad of H and W before a convolution is the convolution's own padding (TensorFlow-style "same"
// padding as Hugging Face's MobileNets export it: a pad before each strided or depthwise layer).
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// The pad's [top, left] = [0, 1] and [bottom, right] = [2, 1] add to the convolution's [1, 1, 1, 1].
// CHECK-LABEL: func.func @folded
// CHECK-NOT:   "prim.pad"
// CHECK:       "prim.conv2d"(%arg0, %{{[^)]+}}) {{.*}}padding = array<i64: 1, 2, 3, 2>
// CHECK-NOT:   "prim.pad"
func.func @folded(%x: tensor<1x3x8x8xf32>) -> tensor<1x4x5x5xf32> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<4x3x3x3xf32>} : () -> tensor<4x3x3x3xf32>
  %p = "prim.pad"(%x) {pads = array<i64: 0, 0, 0, 1, 0, 0, 2, 1>, value = 0.0 : f64} : (tensor<1x3x8x8xf32>) -> tensor<1x3x10x10xf32>
  %y = "prim.conv2d"(%p, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x3x10x10xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x5x5xf32>
  return %y : tensor<1x4x5x5xf32>
}

// NHWC: H and W are dims 1 and 2; the pad also read by a relu stays for it.
// CHECK-LABEL: func.func @nhwc_shared
// CHECK:       %[[P:.+]] = "prim.pad"(%arg0)
// CHECK:       "prim.conv2d"(%arg0, %{{[^)]+}}) {{.*}}padding = array<i64: 2, 0, 1, 0>
// CHECK:       "prim.relu"(%[[P]])
func.func @nhwc_shared(%x: tensor<1x5x5x4xf32>) -> (tensor<1x6x3x4xf32>, tensor<1x8x5x4xf32>) {
  %w = "prim.constant"() {value = dense<0.5> : tensor<4x3x3x4xf32>} : () -> tensor<4x3x3x4xf32>
  %p = "prim.pad"(%x) {pads = array<i64: 0, 2, 0, 0, 0, 1, 0, 0>, value = 0.0 : f64} : (tensor<1x5x5x4xf32>) -> tensor<1x8x5x4xf32>
  %y = "prim.conv2d"(%p, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 1, layout = "NHWC", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x8x5x4xf32>, tensor<4x3x3x4xf32>) -> tensor<1x6x3x4xf32>
  %r = "prim.relu"(%p) : (tensor<1x8x5x4xf32>) -> tensor<1x8x5x4xf32>
  return %y, %r : tensor<1x6x3x4xf32>, tensor<1x8x5x4xf32>
}

// Not folded: a pad of another value, a pad of the channels.
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-2: "prim.pad"
func.func @kept(%x: tensor<1x3x8x8xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) {
  %w = "prim.constant"() {value = dense<0.5> : tensor<4x3x3x3xf32>} : () -> tensor<4x3x3x3xf32>
  %w4 = "prim.constant"() {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> tensor<4x4x3x3xf32>
  %a = "prim.pad"(%x) {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>, value = 1.0 : f64} : (tensor<1x3x8x8xf32>) -> tensor<1x3x10x10xf32>
  %ya = "prim.conv2d"(%a, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x3x10x10xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
  %b = "prim.pad"(%x) {pads = array<i64: 0, 1, 1, 1, 0, 0, 1, 1>, value = 0.0 : f64} : (tensor<1x3x8x8xf32>) -> tensor<1x4x10x10xf32>
  %yb = "prim.conv2d"(%b, %w4) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x10x10xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x8x8xf32>
  return %ya, %yb : tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>
}

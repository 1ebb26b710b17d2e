// Back-to-back NCHW layers: each is wrapped in transposes, then the inverse pairs between layers
// cancel, so the network pays one transpose at each end.
// RUN: openprim-opt %s -p prim-layout | filecheck %s
// With prim-fuse first, the relu between the convs is an epilogue and the same holds.
// RUN: openprim-opt %s -p prim-fuse,prim-layout | filecheck %s --check-prefix=FUSED

// CHECK-LABEL: func.func @conv_conv_pool
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x2x4x4xf32>) -> tensor<1x4x4x2xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[A:.+]] = "prim.conv2d"(%[[X]], %{{[^,]+}}) {{.*}}layout = "NHWC"
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[B:.+]] = "prim.conv2d"(%[[A]], %{{[^,]+}}) {{.*}}layout = "NHWC"
// CHECK-NEXT:  %[[P:.+]] = "prim.max_pool2d"(%[[B]]) {{.*}}layout = "NHWC"
// CHECK-NEXT:  %[[R:.+]] = "prim.transpose"(%[[P]]) {perm = array<i64: 0, 3, 1, 2>} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
// CHECK-NEXT:  return %[[R]]
// CHECK-NEXT:  }
// FUSED-LABEL: func.func @conv_conv_pool
// FUSED-COUNT-1: "prim.transpose"
// FUSED-NOT:   "prim.transpose"
// FUSED:       "prim.conv2d"
// FUSED-NOT:   "prim.transpose"
// FUSED:       "prim.conv2d"
// FUSED-NOT:   "prim.transpose"
// FUSED:       "prim.max_pool2d"
// FUSED-NEXT:  "prim.transpose"(%{{.+}}) {perm = array<i64: 0, 3, 1, 2>}
// FUSED-NEXT:  return
func.func @conv_conv_pool(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x2x3x3xf32>} : () -> tensor<2x2x3x3xf32>
  %c1 = "prim.conv2d"(%x, %w) {activation = "relu", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32>
  %c2 = "prim.conv2d"(%c1, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32>
  %p = "prim.max_pool2d"(%c2) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0, layout = "NCHW"} : (tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32>
  return %p : tensor<1x2x2x2xf32>
}

// conv -> relu -> conv: unfused, the transposes move past the relu (layout does not matter to it) and
// cancel, so the relu runs in NHWC; fused, the relu is the first conv's epilogue. Either way only the
// two end transposes remain.
// CHECK-LABEL: func.func @conv_relu_conv
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[A:.+]] = "prim.conv2d"(%[[X]], %{{[^,]+}}) {{.*}}layout = "NHWC"
// CHECK-NEXT:  %[[R:.+]] = "prim.relu"(%[[A]]) : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[B:.+]] = "prim.conv2d"(%[[R]], %{{[^,]+}}) {{.*}}layout = "NHWC"
// CHECK-NEXT:  %[[Y:.+]] = "prim.transpose"(%[[B]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  return %[[Y]]
// FUSED-LABEL: func.func @conv_relu_conv
// FUSED-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>}
// FUSED-NOT:   "prim.transpose"
// FUSED:       %[[A:.+]] = "prim.conv2d"(%[[X]], %{{[^,]+}}) {activation = "relu"
// FUSED-NOT:   "prim.transpose"
// FUSED:       %[[B:.+]] = "prim.conv2d"(%[[A]], %{{[^,]+}}) {activation = "none"
// FUSED-NEXT:  %[[R:.+]] = "prim.transpose"(%[[B]]) {perm = array<i64: 0, 3, 1, 2>}
// FUSED-NEXT:  return %[[R]]
func.func @conv_relu_conv(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x2x3x3xf32>} : () -> tensor<2x2x3x3xf32>
  %c1 = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32>
  %r = "prim.relu"(%c1) : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c2 = "prim.conv2d"(%r, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32>
  return %c2 : tensor<1x2x4x4xf32>
}

// Transposes move past the ops that do not care about layout, so NCHW networks with concats between
// layers (SqueezeNet's fire modules, Inception) pay one transpose at each end: concat(T(a), T(b), axis 1)
// becomes T(concat(a, b, axis 3)), the relu after it runs in NHWC, and the input that two convolutions
// read is transposed once.
// RUN: openprim-opt %s -p prim-layout | filecheck %s

// CHECK-LABEL: func.func @main
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x4x5x6xf32>) -> tensor<1x5x6x4xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[A:.+]] = "prim.conv2d"(%[[X]], %{{[^,]+}}) {{.*}}layout = "NHWC"
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[B:.+]] = "prim.conv2d"(%[[X]], %{{[^,]+}}) {{.*}}layout = "NHWC"
// CHECK-NEXT:  %[[C:.+]] = "prim.concat"(%[[A]], %[[B]]) {axis = 3 : i64} : (tensor<1x5x6x5xf32>, tensor<1x5x6x6xf32>) -> tensor<1x5x6x11xf32>
// CHECK-NEXT:  %[[R:.+]] = "prim.relu"(%[[C]]) : (tensor<1x5x6x11xf32>) -> tensor<1x5x6x11xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[D:.+]] = "prim.conv2d"(%[[R]], %{{[^,]+}}) {{.*}}layout = "NHWC"
// CHECK-NEXT:  %[[Y:.+]] = "prim.transpose"(%[[D]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  return %[[Y]]
func.func @main(%arg0: tensor<1x4x5x6xf32>) -> tensor<1x2x5x6xf32> attributes {prim.input_names = ["x"]} {
  %0 = "prim.constant"() {value = dense<1.000000e+00> : tensor<5x4x1x1xf32>} : () -> tensor<5x4x1x1xf32>
  %1 = "prim.conv2d"(%arg0, %0) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1 : i64, layout = "NCHW", operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x4x5x6xf32>, tensor<5x4x1x1xf32>) -> tensor<1x5x5x6xf32>
  %2 = "prim.constant"() {value = dense<1.000000e+00> : tensor<6x4x1x1xf32>} : () -> tensor<6x4x1x1xf32>
  %3 = "prim.conv2d"(%arg0, %2) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1 : i64, layout = "NCHW", operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x4x5x6xf32>, tensor<6x4x1x1xf32>) -> tensor<1x6x5x6xf32>
  %4 = "prim.concat"(%1, %3) {axis = 1 : i64} : (tensor<1x5x5x6xf32>, tensor<1x6x5x6xf32>) -> tensor<1x11x5x6xf32>
  %5 = "prim.relu"(%4) : (tensor<1x11x5x6xf32>) -> tensor<1x11x5x6xf32>
  %6 = "prim.constant"() {value = dense<1.000000e+00> : tensor<2x11x1x1xf32>} : () -> tensor<2x11x1x1xf32>
  %7 = "prim.conv2d"(%5, %6) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1 : i64, layout = "NCHW", operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x11x5x6xf32>, tensor<2x11x1x1xf32>) -> tensor<1x2x5x6xf32>
  return %7 : tensor<1x2x5x6xf32>
}

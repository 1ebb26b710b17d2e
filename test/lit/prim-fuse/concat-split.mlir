// 1x1 convolutions over a channel concat become one convolution per concat input, each the residual of
// the next (passes/concat_split.py): the bias and an incoming residual on the first, the activation on
// the last, the filter split along its input channels; the concat is gone. A max pool between the concat
// and the convolution moves onto each input. Where the convolution widens the concat, has a 3x3 filter
// or the concat has another use, nothing changes.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s
// Turned off, every concat stays:
// RUN: openprim-opt %s -p 'prim-fuse{concat-split=0}' | filecheck %s --check-prefix=OFF
// OFF-COUNT-4: "prim.concat"(%arg0, %arg1)

// A fire module's squeeze after a concat of 2 + 3 channels (NCHW, KCRS), with bias and relu.
// CHECK-LABEL: func.func @squeeze
// CHECK-NOT:   prim.concat
// CHECK:       %[[W1:.+]] = "prim.constant"() {value = dense<{{\[\[\[\[}}1.000000e+00]], {{\[\[}}2.000000e+00]]]]> : tensor<1x2x1x1xf32>}
// CHECK:       %[[Y1:.+]] = "prim.conv2d"(%arg0, %[[W1]], %{{[0-9]+}})
// CHECK-SAME:  activation = "none"
// CHECK-SAME:  operandSegmentSizes = array<i32: 1, 1, 1, 0>
// CHECK:       %[[W2:.+]] = "prim.constant"() {value = dense<{{\[\[\[\[}}3.000000e+00]], {{\[\[}}4.000000e+00]], {{\[\[}}5.000000e+00]]]]> : tensor<1x3x1x1xf32>}
// CHECK:       %[[Y:.+]] = "prim.conv2d"(%arg1, %[[W2]], %[[Y1]])
// CHECK-SAME:  activation = "relu"
// CHECK-SAME:  operandSegmentSizes = array<i32: 1, 1, 0, 1>
// CHECK-NEXT:  return %[[Y]]
func.func @squeeze(%a: tensor<1x2x4x4xf32>, %b: tensor<1x3x4x4xf32>) -> tensor<1x1x4x4xf32> {
  %c = "prim.concat"(%a, %b) {axis = 1} : (tensor<1x2x4x4xf32>, tensor<1x3x4x4xf32>) -> tensor<1x5x4x4xf32>
  %w = "prim.constant"() {value = dense<[[[[1.0]], [[2.0]], [[3.0]], [[4.0]], [[5.0]]]]> : tensor<1x5x1x1xf32>} : () -> tensor<1x5x1x1xf32>
  %bias = "prim.constant"() {value = dense<[0.5]> : tensor<1xf32>} : () -> tensor<1xf32>
  %y = "prim.conv2d"(%c, %w, %bias) {activation = "relu", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x5x4x4xf32>, tensor<1x5x1x1xf32>, tensor<1xf32>) -> tensor<1x1x4x4xf32>
  return %y : tensor<1x1x4x4xf32>
}

// Three inputs (a chain of two concats) and a max pool in between: a pool per input, three convolutions.
// CHECK-LABEL: func.func @pooled_chain
// CHECK-NOT:   prim.concat
// CHECK:       %[[P1:.+]] = "prim.max_pool2d"(%arg0) {{.*}} -> tensor<1x2x2x2xf32>
// CHECK:       %[[Y1:.+]] = "prim.conv2d"(%[[P1]], {{.*}}activation = "none"
// CHECK:       %[[P2:.+]] = "prim.max_pool2d"(%arg1) {{.*}} -> tensor<1x3x2x2xf32>
// CHECK:       %[[Y2:.+]] = "prim.conv2d"(%[[P2]], %{{.+}}, %[[Y1]]) {{.*}}activation = "none"
// CHECK:       %[[P3:.+]] = "prim.max_pool2d"(%arg2) {{.*}} -> tensor<1x1x2x2xf32>
// CHECK:       %[[Y:.+]] = "prim.conv2d"(%[[P3]], %{{.+}}, %[[Y2]]) {{.*}}activation = "relu"
// CHECK-NEXT:  return %[[Y]]
func.func @pooled_chain(%a: tensor<1x2x4x4xf32>, %b: tensor<1x3x4x4xf32>, %d: tensor<1x1x4x4xf32>) -> tensor<1x2x2x2xf32> {
  %c1 = "prim.concat"(%a, %b) {axis = 1} : (tensor<1x2x4x4xf32>, tensor<1x3x4x4xf32>) -> tensor<1x5x4x4xf32>
  %c = "prim.concat"(%c1, %d) {axis = 1} : (tensor<1x5x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x6x4x4xf32>
  %p = "prim.max_pool2d"(%c) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0, layout = "NCHW"} : (tensor<1x6x4x4xf32>) -> tensor<1x6x2x2xf32>
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x6x1x1xf32>} : () -> tensor<2x6x1x1xf32>
  %y = "prim.conv2d"(%p, %w) {activation = "relu", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x6x2x2xf32>, tensor<2x6x1x1xf32>) -> tensor<1x2x2x2xf32>
  return %y : tensor<1x2x2x2xf32>
}

// Kept: the convolution has as many output channels as the concat (SqueezeNet's classifier widens it).
// CHECK-LABEL: func.func @widening
// CHECK:       prim.concat
// CHECK:       prim.conv2d
func.func @widening(%a: tensor<1x2x4x4xf32>, %b: tensor<1x3x4x4xf32>) -> tensor<1x5x4x4xf32> {
  %c = "prim.concat"(%a, %b) {axis = 1} : (tensor<1x2x4x4xf32>, tensor<1x3x4x4xf32>) -> tensor<1x5x4x4xf32>
  %w = "prim.constant"() {value = dense<1.0> : tensor<5x5x1x1xf32>} : () -> tensor<5x5x1x1xf32>
  %y = "prim.conv2d"(%c, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x5x4x4xf32>, tensor<5x5x1x1xf32>) -> tensor<1x5x4x4xf32>
  return %y : tensor<1x5x4x4xf32>
}

// Kept: the concat has another use (it is also returned).
// CHECK-LABEL: func.func @concat_used_twice
// CHECK:       prim.concat
// CHECK:       prim.conv2d
func.func @concat_used_twice(%a: tensor<1x2x4x4xf32>, %b: tensor<1x3x4x4xf32>) -> (tensor<1x1x4x4xf32>, tensor<1x5x4x4xf32>) {
  %c = "prim.concat"(%a, %b) {axis = 1} : (tensor<1x2x4x4xf32>, tensor<1x3x4x4xf32>) -> tensor<1x5x4x4xf32>
  %w = "prim.constant"() {value = dense<1.0> : tensor<1x5x1x1xf32>} : () -> tensor<1x5x1x1xf32>
  %y = "prim.conv2d"(%c, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x5x4x4xf32>, tensor<1x5x1x1xf32>) -> tensor<1x1x4x4xf32>
  return %y, %c : tensor<1x1x4x4xf32>, tensor<1x5x4x4xf32>
}

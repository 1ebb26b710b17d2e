// Convolutions and batch norms of one input, summed, become one convolution (conv_branches.py).
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// RepVGG/MobileOne on a depthwise layer: 3x3 (bias [1, 2]) + 1x1 ([10, 20], no bias) + bn(x), then relu.
// bn: s = scale / sqrt(var + eps) = [2/2, 3/1] = [1, 3], bias = shift - mean s = [0.5 - 1, -1 - 6] = [-0.5, -7].
// Centre taps: 1 + 10 + 1 = 12 and 2 + 20 + 3 = 25; biases 1 - 0.5 = 0.5 and 2 - 7 = -5; the relu then fuses.
// CHECK-LABEL: func.func @repvgg_depthwise
// CHECK:      %[[W:.+]] = "prim.constant"() {value = dense<{{\[\[\[\[}}1.000000e+00, 1.000000e+00, 1.000000e+00], [1.000000e+00, 1.200000e+01, 1.000000e+00], [1.000000e+00, 1.000000e+00, 1.000000e+00]]], {{\[\[\[}}2.000000e+00, 2.000000e+00, 2.000000e+00], [2.000000e+00, 2.500000e+01, 2.000000e+00], [2.000000e+00, 2.000000e+00, 2.000000e+00]]]]> : tensor<2x1x3x3xf32>}
// CHECK-NEXT: %[[B:.+]] = "prim.constant"() {value = dense<[5.000000e-01, -5.000000e+00]> : tensor<2xf32>}
// CHECK-NEXT: %[[Y:.+]] = "prim.conv2d"(%arg0, %[[W]], %[[B]])
// CHECK-SAME: activation = "relu"
// CHECK-SAME: groups = 2
// CHECK-SAME: padding = array<i64: 1, 1, 1, 1>
// CHECK-NEXT: return %[[Y]]
func.func @repvgg_depthwise(%x: tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32> {
  %w3 = "prim.constant"() {value = dense<[[[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]], [[[2.0, 2.0, 2.0], [2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]]]> : tensor<2x1x3x3xf32>} : () -> tensor<2x1x3x3xf32>
  %b3 = "prim.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %w1 = "prim.constant"() {value = dense<[[[[10.0]]], [[[20.0]]]]> : tensor<2x1x1x1xf32>} : () -> tensor<2x1x1x1xf32>
  %scale = "prim.constant"() {value = dense<[2.0, 3.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %shift = "prim.constant"() {value = dense<[0.5, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "prim.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "prim.constant"() {value = dense<[3.0, 0.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %c3 = "prim.conv2d"(%x, %w3, %b3) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 2, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x2x3x3xf32>, tensor<2x1x3x3xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
  %c1 = "prim.conv2d"(%x, %w1) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 2, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x3x3xf32>, tensor<2x1x1x1xf32>) -> tensor<1x2x3x3xf32>
  %bn = "prim.batch_norm"(%x, %scale, %shift, %mean, %var) {epsilon = 1.0, layout = "NCHW"} : (tensor<1x2x3x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
  %s = "prim.add"(%c3, %c1) : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %t = "prim.add"(%s, %bn) : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %r = "prim.relu"(%t) : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  return %r : tensor<1x2x3x3xf32>
}

// Stride 2 in NHWC with KRSC filters: the 1x1 (5, bias 0.25) lands on the 3x3's centre tap (1 + 5 = 6).
// CHECK-LABEL: func.func @strided_nhwc
// CHECK:      %[[W:.+]] = "prim.constant"() {value = dense<{{\[\[\[\[}}1.000000e+00], [1.000000e+00], [1.000000e+00]], {{\[\[}}1.000000e+00], [6.000000e+00], [1.000000e+00]], {{\[\[}}1.000000e+00], [1.000000e+00], [1.000000e+00]]]]> : tensor<1x3x3x1xf32>}
// CHECK-NEXT: %[[B:.+]] = "prim.constant"() {value = dense<2.500000e-01> : tensor<1xf32>}
// CHECK-NEXT: %[[Y:.+]] = "prim.conv2d"(%arg0, %[[W]], %[[B]])
// CHECK-SAME: filter_layout = "KRSC"
// CHECK-SAME: padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>
// CHECK-NEXT: return %[[Y]]
func.func @strided_nhwc(%x: tensor<1x4x4x1xf32>) -> tensor<1x2x2x1xf32> {
  %w3 = "prim.constant"() {value = dense<1.0> : tensor<1x3x3x1xf32>} : () -> tensor<1x3x3x1xf32>
  %w1 = "prim.constant"() {value = dense<5.0> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %b1 = "prim.constant"() {value = dense<0.25> : tensor<1xf32>} : () -> tensor<1xf32>
  %c3 = "prim.conv2d"(%x, %w3) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 1, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x4x1xf32>, tensor<1x3x3x1xf32>) -> tensor<1x2x2x1xf32>
  %c1 = "prim.conv2d"(%x, %w1, %b1) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 1, layout = "NHWC", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x4x4x1xf32>, tensor<1x1x1x1xf32>, tensor<1xf32>) -> tensor<1x2x2x1xf32>
  %s = "prim.add"(%c1, %c3) : (tensor<1x2x2x1xf32>, tensor<1x2x2x1xf32>) -> tensor<1x2x2x1xf32>
  return %s : tensor<1x2x2x1xf32>
}

// bn(x) + conv(x), dilation 2, the batch norm an identity (scale 1, variance 0, epsilon 1: s = 1, bias 0):
// the centre tap (2 + 1 = 3) of the dilated window; no bias left.
// CHECK-LABEL: func.func @dilated_norm
// CHECK:      %[[W:.+]] = "prim.constant"() {value = dense<{{\[\[\[\[}}2.000000e+00, 2.000000e+00, 2.000000e+00], [2.000000e+00, 3.000000e+00, 2.000000e+00], [2.000000e+00, 2.000000e+00, 2.000000e+00]]]]> : tensor<1x1x3x3xf32>}
// CHECK-NEXT: %[[Y:.+]] = "prim.conv2d"(%arg0, %[[W]])
// CHECK-SAME: dilations = array<i64: 2, 2>
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = array<i64: 2, 2, 2, 2>
// CHECK-NEXT: return %[[Y]]
func.func @dilated_norm(%x: tensor<1x1x5x5xf32>) -> tensor<1x1x5x5xf32> {
  %w = "prim.constant"() {value = dense<2.0> : tensor<1x1x3x3xf32>} : () -> tensor<1x1x3x3xf32>
  %one = "prim.constant"() {value = dense<1.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %zero = "prim.constant"() {value = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 2, 2>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 2, 2, 2, 2>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x1x5x5xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x5x5xf32>
  %bn = "prim.batch_norm"(%x, %one, %zero, %zero, %zero) {epsilon = 1.0, layout = "NCHW"} : (tensor<1x1x5x5xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x1x5x5xf32>
  %s = "prim.add"(%bn, %c) : (tensor<1x1x5x5xf32>, tensor<1x1x5x5xf32>) -> tensor<1x1x5x5xf32>
  return %s : tensor<1x1x5x5xf32>
}

// x itself is no branch: conv(x) + x keeps x as the residual (an f16 filter's centre tap plus 1 would round).
// CHECK-LABEL: func.func @plain_identity
// CHECK:      "prim.conv2d"(%arg0, %{{.+}}, %arg0)
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 0, 1>
func.func @plain_identity(%x: tensor<1x1x5x5xf32>) -> tensor<1x1x5x5xf32> {
  %w = "prim.constant"() {value = dense<2.0> : tensor<1x1x3x3xf32>} : () -> tensor<1x1x3x3xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x1x5x5xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x5x5xf32>
  %s = "prim.add"(%c, %x) : (tensor<1x1x5x5xf32>, tensor<1x1x5x5xf32>) -> tensor<1x1x5x5xf32>
  return %s : tensor<1x1x5x5xf32>
}

// Padding (1, 3) with dilation 2 puts the batch norm's pixel between two taps: no merge.
// CHECK-LABEL: func.func @off_the_dilation_grid
// CHECK:      %[[N:.+]] = "prim.batch_norm"(%arg0,
// CHECK:      "prim.conv2d"(%arg0, %{{.+}}, %[[N]])
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 0, 1>, padding = array<i64: 1, 1, 3, 3>
func.func @off_the_dilation_grid(%x: tensor<1x1x5x5xf32>) -> tensor<1x1x5x5xf32> {
  %w = "prim.constant"() {value = dense<2.0> : tensor<1x1x3x3xf32>} : () -> tensor<1x1x3x3xf32>
  %one = "prim.constant"() {value = dense<1.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %zero = "prim.constant"() {value = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 2, 2>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 3, 3>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x1x5x5xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x5x5xf32>
  %bn = "prim.batch_norm"(%x, %one, %zero, %zero, %zero) {epsilon = 1.0, layout = "NCHW"} : (tensor<1x1x5x5xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x1x5x5xf32>
  %s = "prim.add"(%c, %bn) : (tensor<1x1x5x5xf32>, tensor<1x1x5x5xf32>) -> tensor<1x1x5x5xf32>
  return %s : tensor<1x1x5x5xf32>
}

// A branch with its own activation is not linear: the two convolutions stay, one the other's residual.
// CHECK-LABEL: func.func @activated_branch
// CHECK:      %[[A:.+]] = "prim.conv2d"(%arg0, %{{[0-9]+}})
// CHECK-SAME: activation = "relu"
// CHECK-NEXT: "prim.conv2d"(%arg0, %{{[0-9]+}}, %[[A]])
// CHECK-SAME: activation = "none"
func.func @activated_branch(%x: tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
  %v = "prim.constant"() {value = dense<3.0> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
  %a = "prim.conv2d"(%x, %w) {activation = "relu", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %b = "prim.conv2d"(%x, %v) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %s = "prim.add"(%a, %b) : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  return %s : tensor<1x2x3x3xf32>
}

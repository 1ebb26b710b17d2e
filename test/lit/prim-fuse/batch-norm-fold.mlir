// batch_norm(conv2d(x, W, b)) with constant operands folds into conv2d(x, W', b'):
//   s = scale / sqrt(var + eps);  W'[k] = W[k] * s[k];  b' = (b - mean) * s + shift
// Numbers: scale = [2, 3], var = [3, 0], eps = 1 -> s = [2/2, 3/1] = [1, 3];
//          W = [[1, 2], [3, 4]] (2x2x1x1) -> W' = [[1, 2], [9, 12]];
//          b = [1, 4], mean = [1, 2], shift = [0.5, -1] -> b' = [0*1 + 0.5, 2*3 - 1] = [0.5, 5].
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// CHECK-LABEL: func.func @bn_fold
// CHECK-NOT:  prim.batch_norm
// CHECK:      %[[W:.+]] = "prim.constant"() {value = dense<{{\[\[\[\[}}1.000000e+00]], {{\[\[}}2.000000e+00]]], {{\[\[\[}}9.000000e+00]], {{\[\[}}1.200000e+01]]]]> : tensor<2x2x1x1xf32>}
// CHECK-NEXT: %[[B:.+]] = "prim.constant"() {value = dense<[5.000000e-01, 5.000000e+00]> : tensor<2xf32>}
// CHECK-NEXT: %[[Y:.+]] = "prim.conv2d"(%arg0, %[[W]], %[[B]])
// CHECK-SAME: activation = "none"
// CHECK-SAME: filter_layout = "KCRS"
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 0>
// CHECK-NOT:  prim.batch_norm
// CHECK:      return %[[Y]]
func.func @bn_fold(%x: tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32> {
  %w = "prim.constant"() {value = dense<[[[[1.0]], [[2.0]]], [[[3.0]], [[4.0]]]]> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
  %b = "prim.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %scale = "prim.constant"() {value = dense<[2.0, 3.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %shift = "prim.constant"() {value = dense<[0.5, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "prim.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "prim.constant"() {value = dense<[3.0, 0.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %c = "prim.conv2d"(%x, %w, %b) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x2x2x2xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  %y = "prim.batch_norm"(%c, %scale, %shift, %mean, %var) {epsilon = 1.0, layout = "NCHW"} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  return %y : tensor<1x2x2x2xf32>
}

// Without a conv bias, b = 0: b' = -mean * s + shift = [-1 + 0.5, -6 - 1] = [-0.5, -7]. The relu after
// the batch norm then becomes the folded conv's epilogue.
// CHECK-LABEL: func.func @bn_fold_no_bias_then_relu
// CHECK:      %[[W:.+]] = "prim.constant"() {value = dense<{{\[\[\[\[}}1.000000e+00]], {{\[\[}}2.000000e+00]]], {{\[\[\[}}9.000000e+00]], {{\[\[}}1.200000e+01]]]]> : tensor<2x2x1x1xf32>}
// CHECK-NEXT: %[[B:.+]] = "prim.constant"() {value = dense<[-5.000000e-01, -7.000000e+00]> : tensor<2xf32>}
// CHECK-NEXT: %[[Y:.+]] = "prim.conv2d"(%arg0, %[[W]], %[[B]])
// CHECK-SAME: activation = "relu"
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 0>
// CHECK-NOT:  prim.batch_norm
// CHECK-NOT:  prim.relu
// CHECK:      return %[[Y]]
func.func @bn_fold_no_bias_then_relu(%x: tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32> {
  %w = "prim.constant"() {value = dense<[[[[1.0]], [[2.0]]], [[[3.0]], [[4.0]]]]> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
  %scale = "prim.constant"() {value = dense<[2.0, 3.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %shift = "prim.constant"() {value = dense<[0.5, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "prim.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "prim.constant"() {value = dense<[3.0, 0.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x2x2xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x2x2xf32>
  %y = "prim.batch_norm"(%c, %scale, %shift, %mean, %var) {epsilon = 1.0, layout = "NCHW"} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  %r = "prim.relu"(%y) : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  return %r : tensor<1x2x2x2xf32>
}

// A batch-norm parameter known only at run time (a function argument): no folding.
// CHECK-LABEL: func.func @bn_runtime_scale
// CHECK:      %[[C:.+]] = "prim.conv2d"(%arg0, %{{.+}}) {activation = "none"
// CHECK-NEXT: %[[Y:.+]] = "prim.batch_norm"(%[[C]], %arg1,
// CHECK-NEXT: return %[[Y]]
func.func @bn_runtime_scale(%x: tensor<1x2x2x2xf32>, %scale: tensor<2xf32>) -> tensor<1x2x2x2xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
  %shift = "prim.constant"() {value = dense<0.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "prim.constant"() {value = dense<0.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "prim.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x2x2xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x2x2xf32>
  %y = "prim.batch_norm"(%c, %scale, %shift, %mean, %var) {epsilon = 0.0, layout = "NCHW"} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  return %y : tensor<1x2x2x2xf32>
}

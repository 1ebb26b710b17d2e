// The decomposed RMSNorm of ONNX exports (Pow, ReduceMean, Add, Sqrt, Div, Mul) becomes one rms_norm:
// h / sqrt(mean(h^2 over the trailing dims) + eps) [* scale]. Only with exponent 2, a keepdims mean over
// exactly the trailing dims, a scalar eps, and every intermediate used once.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// With the scale, over the last dim: the rms_norm takes the scale and the eps.
// CHECK-LABEL: func.func @rms_scaled
// CHECK-NOT:  "prim.pow"
// CHECK-NOT:  "prim.reduce"
// CHECK:      %[[S:.+]] = "prim.constant"() {value = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<3xf32>}
// CHECK-NEXT: %[[Y:.+]] = "prim.rms_norm"(%arg0, %[[S]]) {epsilon = 9.9999999747524271E-7 : f64, normalized_ndim = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-NEXT: return %[[Y]]
func.func @rms_scaled(%x: tensor<2x5x3xf32>) -> tensor<2x5x3xf32> {
  %two = "prim.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %eps = "prim.constant"() {value = dense<1.0e-6> : tensor<f32>} : () -> tensor<f32>
  %s = "prim.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %p = "prim.pow"(%x, %two) : (tensor<2x5x3xf32>, tensor<f32>) -> tensor<2x5x3xf32>
  %m = "prim.reduce"(%p) {axes = array<i64: -1>, keepdims = 1, kind = "mean"} : (tensor<2x5x3xf32>) -> tensor<2x5x1xf32>
  %a = "prim.add"(%m, %eps) : (tensor<2x5x1xf32>, tensor<f32>) -> tensor<2x5x1xf32>
  %q = "prim.sqrt"(%a) : (tensor<2x5x1xf32>) -> tensor<2x5x1xf32>
  %d = "prim.div"(%x, %q) : (tensor<2x5x3xf32>, tensor<2x5x1xf32>) -> tensor<2x5x3xf32>
  %y = "prim.mul"(%d, %s) : (tensor<2x5x3xf32>, tensor<3xf32>) -> tensor<2x5x3xf32>
  return %y : tensor<2x5x3xf32>
}

// Over the last two dims, no scale.
// CHECK-LABEL: func.func @rms_two_dims
// CHECK:      %[[Y:.+]] = "prim.rms_norm"(%arg0)
// CHECK-SAME: normalized_ndim = 2 : i64, operandSegmentSizes = array<i32: 1, 0, 0>
// CHECK-NEXT: return %[[Y]]
func.func @rms_two_dims(%x: tensor<2x5x3xf32>) -> tensor<2x5x3xf32> {
  %two = "prim.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %eps = "prim.constant"() {value = dense<1.0e-5> : tensor<f32>} : () -> tensor<f32>
  %p = "prim.pow"(%x, %two) : (tensor<2x5x3xf32>, tensor<f32>) -> tensor<2x5x3xf32>
  %m = "prim.reduce"(%p) {axes = array<i64: 1, 2>, keepdims = 1, kind = "mean"} : (tensor<2x5x3xf32>) -> tensor<2x1x1xf32>
  %a = "prim.add"(%eps, %m) : (tensor<f32>, tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
  %q = "prim.sqrt"(%a) : (tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
  %d = "prim.div"(%x, %q) : (tensor<2x5x3xf32>, tensor<2x1x1xf32>) -> tensor<2x5x3xf32>
  return %d : tensor<2x5x3xf32>
}

// A mean over a leading dim is not a row norm: nothing changes.
// CHECK-LABEL: func.func @not_trailing
// CHECK:      "prim.pow"
// CHECK:      "prim.reduce"
// CHECK-NOT:  "prim.rms_norm"
func.func @not_trailing(%x: tensor<2x5x3xf32>) -> tensor<2x5x3xf32> {
  %two = "prim.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %eps = "prim.constant"() {value = dense<1.0e-5> : tensor<f32>} : () -> tensor<f32>
  %p = "prim.pow"(%x, %two) : (tensor<2x5x3xf32>, tensor<f32>) -> tensor<2x5x3xf32>
  %m = "prim.reduce"(%p) {axes = array<i64: 1>, keepdims = 1, kind = "mean"} : (tensor<2x5x3xf32>) -> tensor<2x1x3xf32>
  %a = "prim.add"(%m, %eps) : (tensor<2x1x3xf32>, tensor<f32>) -> tensor<2x1x3xf32>
  %q = "prim.sqrt"(%a) : (tensor<2x1x3xf32>) -> tensor<2x1x3xf32>
  %d = "prim.div"(%x, %q) : (tensor<2x5x3xf32>, tensor<2x1x3xf32>) -> tensor<2x5x3xf32>
  return %d : tensor<2x5x3xf32>
}

// An exponent other than 2 is not an RMS.
// CHECK-LABEL: func.func @cube
// CHECK:      "prim.pow"
// CHECK-NOT:  "prim.rms_norm"
func.func @cube(%x: tensor<2x5x3xf32>) -> tensor<2x5x3xf32> {
  %three = "prim.constant"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
  %eps = "prim.constant"() {value = dense<1.0e-5> : tensor<f32>} : () -> tensor<f32>
  %p = "prim.pow"(%x, %three) : (tensor<2x5x3xf32>, tensor<f32>) -> tensor<2x5x3xf32>
  %m = "prim.reduce"(%p) {axes = array<i64: -1>, keepdims = 1, kind = "mean"} : (tensor<2x5x3xf32>) -> tensor<2x5x1xf32>
  %a = "prim.add"(%m, %eps) : (tensor<2x5x1xf32>, tensor<f32>) -> tensor<2x5x1xf32>
  %q = "prim.sqrt"(%a) : (tensor<2x5x1xf32>) -> tensor<2x5x1xf32>
  %d = "prim.div"(%x, %q) : (tensor<2x5x3xf32>, tensor<2x5x1xf32>) -> tensor<2x5x3xf32>
  return %d : tensor<2x5x3xf32>
}

// Llama's x * rsqrt(mean(x^2) + eps) * w as the torch importer writes it: the rsqrt as 1 / sqrt multiplied in,
// the scale first.
// CHECK-LABEL: func.func @rms_llama
// CHECK-NOT:  "prim.reduce"
// CHECK:      %[[S:.+]] = "prim.constant"() {value = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32>}
// CHECK-NEXT: %[[Y:.+]] = "prim.rms_norm"(%arg0, %[[S]]) {epsilon = 9.9999999747524271E-7 : f64, normalized_ndim = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-NEXT: return %[[Y]]
func.func @rms_llama(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %two = "prim.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %eps = "prim.constant"() {value = dense<1.0e-6> : tensor<f32>} : () -> tensor<f32>
  %one = "prim.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %w = "prim.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> tensor<4xf32>
  %p = "prim.pow"(%x, %two) : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x4xf32>
  %m = "prim.reduce"(%p) {axes = array<i64: 2>, keepdims = 1, kind = "mean"} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
  %a = "prim.add"(%m, %eps) : (tensor<2x3x1xf32>, tensor<f32>) -> tensor<2x3x1xf32>
  %q = "prim.sqrt"(%a) : (tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %r = "prim.div"(%one, %q) : (tensor<f32>, tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %n = "prim.mul"(%x, %r) : (tensor<2x3x4xf32>, tensor<2x3x1xf32>) -> tensor<2x3x4xf32>
  %y = "prim.mul"(%w, %n) : (tensor<4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %y : tensor<2x3x4xf32>
}


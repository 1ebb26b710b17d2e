// prim-fuse: mul(x, sigmoid(x)), the exporters' SiLU (ONNX before opset 22, EfficientNet's activation), becomes
// silu(x), which then folds into the convolution before it as its activation; operands in either order. A
// sigmoid with another use, or of another value, stays.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// CHECK-LABEL: func.func @conv_swish
// CHECK:      %[[C:.+]] = "prim.conv2d"(%arg0, %{{.+}}) {activation = "silu"
// CHECK-NOT:  prim.sigmoid
// CHECK-NOT:  prim.mul
// CHECK:      return %[[C]]
func.func @conv_swish(%x: tensor<1x5x6x4xf32>) -> tensor<1x5x6x8xf32> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<3x3x4x8xf32>} : () -> tensor<3x3x4x8xf32>
  %c = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, layout = "NHWC", filter_layout = "RSCK", activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x5x6x4xf32>, tensor<3x3x4x8xf32>) -> tensor<1x5x6x8xf32>
  %s = "prim.sigmoid"(%c) : (tensor<1x5x6x8xf32>) -> tensor<1x5x6x8xf32>
  %y = "prim.mul"(%s, %c) : (tensor<1x5x6x8xf32>, tensor<1x5x6x8xf32>) -> tensor<1x5x6x8xf32>
  return %y : tensor<1x5x6x8xf32>
}

// x * sigmoid(x) on a graph input: one silu op.
// CHECK-LABEL: func.func @plain_silu
// CHECK:      %[[S:.+]] = "prim.silu"(%arg0)
// CHECK-NEXT: return %[[S]]
func.func @plain_silu(%x: tensor<2x7xf32>) -> tensor<2x7xf32> {
  %s = "prim.sigmoid"(%x) : (tensor<2x7xf32>) -> tensor<2x7xf32>
  %y = "prim.mul"(%x, %s) : (tensor<2x7xf32>, tensor<2x7xf32>) -> tensor<2x7xf32>
  return %y : tensor<2x7xf32>
}

// The sigmoid is also returned: it stays, and so does the mul (one elementwise kernel).
// CHECK-LABEL: func.func @sigmoid_used_twice
// CHECK-NOT:  prim.silu
// CHECK:      return
func.func @sigmoid_used_twice(%x: tensor<2x7xf32>) -> (tensor<2x7xf32>, tensor<2x7xf32>) {
  %s = "prim.sigmoid"(%x) : (tensor<2x7xf32>) -> tensor<2x7xf32>
  %y = "prim.mul"(%x, %s) : (tensor<2x7xf32>, tensor<2x7xf32>) -> tensor<2x7xf32>
  return %y, %s : tensor<2x7xf32>, tensor<2x7xf32>
}

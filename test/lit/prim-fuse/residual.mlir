// Residual fusion: add(conv, z) with z of the output shape -> z becomes the conv's residual operand,
// after the bias; a following relu becomes the activation (a ResNet basic block tail, one kernel).
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// relu(x + (conv(y) + b)): all four operands on one conv2d. (With conv(x), the sum is one convolution
// of x: conv-branches.mlir.)
// CHECK-LABEL: func.func @resnet_tail
// CHECK:      %[[B:.+]] = "prim.constant"() {value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>}
// CHECK-NEXT: %[[Y:.+]] = "prim.conv2d"(%arg1, %{{.+}}, %[[B]], %arg0)
// CHECK-SAME: activation = "relu"
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 1>
// CHECK-SAME: (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
// CHECK-NEXT: return %[[Y]]
func.func @resnet_tail(%x: tensor<1x2x3x3xf32>, %y: tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
  %b = "prim.constant"() {value = dense<[[[1.0]], [[2.0]]]> : tensor<2x1x1xf32>} : () -> tensor<2x1x1xf32>
  %c = "prim.conv2d"(%y, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %a = "prim.add"(%c, %b) : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %s = "prim.add"(%x, %a) : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %r = "prim.relu"(%s) : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  return %r : tensor<1x2x3x3xf32>
}

// A residual from another value (here a function argument), no bias: segment sizes 1, 1, 0, 1.
// CHECK-LABEL: func.func @residual_only
// CHECK:      %[[Y:.+]] = "prim.conv2d"(%arg0, %{{.+}}, %arg1)
// CHECK-SAME: activation = "none"
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 0, 1>
// CHECK-NEXT: return %[[Y]]
func.func @residual_only(%x: tensor<1x2x3x3xf32>, %z: tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %s = "prim.add"(%c, %z) : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  return %s : tensor<1x2x3x3xf32>
}

// A batched matmul takes a residual too.
// CHECK-LABEL: func.func @matmul_residual
// CHECK:      %[[Y:.+]] = "prim.matmul"(%arg0, %arg1, %arg2)
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 0, 1>
// CHECK-NEXT: return %[[Y]]
func.func @matmul_residual(%a: tensor<2x4x3xf32>, %b: tensor<2x3x4xf32>, %z: tensor<2x4x4xf32>) -> tensor<2x4x4xf32> {
  %m = "prim.matmul"(%a, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x4x3xf32>, tensor<2x3x4xf32>) -> tensor<2x4x4xf32>
  %s = "prim.add"(%z, %m) : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  return %s : tensor<2x4x4xf32>
}

// A broadcasting add (z is 1x1x3x3, not the output shape; not per-channel either) is neither bias nor
// residual: it stays an add.
// CHECK-LABEL: func.func @broadcast_add_stays
// CHECK:      %[[C:.+]] = "prim.conv2d"(%arg0, %{{[^,]+}}) {
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 0, 0>
// CHECK-NEXT: %[[S:.+]] = "prim.add"(%[[C]], %arg1)
// CHECK-NEXT: return %[[S]]
func.func @broadcast_add_stays(%x: tensor<1x2x3x3xf32>, %z: tensor<1x1x3x3xf32>) -> tensor<1x2x3x3xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %s = "prim.add"(%c, %z) : (tensor<1x2x3x3xf32>, tensor<1x1x3x3xf32>) -> tensor<1x2x3x3xf32>
  return %s : tensor<1x2x3x3xf32>
}

// What must NOT fuse: a value with two uses is never folded into its producer.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// The conv result is also returned: no bias, no activation epilogue on the conv (the add and relu
// are an elementwise chain of their own, reading the conv result).
// CHECK-LABEL: func.func private @fused_0(%arg0: tensor<1x2x3x3xf32>, %arg1: tensor<2x1x1xf32>)
// CHECK-NEXT:   "prim.add"(%arg0, %arg1)
// CHECK-NEXT:   "prim.relu"
// CHECK-LABEL: func.func @conv_two_uses
// CHECK:        %[[B:.+]] = "prim.constant"() {value = dense<{{\[\[\[}}1.000000e+00]], {{\[\[}}2.000000e+00]]]> : tensor<2x1x1xf32>}
// CHECK-NEXT:   %[[C:.+]] = "prim.conv2d"(%arg0, %{{[^,]+}}) {activation = "none"
// CHECK-SAME:   operandSegmentSizes = array<i32: 1, 1, 0, 0>
// CHECK-NEXT:   %[[R:.+]] = call @fused_0(%[[C]], %[[B]])
// CHECK-NEXT:   return %[[R]], %[[C]]
func.func @conv_two_uses(%x: tensor<1x2x3x3xf32>) -> (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) {
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
  %b = "prim.constant"() {value = dense<[[[1.0]], [[2.0]]]> : tensor<2x1x1xf32>} : () -> tensor<2x1x1xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %a = "prim.add"(%c, %b) : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %r = "prim.relu"(%a) : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  return %r, %c : tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>
}

// relu(x) feeds both the sigmoid and the add: it stays in the graph; only sigmoid -> add is a chain.
// CHECK-LABEL: func.func private @fused_1(%arg0: tensor<4xf32>)
// CHECK-NEXT:   %[[S:.+]] = "prim.sigmoid"(%arg0)
// CHECK-NEXT:   %[[M:.+]] = "prim.add"(%[[S]], %arg0)
// CHECK-NEXT:   return %[[M]]
// CHECK-LABEL: func.func @shared_intermediate
// CHECK-NEXT:   %[[R:.+]] = "prim.relu"(%arg0)
// CHECK-NEXT:   %[[F:.+]] = call @fused_1(%[[R]])
// CHECK-NEXT:   return %[[F]]
func.func @shared_intermediate(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "prim.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "prim.sigmoid"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "prim.add"(%1, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// The matmul already has an activation: a second one is not stacked on it.
// CHECK-LABEL: func.func @act_after_act
// CHECK-NEXT:   %[[M:.+]] = "prim.matmul"(%arg0, %arg1) {activation = "relu"
// CHECK-NEXT:   %[[T:.+]] = "prim.tanh"(%[[M]])
// CHECK-NEXT:   return %[[T]]
// CHECK-NOT:  prim.fused
func.func @act_after_act(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %m = "prim.matmul"(%x, %w) {activation = "relu", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %r = "prim.tanh"(%m) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %r : tensor<2x4xf32>
}

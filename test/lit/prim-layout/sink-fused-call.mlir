// Transposes sink past a prim-fuse'd elementwise group on 4-d maps (a copy of its function on the NHWC
// types; an operand that broadcasts, [C, 1, 1], is viewed as [1, C, 1, 1] and transposed to [1, 1, 1, C]), so
// that they cancel around it: a training graph's BN output + residual, ReLU, and its x_hat-like chains.
// RUN: openprim-opt %s -p prim-fuse,prim-layout | filecheck %s

// CHECK:       func.func private @fused_0_nhwc(%arg0: tensor<2x5x5x4xf32>, %arg1: tensor<2x5x5x4xf32>) -> tensor<2x5x5x4xf32> attributes {prim.fused}
// CHECK-NEXT:    "prim.add"(%arg0, %arg1) : (tensor<2x5x5x4xf32>, tensor<2x5x5x4xf32>) -> tensor<2x5x5x4xf32>
// CHECK-NEXT:    "prim.relu"
// CHECK:       func.func private @fused_1_nhwc(%arg0: tensor<2x5x5x4xf32>, %arg1: tensor<1x1x1x4xf32>, %arg2: tensor<2x5x5x4xf32>)
// CHECK-NEXT:    "prim.sub"(%arg0, %arg1) : (tensor<2x5x5x4xf32>, tensor<1x1x1x4xf32>) -> tensor<2x5x5x4xf32>
// CHECK-NOT:   func.func private @fused_0(
// CHECK-LABEL: func.func @bn_residual_relu
// CHECK:       %[[C:.+]] = "prim.conv2d"
// CHECK-NEXT:  %[[Y:.+]] = "prim.batch_norm_training"(%[[C]], %arg2, %arg3) {{{.*}}layout = "NHWC"}
// CHECK-NEXT:  %[[R:.+]] = call @fused_0_nhwc(%[[Y]], %[[C]])
// CHECK-NEXT:  %[[RN:.+]] = "prim.transpose"(%[[R]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  %[[M4:.+]] = "prim.reshape"(%arg4) : (tensor<4x1x1xf32>) -> tensor<1x4x1x1xf32>
// CHECK-NEXT:  %[[M:.+]] = "prim.transpose"(%[[M4]]) {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x4x1x1xf32>) -> tensor<1x1x1x4xf32>
// CHECK-NEXT:  %[[E:.+]] = call @fused_1_nhwc(%[[C]], %[[M]], %[[Y]])
// CHECK-NEXT:  %[[EN:.+]] = "prim.transpose"(%[[E]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  return %[[RN]], %[[EN]]
func.func @bn_residual_relu(%x: tensor<2x4x5x5xf32>, %w: tensor<4x4x3x3xf32>, %s: tensor<4xf32>, %b: tensor<4xf32>, %m: tensor<4x1x1xf32>) -> (tensor<2x4x5x5xf32>, tensor<2x4x5x5xf32>) {
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x4x5x5xf32>, tensor<4x4x3x3xf32>) -> tensor<2x4x5x5xf32>
  %y = "prim.batch_norm_training"(%c, %s, %b) {epsilon = 1.0e-5, layout = "NCHW"} : (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x5x5xf32>
  %a = "prim.add"(%y, %c) : (tensor<2x4x5x5xf32>, tensor<2x4x5x5xf32>) -> tensor<2x4x5x5xf32>
  %r = "prim.relu"(%a) : (tensor<2x4x5x5xf32>) -> tensor<2x4x5x5xf32>
  %d = "prim.sub"(%c, %m) : (tensor<2x4x5x5xf32>, tensor<4x1x1xf32>) -> tensor<2x4x5x5xf32>
  %e = "prim.mul"(%d, %y) : (tensor<2x4x5x5xf32>, tensor<2x4x5x5xf32>) -> tensor<2x4x5x5xf32>
  return %r, %e : tensor<2x4x5x5xf32>, tensor<2x4x5x5xf32>
}

// Epilogues through the reshapes and transposes between a GEMM and the ops after it (torch.export's
// Linear on a rank-4 input is reshape -> matmul -> reshape; ConvNeXt permutes back to NCHW after it).
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// gelu(reshape(matmul)) -> reshape(matmul with the GELU epilogue): one GEMM launch.
// CHECK-LABEL: func.func @gelu_after_reshape
// CHECK:      %[[M:.+]] = "prim.matmul"(%{{.+}}, %{{.+}}, %{{.+}}) {activation = "gelu"
// CHECK-NEXT: %[[R:.+]] = "prim.reshape"(%[[M]]) : (tensor<6x4xf32>) -> tensor<1x2x3x4xf32>
// CHECK-NOT:  prim.gelu
// CHECK:      return %[[R]]
func.func @gelu_after_reshape(%x: tensor<1x2x3x5xf32>) -> tensor<1x2x3x4xf32> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<4x5xf32>} : () -> tensor<4x5xf32>
  %b = "prim.constant"() {value = dense<0.25> : tensor<4xf32>} : () -> tensor<4xf32>
  %x2 = "prim.reshape"(%x) : (tensor<1x2x3x5xf32>) -> tensor<6x5xf32>
  %m = "prim.matmul"(%x2, %w, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<6x5xf32>, tensor<4x5xf32>, tensor<4xf32>) -> tensor<6x4xf32>
  %r = "prim.reshape"(%m) : (tensor<6x4xf32>) -> tensor<1x2x3x4xf32>
  %g = "prim.gelu"(%r) {approximate = "none"} : (tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %g : tensor<1x2x3x4xf32>
}

// ConvNeXt's block tail: z + c * permute(reshape(matmul(h, W, b)), NHWC -> NCHW), c = [2, 3, 4, 5] per
// channel (the layer scale). The scale folds into the weights (rows of W, transpose_rhs) and the bias:
// W = [[1, 2], [1, 2], [1, 2], [1, 2]] -> [[2, 4], [3, 6], [4, 8], [5, 10]], b = 1 -> [2, 3, 4, 5]; the
// residual add becomes the epilogue, z brought to the GEMM's [M, N] through the inverse permute.
// CHECK-LABEL: func.func @layer_scale_residual
// CHECK-DAG:  %[[W:.+]] = "prim.constant"() {value = dense<{{\[\[}}2.000000e+00, 4.000000e+00], [3.000000e+00, 6.000000e+00], [4.000000e+00, 8.000000e+00], [5.000000e+00, 1.000000e+01]]> : tensor<4x2xf32>}
// CHECK-DAG:  %[[B:.+]] = "prim.constant"() {value = dense<[2.000000e+00, 3.000000e+00, 4.000000e+00, 5.000000e+00]> : tensor<4xf32>}
// CHECK:      %[[ZT:.+]] = "prim.transpose"(%arg1) {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x4x2x3xf32>) -> tensor<1x2x3x4xf32>
// CHECK-NEXT: %[[Z:.+]] = "prim.reshape"(%[[ZT]]) : (tensor<1x2x3x4xf32>) -> tensor<6x4xf32>
// CHECK-NEXT: %[[M:.+]] = "prim.matmul"(%{{.+}}, %[[W]], %[[B]], %[[Z]]) {activation = "none"
// CHECK-NEXT: %[[R:.+]] = "prim.reshape"(%[[M]]) : (tensor<6x4xf32>) -> tensor<1x2x3x4xf32>
// CHECK-NEXT: %[[T:.+]] = "prim.transpose"(%[[R]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NOT:  prim.mul
// CHECK-NOT:  prim.add
// CHECK:      return %[[T]]
func.func @layer_scale_residual(%h: tensor<6x2xf32>, %z: tensor<1x4x2x3xf32>) -> tensor<1x4x2x3xf32> {
  %w = "prim.constant"() {value = dense<[[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]> : tensor<4x2xf32>} : () -> tensor<4x2xf32>
  %b = "prim.constant"() {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %c = "prim.constant"() {value = dense<[[[2.0]], [[3.0]], [[4.0]], [[5.0]]]> : tensor<4x1x1xf32>} : () -> tensor<4x1x1xf32>
  %m = "prim.matmul"(%h, %w, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<6x2xf32>, tensor<4x2xf32>, tensor<4xf32>) -> tensor<6x4xf32>
  %r = "prim.reshape"(%m) : (tensor<6x4xf32>) -> tensor<1x2x3x4xf32>
  %t = "prim.transpose"(%r) {perm = array<i64: 0, 3, 1, 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x4x2x3xf32>
  %s = "prim.mul"(%c, %t) : (tensor<4x1x1xf32>, tensor<1x4x2x3xf32>) -> tensor<1x4x2x3xf32>
  %y = "prim.add"(%s, %z) : (tensor<1x4x2x3xf32>, tensor<1x4x2x3xf32>) -> tensor<1x4x2x3xf32>
  return %y : tensor<1x4x2x3xf32>
}

// A scale that varies along a non-channel axis (here H) is no per-channel scale: it stays a multiply,
// and so does the add after it.
// CHECK-LABEL: func.func @scale_along_h_stays
// CHECK:      "prim.matmul"
// CHECK:      call @fused_
func.func @scale_along_h_stays(%h: tensor<6x2xf32>, %z: tensor<1x4x2x3xf32>) -> tensor<1x4x2x3xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<4x2xf32>} : () -> tensor<4x2xf32>
  %c = "prim.constant"() {value = dense<[[2.0], [3.0]]> : tensor<2x1xf32>} : () -> tensor<2x1xf32>
  %m = "prim.matmul"(%h, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<6x2xf32>, tensor<4x2xf32>) -> tensor<6x4xf32>
  %r = "prim.reshape"(%m) : (tensor<6x4xf32>) -> tensor<1x2x3x4xf32>
  %t = "prim.transpose"(%r) {perm = array<i64: 0, 3, 1, 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x4x2x3xf32>
  %s = "prim.mul"(%c, %t) : (tensor<2x1xf32>, tensor<1x4x2x3xf32>) -> tensor<1x4x2x3xf32>
  %y = "prim.add"(%s, %z) : (tensor<1x4x2x3xf32>, tensor<1x4x2x3xf32>) -> tensor<1x4x2x3xf32>
  return %y : tensor<1x4x2x3xf32>
}

// Attention's scale on q (prim-decompose) after the head split: a scalar scales every output channel of the
// projection, although the reshape splits its channel axis: 0.5 folds into W (1 -> 0.5) and b (2 -> 1).
// CHECK-LABEL: func.func @scalar_scale_through_head_split
// CHECK-DAG:  %[[W:.+]] = "prim.constant"() {value = dense<5.000000e-01> : tensor<4x2xf32>}
// CHECK-DAG:  %[[B:.+]] = "prim.constant"() {value = dense<1.000000e+00> : tensor<4xf32>}
// CHECK:      %[[M:.+]] = "prim.matmul"(%arg0, %[[W]], %[[B]])
// CHECK-NEXT: %[[R:.+]] = "prim.reshape"(%[[M]]) : (tensor<6x4xf32>) -> tensor<1x6x2x2xf32>
// CHECK-NEXT: %[[T:.+]] = "prim.transpose"(%[[R]]) {perm = array<i64: 0, 2, 1, 3>}
// CHECK-NOT:  prim.mul
// CHECK:      return %[[T]]
func.func @scalar_scale_through_head_split(%h: tensor<6x2xf32>) -> tensor<1x2x6x2xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<4x2xf32>} : () -> tensor<4x2xf32>
  %b = "prim.constant"() {value = dense<2.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %c = "prim.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %m = "prim.matmul"(%h, %w, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<6x2xf32>, tensor<4x2xf32>, tensor<4xf32>) -> tensor<6x4xf32>
  %r = "prim.reshape"(%m) : (tensor<6x4xf32>) -> tensor<1x6x2x2xf32>
  %t = "prim.transpose"(%r) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x6x2x2xf32>) -> tensor<1x2x6x2xf32>
  %s = "prim.mul"(%t, %c) : (tensor<1x2x6x2xf32>, tensor<f32>) -> tensor<1x2x6x2xf32>
  return %s : tensor<1x2x6x2xf32>
}

// prim-fuse: identical ops computed once. A decoder's per-layer where(mask, 0, -65504), each from constants
// of its own, becomes one where that both attentions read; the bounds checks and the views stay as they are.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// CHECK-LABEL: func.func @mask_per_layer
// CHECK:      %[[W:.+]] = "prim.where"
// CHECK-NOT:  "prim.where"
// CHECK:      "prim.attention"({{.+}}, %[[W]])
// CHECK:      "prim.attention"({{.+}}, %[[W]])
func.func @mask_per_layer(%q: tensor<1x2x1x8xf16>, %k: tensor<1x2x16x8xf16>, %m: tensor<1x1x1x16xi8>) -> (tensor<1x2x1x8xf16>, tensor<1x2x1x8xf16>) {
  %z0 = "prim.constant"() {value = dense<0.0> : tensor<f16>} : () -> tensor<f16>
  %n0 = "prim.constant"() {value = dense<-6.550400e+04> : tensor<f16>} : () -> tensor<f16>
  %w0 = "prim.where"(%m, %z0, %n0) : (tensor<1x1x1x16xi8>, tensor<f16>, tensor<f16>) -> tensor<1x1x1x16xf16>
  %a0 = "prim.attention"(%q, %k, %k, %w0) {causal = 0 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 0.35355339059327373 : f64} : (tensor<1x2x1x8xf16>, tensor<1x2x16x8xf16>, tensor<1x2x16x8xf16>, tensor<1x1x1x16xf16>) -> tensor<1x2x1x8xf16>
  %z1 = "prim.constant"() {value = dense<0.0> : tensor<f16>} : () -> tensor<f16>
  %n1 = "prim.constant"() {value = dense<-6.550400e+04> : tensor<f16>} : () -> tensor<f16>
  %w1 = "prim.where"(%m, %z1, %n1) : (tensor<1x1x1x16xi8>, tensor<f16>, tensor<f16>) -> tensor<1x1x1x16xf16>
  %a1 = "prim.attention"(%a0, %k, %k, %w1) {causal = 0 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 0.35355339059327373 : f64} : (tensor<1x2x1x8xf16>, tensor<1x2x16x8xf16>, tensor<1x2x16x8xf16>, tensor<1x1x1x16xf16>) -> tensor<1x2x1x8xf16>
  return %a0, %a1 : tensor<1x2x1x8xf16>, tensor<1x2x1x8xf16>
}

// Constants of other values, ops of other attributes, bounds checks, views and concats: nothing merged
// (DenseNet's layers concatenate the same prefix again: each chain must stay its own for concat_chains).
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-2: "prim.bounds_check"
// CHECK-COUNT-2: "prim.concat"
// CHECK-COUNT-2: "prim.reshape"
// CHECK-COUNT-2: "prim.clamp"
func.func @kept(%x: tensor<4x6xf32>, %i: tensor<3xi64>) -> (tensor<1xi32>, tensor<1xi32>, tensor<4x12xf32>, tensor<4x12xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<4x6xf32>, tensor<4x6xf32>) {
  %b0 = "prim.bounds_check"(%i) {size = 4 : i64} : (tensor<3xi64>) -> tensor<1xi32>
  %b1 = "prim.bounds_check"(%i) {size = 4 : i64} : (tensor<3xi64>) -> tensor<1xi32>
  %j0 = "prim.concat"(%x, %x) {axis = 1 : i64} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
  %j1 = "prim.concat"(%x, %x) {axis = 1 : i64} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
  %r0 = "prim.reshape"(%x) : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %r1 = "prim.reshape"(%x) : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %c0 = "prim.clamp"(%x) {min = 0.0 : f64, max = 6.0 : f64} : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %c1 = "prim.clamp"(%x) {min = 0.0 : f64, max = 1.0 : f64} : (tensor<4x6xf32>) -> tensor<4x6xf32>
  return %b0, %b1, %j0, %j1, %r0, %r1, %c0, %c1 : tensor<1xi32>, tensor<1xi32>, tensor<4x12xf32>, tensor<4x12xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<4x6xf32>, tensor<4x6xf32>
}

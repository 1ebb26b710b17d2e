// The elementwise family: every activation (with its attributes) and the four broadcasting binaries.
// RUN: openprim-opt %s --verify-only | filecheck %s

// CHECK-LABEL: func.func @unary
// CHECK:      %[[A:.+]] = "prim.relu"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %[[B:.+]] = "prim.leaky_relu"(%[[A]]) {alpha = 1.000000e-01 : f64}
// CHECK-NEXT: %[[C:.+]] = "prim.clamp"(%[[B]]) {max = 6.000000e+00 : f64, min = 0.000000e+00 : f64}
// CHECK-NEXT: %[[D:.+]] = "prim.sigmoid"(%[[C]])
// CHECK-NEXT: %[[E:.+]] = "prim.tanh"(%[[D]])
// CHECK-NEXT: %[[F:.+]] = "prim.gelu"(%[[E]]) {approximate = "tanh"}
// CHECK-NEXT: %[[G:.+]] = "prim.silu"(%[[F]])
// CHECK-NEXT: %[[H:.+]] = "prim.elu"(%[[G]]) {alpha = 1.000000e+00 : f64}
// CHECK-NEXT: return %[[H]] : tensor<2x3xf32>
func.func @unary(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "prim.relu"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "prim.leaky_relu"(%0) {alpha = 0.1} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "prim.clamp"(%1) {min = 0.0, max = 6.0} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = "prim.sigmoid"(%2) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = "prim.tanh"(%3) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %5 = "prim.gelu"(%4) {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %6 = "prim.silu"(%5) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %7 = "prim.elu"(%6) {alpha = 1.0} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %7 : tensor<2x3xf32>
}

// Binary ops broadcast numpy-style: 2x3 with 3, 2x1 with 1x3, scalar tensors.
// CHECK-LABEL: func.func @binary
// CHECK:      "prim.add"(%arg0, %arg1) : (tensor<2x3xf16>, tensor<3xf16>) -> tensor<2x3xf16>
// CHECK-NEXT: "prim.sub"(%arg2, %arg3) : (tensor<2x1xf16>, tensor<1x3xf16>) -> tensor<2x3xf16>
// CHECK-NEXT: "prim.mul"
// CHECK-SAME: (tensor<2x3xf16>, tensor<2x3xf16>) -> tensor<2x3xf16>
// CHECK-NEXT: "prim.div"
// CHECK-SAME: (tensor<2x3xf16>, tensor<f16>) -> tensor<2x3xf16>
func.func @binary(%a: tensor<2x3xf16>, %b: tensor<3xf16>, %c: tensor<2x1xf16>, %d: tensor<1x3xf16>, %s: tensor<f16>) -> tensor<2x3xf16> {
  %0 = "prim.add"(%a, %b) : (tensor<2x3xf16>, tensor<3xf16>) -> tensor<2x3xf16>
  %1 = "prim.sub"(%c, %d) : (tensor<2x1xf16>, tensor<1x3xf16>) -> tensor<2x3xf16>
  %2 = "prim.mul"(%0, %1) : (tensor<2x3xf16>, tensor<2x3xf16>) -> tensor<2x3xf16>
  %3 = "prim.div"(%2, %s) : (tensor<2x3xf16>, tensor<f16>) -> tensor<2x3xf16>
  return %3 : tensor<2x3xf16>
}

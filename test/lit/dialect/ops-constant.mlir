// constant: splat and explicit dense data (f32, f16, bf16). dense_resource: constant-dense-resource.mlir.
// Parsed, verified and printed, then the printed form parsed and printed again (stable round trip).
// RUN: openprim-opt %s --verify-only | openprim-opt - --verify-only | filecheck %s

// CHECK-LABEL: func.func @constants
// CHECK:      "prim.constant"() {value = dense<1.000000e+00> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
// CHECK-NEXT: "prim.constant"() {value = dense<{{\[}}[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
// CHECK-NEXT: "prim.constant"() {value = dense<[5.000000e-01, -2.000000e+00]> : tensor<2xf16>} : () -> tensor<2xf16>
// CHECK-NEXT: "prim.constant"() {value = dense<[1.000000e+00, -2.500000e-01]> : tensor<2xbf16>} : () -> tensor<2xbf16>
func.func @constants() -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2xf16>, tensor<2xbf16>) {
  %0 = "prim.constant"() {value = dense<1.0> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %1 = "prim.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %2 = "prim.constant"() {value = dense<[0.5, -2.0]> : tensor<2xf16>} : () -> tensor<2xf16>
  %3 = "prim.constant"() {value = dense<[1.0, -0.25]> : tensor<2xbf16>} : () -> tensor<2xbf16>
  return %0, %1, %2, %3 : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2xf16>, tensor<2xbf16>
}

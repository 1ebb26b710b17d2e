// gemm_packed packs a constant [K, N] rhs at compile time into NT-column panels [N/NT, K, NT] (NT = 16
// here), so that each panel is one contiguous stream: W^T = [[0 .. 31], [32 .. 63]] (K = 2, N = 32)
// becomes panel 0 = [[0 .. 15], [32 .. 47]], panel 1 = [[16 .. 31], [48 .. 63]]. N = 24 leaves a partial
// panel of 16: with many rows (M = 9) it is not packed (the kernel packs it at run time); with few (M = 3,
// a classifier at batch 1-8) the panels are 8 wide, all whole.
// RUN: openprim-opt %s -p 'prim-select{target=cpu:x86-64-v3}' | filecheck %s

// CHECK-LABEL: func.func @panels(
// CHECK:       "prim.constant"() {value = dense<{{\[\[\[}}0.000000e+00, 1.000000e+00, {{.*}}, 1.500000e+01], [3.200000e+01, {{.*}}, 4.700000e+01]], {{\[\[}}1.600000e+01, {{.*}}, 3.100000e+01], [4.800000e+01, {{.*}}, 6.300000e+01]]]> : tensor<2x2x16xf32>}
// CHECK:       "prim.matmul"
// CHECK-SAME:  prim.problem = "gemm-b1-m3-n32-k2-nn-f32-bias"
// CHECK-SAME:  transpose_rhs = 2 : i64
// CHECK-SAME:  (tensor<3x2xf32>, tensor<2x2x16xf32>, tensor<32xf32>) -> tensor<3x32xf32>

// CHECK-LABEL: func.func @partial_panel(
// CHECK:       "prim.matmul"
// CHECK-SAME:  transpose_rhs = 0 : i64
// CHECK-SAME:  (tensor<9x2xf32>, tensor<2x24xf32>) -> tensor<9x24xf32>

// CHECK-LABEL: func.func @narrow_panels(
// CHECK:       "prim.matmul"
// CHECK-SAME:  prim.params = {mt = 6 : i64, nt = 8 : i64
// CHECK-SAME:  transpose_rhs = 2 : i64
// CHECK-SAME:  (tensor<3x2xf32>, tensor<3x2x8xf32>) -> tensor<3x24xf32>
func.func @panels(%x: tensor<3x2xf32>) -> tensor<3x32xf32> {
  %w = "prim.constant"() {value = dense<[[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0, 30.0, 31.0], [32.0, 33.0, 34.0, 35.0, 36.0, 37.0, 38.0, 39.0, 40.0, 41.0, 42.0, 43.0, 44.0, 45.0, 46.0, 47.0, 48.0, 49.0, 50.0, 51.0, 52.0, 53.0, 54.0, 55.0, 56.0, 57.0, 58.0, 59.0, 60.0, 61.0, 62.0, 63.0]]> : tensor<2x32xf32>} : () -> tensor<2x32xf32>
  %b = "prim.constant"() {value = dense<0.5> : tensor<32xf32>} : () -> tensor<32xf32>
  %y = "prim.matmul"(%x, %w, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<3x2xf32>, tensor<2x32xf32>, tensor<32xf32>) -> tensor<3x32xf32>
  return %y : tensor<3x32xf32>
}

func.func @partial_panel(%x: tensor<9x2xf32>) -> tensor<9x24xf32> {
  %w = "prim.constant"() {value = dense<0.25> : tensor<2x24xf32>} : () -> tensor<2x24xf32>
  %y = "prim.matmul"(%x, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<9x2xf32>, tensor<2x24xf32>) -> tensor<9x24xf32>
  return %y : tensor<9x24xf32>
}

func.func @narrow_panels(%x: tensor<3x2xf32>) -> tensor<3x24xf32> {
  %w = "prim.constant"() {value = dense<0.25> : tensor<2x24xf32>} : () -> tensor<2x24xf32>
  %y = "prim.matmul"(%x, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<3x2xf32>, tensor<2x24xf32>) -> tensor<3x24xf32>
  return %y : tensor<3x24xf32>
}

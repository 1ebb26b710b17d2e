// GEMM solver choice: every matmul (a 2-d or batched rhs, transposed or not) -> gemm_packed, the
// hand-written CPU kernel (its MT x NT register tile, B's panel packed or not); the descriptor records
// the shape. gemm (the transform-schedule GEMM) needs a 2-d, non-transposed rhs.
// RUN: openprim-opt %s -p 'prim-select{target=cpu:x86-64-v3}' | filecheck %s

// CHECK-LABEL: func.func @gemm
// CHECK:       "prim.matmul"(%arg0, %arg1, %arg2)
// CHECK-SAME:  prim.params = {mt = 6 : i64, nt = 16 : i64, pack = 1 : i64}
// CHECK-SAME:  prim.problem = "gemm-b1-m16-n32-k64-nn-f32-bias+relu"
// CHECK-SAME:  prim.solver = "gemm_packed"
// CHECK-SAME:  transpose_rhs = 0 : i64
func.func @gemm(%a: tensor<16x64xf32>, %b: tensor<64x32xf32>, %c: tensor<32xf32>) -> tensor<16x32xf32> {
  %y = "prim.matmul"(%a, %b, %c) {activation = "relu", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<16x64xf32>, tensor<64x32xf32>, tensor<32xf32>) -> tensor<16x32xf32>
  return %y : tensor<16x32xf32>
}

// CHECK-LABEL: func.func @batched
// CHECK:       "prim.matmul"(%arg0, %arg1)
// CHECK-SAME:  prim.params = {mt = 6 : i64, nt = 2 : i64, pack = 1 : i64}
// CHECK-SAME:  prim.problem = "gemm-b2-m2-n2-k3-nn-batched-f32-none"
// CHECK-SAME:  prim.solver = "gemm_packed"
func.func @batched(%x: tensor<2x2x3xf32>, %w: tensor<2x3x2xf32>) -> tensor<2x2x2xf32> {
  %y = "prim.matmul"(%x, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x2x3xf32>, tensor<2x3x2xf32>) -> tensor<2x2x2xf32>
  return %y : tensor<2x2x2xf32>
}

// Attention's Q K^T: a batched, transposed rhs.
// CHECK-LABEL: func.func @batched_transposed
// CHECK:       "prim.matmul"(%arg0, %arg1)
// CHECK-SAME:  prim.problem = "gemm-b12-m128-n128-k64-nt-batched-f32-none"
// CHECK-SAME:  prim.solver = "gemm_packed"
// CHECK-SAME:  transpose_rhs = 1 : i64
func.func @batched_transposed(%q: tensor<12x128x64xf32>, %k: tensor<12x128x64xf32>) -> tensor<12x128x128xf32> {
  %y = "prim.matmul"(%q, %k) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<12x128x64xf32>, tensor<12x128x64xf32>) -> tensor<12x128x128xf32>
  return %y : tensor<12x128x128xf32>
}

// A linear layer (matmul with transpose_rhs = 1) with constant weights: prim-select re-lays the
// weights out once at compile time into [K, N] and the op becomes a plain GEMM (transpose_rhs = 0,
// gemm forced), which gemm_packed (the heuristic) takes further into its column panels [N/NT, K, NT]
// (transpose_rhs = 2; here one panel of NT = N = 2). Weights known only at run time go through a
// prim.transpose (a kernel) instead, and stay [K, N].
// RUN: openprim-opt %s -p prim-select | filecheck %s --check-prefixes=CHECK,HEURISTIC
// RUN: openprim-opt %s -p 'prim-select{solver=gemm}' | filecheck %s --check-prefixes=CHECK,FORCED

// W = [[1, 2, 3], [4, 5, 6]] ([N, K] = 2x3) -> W^T = [[1, 4], [2, 5], [3, 6]] ([K, N] = 3x2).
// CHECK-LABEL: func.func @linear(
// HEURISTIC:   %[[W:.+]] = "prim.constant"() {value = dense<{{\[\[\[}}1.000000e+00, 4.000000e+00], [2.000000e+00, 5.000000e+00], [3.000000e+00, 6.000000e+00]]]> : tensor<1x3x2xf32>}
// FORCED:      %[[W:.+]] = "prim.constant"() {value = dense<{{\[\[}}1.000000e+00, 4.000000e+00], [2.000000e+00, 5.000000e+00], [3.000000e+00, 6.000000e+00]]> : tensor<3x2xf32>}
// CHECK-NEXT:  %[[Y:.+]] = "prim.matmul"(%arg0, %[[W]])
// CHECK-SAME:  prim.problem = "gemm-b1-m2-n2-k3-nn-f32-none"
// HEURISTIC-SAME: prim.solver = "gemm_packed"
// FORCED-SAME:  prim.solver = "gemm"
// HEURISTIC-SAME: transpose_rhs = 2 : i64
// HEURISTIC-SAME: (tensor<2x3xf32>, tensor<1x3x2xf32>) -> tensor<2x2xf32>
// FORCED-SAME:  transpose_rhs = 0 : i64
// FORCED-SAME:  (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
// CHECK-NEXT:  return %[[Y]]
func.func @linear(%x: tensor<2x3xf32>) -> tensor<2x2xf32> {
  %w = "prim.constant"() {value = dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %y = "prim.matmul"(%x, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x2xf32>
  return %y : tensor<2x2xf32>
}

// CHECK-LABEL: func.func @linear_runtime_weights
// CHECK-NEXT:  %[[WT:.+]] = "prim.transpose"(%arg1) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:  %[[Y:.+]] = "prim.matmul"(%arg0, %[[WT]])
// CHECK-SAME:  prim.problem = "gemm-b1-m2-n2-k3-nn-f32-none"
// HEURISTIC-SAME: prim.solver = "gemm_packed"
// FORCED-SAME:  prim.solver = "gemm"
// CHECK-SAME:  transpose_rhs = 0 : i64
// CHECK-NEXT:  return %[[Y]]
func.func @linear_runtime_weights(%x: tensor<2x3xf32>, %w: tensor<2x3xf32>) -> tensor<2x2xf32> {
  %y = "prim.matmul"(%x, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x2xf32>
  return %y : tensor<2x2xf32>
}

// prim-fuse's matmul_views rewrites (passes/matmul_views.py): the view ops torch.export writes around
// nn.MultiheadAttention (batch_first) moved through the row-wise projections.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// The packed in-projection on transpose(x) [S,B,E], unflattened into q, k, v (transpose + slices), each
// viewed as [S, B*H, D] and transposed to [B*H, S, D]: one GEMM per operand on x itself, with its rows of W
// (transpose_rhs: W is [N, K]; row r of W is r here) and its part of the bias, then one head transpose each.
// No slice and no transpose of x is left.
// CHECK-LABEL: func.func @packed_qkv
// CHECK-NOT:  prim.slice
// CHECK-DAG:  %[[WV:.+]] = "prim.constant"() {value = dense<{{\[\[}}8.000000e+00, 8.000000e+00, 8.000000e+00, 8.000000e+00], [9.000000e+00
// CHECK-DAG:  %[[BV:.+]] = "prim.constant"() {value = dense<[8.000000e+00, 9.000000e+00, 1.000000e+01, 1.100000e+01]> : tensor<4xf32>}
// CHECK:      %[[V:.+]] = "prim.matmul"(%arg0, %[[WV]], %[[BV]]) {{.*}} -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[VR:.+]] = "prim.reshape"(%[[V]]) : (tensor<2x3x4xf32>) -> tensor<2x3x2x2xf32>
// CHECK-NEXT: %[[VT:.+]] = "prim.transpose"(%[[VR]]) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x3x2x2xf32>) -> tensor<2x2x3x2xf32>
// CHECK-DAG:  %[[BK:.+]] = "prim.constant"() {value = dense<[4.000000e+00, 5.000000e+00, 6.000000e+00, 7.000000e+00]> : tensor<4xf32>}
// CHECK:      %[[K:.+]] = "prim.matmul"(%arg0, %{{.+}}, %[[BK]])
// CHECK-NEXT: %[[KR:.+]] = "prim.reshape"(%[[K]])
// CHECK-NEXT: %[[KT:.+]] = "prim.transpose"(%[[KR]]) {perm = array<i64: 0, 2, 1, 3>}
// CHECK-DAG:  %[[BQ:.+]] = "prim.constant"() {value = dense<[0.000000e+00, 1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<4xf32>}
// CHECK:      %[[Q:.+]] = "prim.matmul"(%arg0, %{{.+}}, %[[BQ]])
// CHECK-NEXT: %[[QR:.+]] = "prim.reshape"(%[[Q]])
// CHECK-NEXT: %[[QT:.+]] = "prim.transpose"(%[[QR]]) {perm = array<i64: 0, 2, 1, 3>}
// CHECK-NOT:  prim.transpose
// CHECK:      return %[[QT]], %[[KT]], %[[VT]]
func.func @packed_qkv(%x: tensor<2x3x4xf32>) -> (tensor<2x2x3x2xf32>, tensor<2x2x3x2xf32>, tensor<2x2x3x2xf32>) {
  %w = "prim.constant"() {value = dense<[[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0], [3.0, 3.0, 3.0, 3.0], [4.0, 4.0, 4.0, 4.0], [5.0, 5.0, 5.0, 5.0], [6.0, 6.0, 6.0, 6.0], [7.0, 7.0, 7.0, 7.0], [8.0, 8.0, 8.0, 8.0], [9.0, 9.0, 9.0, 9.0], [10.0, 10.0, 10.0, 10.0], [11.0, 11.0, 11.0, 11.0]]> : tensor<12x4xf32>} : () -> tensor<12x4xf32>
  %b = "prim.constant"() {value = dense<[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]> : tensor<12xf32>} : () -> tensor<12xf32>
  %xt = "prim.transpose"(%x) {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %m = "prim.matmul"(%xt, %w, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<3x2x4xf32>, tensor<12x4xf32>, tensor<12xf32>) -> tensor<3x2x12xf32>
  %u = "prim.reshape"(%m) : (tensor<3x2x12xf32>) -> tensor<3x2x3x4xf32>
  %u1 = "prim.reshape"(%u) : (tensor<3x2x3x4xf32>) -> tensor<1x3x2x3x4xf32>
  %t = "prim.transpose"(%u1) {perm = array<i64: 3, 1, 2, 0, 4>} : (tensor<1x3x2x3x4xf32>) -> tensor<3x3x2x1x4xf32>
  %p = "prim.reshape"(%t) : (tensor<3x3x2x1x4xf32>) -> tensor<3x3x2x4xf32>
  %s0 = "prim.slice"(%p) {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 3, 2, 4>, steps = array<i64: 1, 1, 1, 1>} : (tensor<3x3x2x4xf32>) -> tensor<1x3x2x4xf32>
  %r0 = "prim.reshape"(%s0) : (tensor<1x3x2x4xf32>) -> tensor<3x4x2xf32>
  %h0 = "prim.transpose"(%r0) {perm = array<i64: 1, 0, 2>} : (tensor<3x4x2xf32>) -> tensor<4x3x2xf32>
  %o0 = "prim.reshape"(%h0) : (tensor<4x3x2xf32>) -> tensor<2x2x3x2xf32>
  %s1 = "prim.slice"(%p) {starts = array<i64: 1, 0, 0, 0>, ends = array<i64: 2, 3, 2, 4>, steps = array<i64: 1, 1, 1, 1>} : (tensor<3x3x2x4xf32>) -> tensor<1x3x2x4xf32>
  %r1 = "prim.reshape"(%s1) : (tensor<1x3x2x4xf32>) -> tensor<3x4x2xf32>
  %h1 = "prim.transpose"(%r1) {perm = array<i64: 1, 0, 2>} : (tensor<3x4x2xf32>) -> tensor<4x3x2xf32>
  %o1 = "prim.reshape"(%h1) : (tensor<4x3x2xf32>) -> tensor<2x2x3x2xf32>
  %s2 = "prim.slice"(%p) {starts = array<i64: 2, 0, 0, 0>, ends = array<i64: 3, 3, 2, 4>, steps = array<i64: 1, 1, 1, 1>} : (tensor<3x3x2x4xf32>) -> tensor<1x3x2x4xf32>
  %r2 = "prim.reshape"(%s2) : (tensor<1x3x2x4xf32>) -> tensor<3x4x2xf32>
  %h2 = "prim.transpose"(%r2) {perm = array<i64: 1, 0, 2>} : (tensor<3x4x2xf32>) -> tensor<4x3x2xf32>
  %o2 = "prim.reshape"(%h2) : (tensor<4x3x2xf32>) -> tensor<2x2x3x2xf32>
  return %o0, %o1, %o2 : tensor<2x2x3x2xf32>, tensor<2x2x3x2xf32>, tensor<2x2x3x2xf32>
}

// The heads merged back ([B,H,S,D] -> [S,B,H,D] -> [S*B, E]), the out-projection and the transpose to
// [B,S,E]: the row permutation after the GEMM folds into the one before it, [B,H,S,D] -> [B,S,H,D].
// CHECK-LABEL: func.func @merge_heads_out_proj
// CHECK:      %[[T:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x3x2xf32>) -> tensor<2x3x2x2xf32>
// CHECK-NEXT: %[[R:.+]] = "prim.reshape"(%[[T]]) : (tensor<2x3x2x2xf32>) -> tensor<2x3x4xf32>
// CHECK:      %[[M:.+]] = "prim.matmul"(%[[R]], %{{.+}}, %{{.+}}) {{.*}} -> tensor<2x3x4xf32>
// CHECK-NOT:  prim.transpose
// CHECK:      return %[[M]]
func.func @merge_heads_out_proj(%o: tensor<2x2x3x2xf32>) -> tensor<2x3x4xf32> {
  %w = "prim.constant"() {value = dense<[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]> : tensor<4x4xf32>} : () -> tensor<4x4xf32>
  %b = "prim.constant"() {value = dense<[0.5, 1.5, 2.5, 3.5]> : tensor<4xf32>} : () -> tensor<4xf32>
  %t = "prim.transpose"(%o) {perm = array<i64: 2, 0, 1, 3>} : (tensor<2x2x3x2xf32>) -> tensor<3x2x2x2xf32>
  %r = "prim.reshape"(%t) : (tensor<3x2x2x2xf32>) -> tensor<6x4xf32>
  %m = "prim.matmul"(%r, %w, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<6x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<6x4xf32>
  %v = "prim.reshape"(%m) : (tensor<6x4xf32>) -> tensor<3x2x4xf32>
  %y = "prim.transpose"(%v) {perm = array<i64: 1, 0, 2>} : (tensor<3x2x4xf32>) -> tensor<2x3x4xf32>
  return %y : tensor<2x3x4xf32>
}

// Two uses reading the same columns: splitting would compute them twice, so nothing changes.
// CHECK-LABEL: func.func @same_columns_twice
// CHECK:      %[[M:.+]] = "prim.matmul"(%arg0
// CHECK-NEXT: "prim.transpose"(%[[M]]) {perm = array<i64: 1, 0>}
// CHECK-NEXT: "prim.reshape"(%[[M]])
// CHECK-NOT:  prim.matmul
func.func @same_columns_twice(%x: tensor<6x4xf32>) -> (tensor<4x6xf32>, tensor<3x2x4xf32>) {
  %w = "prim.constant"() {value = dense<[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]> : tensor<4x4xf32>} : () -> tensor<4x4xf32>
  %m = "prim.matmul"(%x, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<6x4xf32>, tensor<4x4xf32>) -> tensor<6x4xf32>
  %t = "prim.transpose"(%m) {perm = array<i64: 1, 0>} : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %r = "prim.reshape"(%m) : (tensor<6x4xf32>) -> tensor<3x2x4xf32>
  return %t, %r : tensor<4x6xf32>, tensor<3x2x4xf32>
}

// A row gather after a GEMM (Swin's roll back after the window reverse) moves before it, onto the lhs rows
// (it is no wider there), so the residual add that reads the result becomes the GEMM's epilogue.
// CHECK-LABEL: func.func @rows_gathered_after_gemm
// CHECK:      %[[I:.+]] = "prim.constant"() {value = dense<[1, 2, 3, 0]> : tensor<4xi64>}
// CHECK-NEXT: %[[G:.+]] = "prim.gather"(%arg0, %[[I]]) {axis = 1 : i64} : (tensor<2x4x3xf32>, tensor<4xi64>) -> tensor<2x4x3xf32>
// CHECK:      %[[M:.+]] = "prim.matmul"(%[[G]], %{{.+}}, %arg1) {{.*}}operandSegmentSizes = array<i32: 1, 1, 0, 1>
// CHECK-NOT:  prim.add
// CHECK:      return %[[M]]
func.func @rows_gathered_after_gemm(%a: tensor<2x4x3xf32>, %x: tensor<2x4x3xf32>) -> tensor<2x4x3xf32> {
  %w = "prim.constant"() {value = dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]> : tensor<3x3xf32>} : () -> tensor<3x3xf32>
  %l = "prim.reshape"(%a) : (tensor<2x4x3xf32>) -> tensor<8x3xf32>
  %m = "prim.matmul"(%l, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<8x3xf32>, tensor<3x3xf32>) -> tensor<8x3xf32>
  %r = "prim.reshape"(%m) : (tensor<8x3xf32>) -> tensor<2x4x3xf32>
  %i = "prim.constant"() {value = dense<[1, 2, 3, 0]> : tensor<4xi64>} : () -> tensor<4xi64>
  %g = "prim.gather"(%r, %i) {axis = 1 : i64} : (tensor<2x4x3xf32>, tensor<4xi64>) -> tensor<2x4x3xf32>
  %o = "prim.add"(%x, %g) : (tensor<2x4x3xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
  return %o : tensor<2x4x3xf32>
}

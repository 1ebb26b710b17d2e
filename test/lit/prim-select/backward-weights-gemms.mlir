// A filter gradient on a GPU whose only backward-weights solver is the reference loop nest (sm_80; sm_90 has
// conv_bwd_weights_wgmma: backward-weights-wgmma.mlir) becomes one GEMM
// per filter tap (passes/backward_weights_gemms.py): dy^T [K, M] once (M = N OH OW), the input padded once,
// then per tap (r, s) its strided slice from (r, s) with the stride as steps, [M, C], and dy^T @ that
// slice -> [K, C] on the matrix cores; the nine products stacked to KRSC and transposed to the op's KCRS.
// RUN: openprim-opt %s -p "prim-select{target=nvvm:sm_80}" | filecheck %s

// CHECK-NOT:   prim.conv2d_backward_weights
// CHECK:       %[[DY:.+]] = "prim.reshape"(%arg1) : (tensor<4x4x4x32xf16>) -> tensor<64x32xf16>
// CHECK-NEXT:  %[[DYT:.+]] = "prim.transpose"(%[[DY]]) {perm = array<i64: 1, 0>} : (tensor<64x32xf16>) -> tensor<32x64xf16>
// CHECK-NEXT:  %[[XP:.+]] = "prim.pad"(%arg0) {pads = array<i64: 0, 1, 1, 0, 0, 0, 0, 0>{{.*}} -> tensor<4x9x9x16xf16>
// CHECK-NEXT:  %[[X00:.+]] = "prim.slice"(%[[XP]]) {ends = array<i64: 4, 7, 7, 16>, starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 2, 2, 1>}
// CHECK-COUNT-8: "prim.slice"(%[[XP]])
// CHECK-NEXT:  %[[A00:.+]] = "prim.reshape"(%[[X00]]) : (tensor<4x4x4x16xf16>) -> tensor<64x16xf16>
// CHECK-NEXT:  "prim.matmul"(%[[DYT]], %[[A00]]) {{.*}}prim.problem = "gemm-b1-m32-n16-k64-nn-f16-none", prim.solver = "gemm_mma"
// CHECK-COUNT-8: "prim.matmul"(%[[DYT]], %{{.+}}) {{.*}}prim.solver = "gemm_mma"
// CHECK:       %[[KRSC:.+]] = "prim.reshape"(%{{.+}}) : (tensor<32x9x16xf16>) -> tensor<32x3x3x16xf16>
// CHECK-NEXT:  %[[KCRS:.+]] = "prim.transpose"(%[[KRSC]]) {perm = array<i64: 0, 3, 1, 2>} : (tensor<32x3x3x16xf16>) -> tensor<32x16x3x3xf16>
// CHECK-NEXT:  return %[[KCRS]]
func.func @main(%x: tensor<4x8x8x16xf16>, %dy: tensor<4x4x4x32xf16>) -> tensor<32x16x3x3xf16> {
  %0 = "prim.conv2d_backward_weights"(%x, %dy) {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, layout = "NHWC", filter_layout = "KCRS", filter_size = array<i64: 3, 3>} : (tensor<4x8x8x16xf16>, tensor<4x4x4x32xf16>) -> tensor<32x16x3x3xf16>
  return %0 : tensor<32x16x3x3xf16>
}

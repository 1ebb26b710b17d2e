// Sixteen rows (16 sequences decoding a token each) on NVIDIA take gemv_mma (kernels/nvidia/gemv_mma.py): the
// rows are the A operand of one mma.sync m16n8k16 tile, each block streams a slab of the weights' columns over
// all of k with its warps splitting k, and no second launch adds split-K parts. The slab is the widest that
// divides N (32 columns for 3072: 96 blocks; 16 for 768: 48, with 4 warps), constant weights packed in
// panels of those columns; GPT-2's head (50264 columns) streams faster on the tiled GEMM and stays there. Each
// warp copies its tiles with cp.async into a ring of its own, waits with a warp barrier only, and reads B
// transposed by ldmatrix; the warps' partials meet in shared memory behind one block barrier.
// RUN: openprim-opt %s -p "prim-select{target=nvvm:sm_90}" | filecheck %s
// RUN: openprim-opt %s -p "prim-select{target=nvvm:sm_80}" | filecheck %s
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90},prim-lower{target=nvvm:sm_90}' | filecheck %s --check-prefix=PTX

// CHECK-LABEL: func.func @batch16
// CHECK:       "prim.matmul"({{.*}}prim.params = {tile = {{[0-9]+}} : i64}, prim.problem = "gemm-b1-m16-n768-k768-nn-f16-bias", prim.solver = "gemv_mma"
// CHECK:       "prim.matmul"({{.*}}prim.params = {tile = {{[0-9]+}} : i64}, prim.problem = "gemm-b1-m16-n3072-k768-nn-f16-bias+gelu", prim.solver = "gemv_mma"
// CHECK:       "prim.matmul"({{.*}}prim.problem = "gemm-b1-m16-n50264-k768-nn-f16-none", prim.solver = "{{gemm_wgmma|gemm_mma}}"
// CHECK-LABEL: func.func @rows17
// CHECK:       "prim.matmul"
// CHECK-NOT:   gemv_mma
// CHECK-SAME:  prim.problem = "gemm-b1-m17-n768-k768-nn-f16-bias"

// PTX:         .entry matmul_0_kernel
// PTX:         cp.async.cg.shared.global
// PTX:         bar.warp.sync
// PTX:         ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PTX:         ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16
// PTX:         mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// PTX:         bar.sync
// PTX:         st.global.v4.b32

func.func @batch16(%x: tensor<16x768xf16>, %w: tensor<768x768xf16>, %b: tensor<768xf16>, %w1: tensor<768x3072xf16>, %b1: tensor<3072xf16>, %head: tensor<768x50264xf16>) -> (tensor<16x3072xf16>, tensor<16x50264xf16>) {
  %0 = "prim.matmul"(%x, %w, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<16x768xf16>, tensor<768x768xf16>, tensor<768xf16>) -> tensor<16x768xf16>
  %1 = "prim.matmul"(%0, %w1, %b1) {activation = "gelu", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<16x768xf16>, tensor<768x3072xf16>, tensor<3072xf16>) -> tensor<16x3072xf16>
  %2 = "prim.matmul"(%0, %head) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<16x768xf16>, tensor<768x50264xf16>) -> tensor<16x50264xf16>
  return %1, %2 : tensor<16x3072xf16>, tensor<16x50264xf16>
}

func.func @rows17(%x: tensor<17x768xf16>, %w: tensor<768x768xf16>, %b: tensor<768xf16>) -> tensor<17x768xf16> {
  %0 = "prim.matmul"(%x, %w, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<17x768xf16>, tensor<768x768xf16>, tensor<768xf16>) -> tensor<17x768xf16>
  return %0 : tensor<17x768xf16>
}

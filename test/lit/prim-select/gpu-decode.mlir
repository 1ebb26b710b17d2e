// A matmul of a few rows on a GPU (a decode step's projection: one token) takes gemv_gpu (kernels/gpu/gemv.py):
// a block per slab of the weights' columns for every row, not a 64- or 128-row matrix-core tile of which one
// row is used. Its column lanes: as few as read a 32-byte sector of a weight row (2 x 8 f16), since 768
// columns give 132 SMs no more blocks than that; GPT-2's head (50264 columns) a warp's worth, 32 x 8 (16 x 8 on
// gfx942, whose 304 CUs want more blocks). Sixteen
// rows take the mma.sync GEMV on NVIDIA (gpu-gemv-mma.mlir), a matrix core's tile on gfx942. The lowered kernel reads the weights 16 bytes at a time. The step's attention
// (one query row per head over a 544-key cache) takes flash-decoding, attention_decode_gpu (kernels/gpu/
// decode_attention.py), where the flash kernels would compute a tile of 64 or 128 query rows; 32 query rows
// (a prefill) stay on them.
// RUN: openprim-opt %s -p "prim-select{target=nvvm:sm_90}" | filecheck %s
// RUN: openprim-opt %s -p "prim-select{target=rocdl:gfx942}" | filecheck %s
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90},prim-lower{target=nvvm:sm_90}' | filecheck %s --check-prefix=PTX

// CHECK-LABEL: func.func @decode
// CHECK:       "prim.matmul"({{.*}}prim.params = {lanes = 2 : i64}, prim.problem = "gemm-b1-m1-n768-k768-nn-f16-bias", prim.solver = "gemv_gpu"
// CHECK:       "prim.matmul"({{.*}}prim.params = {lanes = {{32|16}} : i64}, prim.problem = "gemm-b1-m1-n50264-k768-nn-f16-none", prim.solver = "gemv_gpu"
// CHECK-LABEL: func.func @prefill
// CHECK:       "prim.matmul"
// CHECK-NOT:   gemv_gpu
// CHECK-SAME:  prim.problem = "gemm-b1-m16-n768-k768-nn-f16-bias", prim.solver = "{{gemv_mma|gemm_mfma}}"

// CHECK-LABEL: func.func @attend
// CHECK:       "prim.attention"({{.*}}prim.problem = "attention-b12-q1-k544-d64-mask1x1x1x544-f16", prim.solver = "attention_decode_gpu"
// CHECK:       "prim.attention"({{.*}}prim.problem = "attention-b12-q32-k544-d64-mask1x1x32x544-f16", prim.solver = "attention_flash_{{wgmma|mma|mfma}}"

// PTX:         .entry matmul_0_kernel
// PTX-SAME:    ld.global.nc.v4.b32
// PTX-SAME:    shfl.sync.bfly

func.func @decode(%x: tensor<1x768xf16>, %w: tensor<768x768xf16>, %b: tensor<768xf16>, %head: tensor<768x50264xf16>) -> tensor<1x50264xf16> {
  %0 = "prim.matmul"(%x, %w, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x768xf16>, tensor<768x768xf16>, tensor<768xf16>) -> tensor<1x768xf16>
  %1 = "prim.matmul"(%0, %head) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x768xf16>, tensor<768x50264xf16>) -> tensor<1x50264xf16>
  return %1 : tensor<1x50264xf16>
}

func.func @prefill(%x: tensor<16x768xf16>, %w: tensor<768x768xf16>, %b: tensor<768xf16>) -> tensor<16x768xf16> {
  %0 = "prim.matmul"(%x, %w, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<16x768xf16>, tensor<768x768xf16>, tensor<768xf16>) -> tensor<16x768xf16>
  return %0 : tensor<16x768xf16>
}

func.func @attend(%q: tensor<1x12x1x64xf16>, %k: tensor<1x12x544x64xf16>, %v: tensor<1x12x544x64xf16>, %m: tensor<1x1x1x544xf16>,
                  %q32: tensor<1x12x32x64xf16>, %m32: tensor<1x1x32x544xf16>) -> (tensor<1x12x1x64xf16>, tensor<1x12x32x64xf16>) {
  %0 = "prim.attention"(%q, %k, %v, %m) {scale = 0.125 : f64, causal = 0 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (tensor<1x12x1x64xf16>, tensor<1x12x544x64xf16>, tensor<1x12x544x64xf16>, tensor<1x1x1x544xf16>) -> tensor<1x12x1x64xf16>
  %1 = "prim.attention"(%q32, %k, %v, %m32) {scale = 0.125 : f64, causal = 0 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (tensor<1x12x32x64xf16>, tensor<1x12x544x64xf16>, tensor<1x12x544x64xf16>, tensor<1x1x32x544xf16>) -> tensor<1x12x32x64xf16>
  return %0, %1 : tensor<1x12x1x64xf16>, tensor<1x12x32x64xf16>
}

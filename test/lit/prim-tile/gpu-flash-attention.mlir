// prim.attention in f16/bf16 with head dims 64 and 128 stays whole on NVIDIA (prim-decompose) and becomes one
// flash-attention kernel (kernels/nvidia/flash_attention.py): a block of 4 warps per 64 query rows and head,
// K and V tiles of 64 keys in padded shared memory ([64][D + 8]) filled by cp.async, S = Q K^T and O += P V on
// mma.sync m16n8k16 (K fragments by ldmatrix, V by ldmatrix.trans), the online softmax in f32 with quad
// shuffles and exp2, P reused from the accumulators as the A operand. The scores never reach memory. On sm_80
// here: sm_90 takes the wgmma kernel where there is no mask (gpu-flash-attention-wgmma.mlir).
// RUN: openprim-opt %s -p 'prim-decompose{target=nvvm:sm_80},prim-select{target=nvvm:sm_80},prim-tile{target=nvvm:sm_80}' | filecheck %s
// The PTX instructions, through the whole pipeline:
// RUN: openprim-opt %s -p 'prim-pipeline{target=nvvm:sm_80}' | filecheck %s --check-prefix=PTX

// Causal with a mask broadcast over the batch, Sq = 70 (two query blocks), Sk = 53 (one ragged key tile).
// CHECK-LABEL: func.func @attention_0(
// CHECK-SAME:  memref<2x3x70x64xf16>, %{{.+}}: memref<2x3x53x64xf16>, %{{.+}}: memref<2x3x53x64xf16>, %{{.+}}: memref<1x3x70x53xf16>
// CHECK-SAME:  prim.solver = "attention_flash_mma"
// CHECK:       gpu.launch blocks({{.*}}) in (%{{.+}} = %c2, %{{.+}} = %c6, %{{.+}} = %c1{{.*}}) threads({{.*}}) in (%{{.+}} = %c128,
// CHECK-SAME:  workgroup(%[[KS:arg[0-9]+]] : memref<64x72xf16, #gpu.address_space<workgroup>>, %[[VS:arg[0-9]+]] : memref<64x72xf16, #gpu.address_space<workgroup>>)
// CHECK:       arith.minui
// CHECK:       nvgpu.device_async_copy {{.*}}, %[[KS]][{{.*}}], 8, {{.*}} {bypassL1}
// CHECK:       scf.for
// CHECK:       nvgpu.device_async_wait
// CHECK-NEXT:  gpu.barrier
// CHECK:       nvgpu.device_async_copy {{.*}}, %[[VS]][{{.*}}], 8
// CHECK:       nvgpu.ldmatrix %[[KS]][{{.*}}] {numTiles = 2 : i32, transpose = false} : memref<64x72xf16, #gpu.address_space<workgroup>> -> vector<2x2xf16>
// CHECK:       nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>,
// CHECK-SAME:  shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK:       memref.load %{{.+}}[{{.*}}] : memref<1x3x70x53xf16>
// CHECK-NEXT:  arith.extf
// CHECK:       gpu.shuffle xor
// CHECK:       math.exp2
// CHECK:       nvgpu.device_async_copy {{.*}}, %[[KS]][{{.*}}], 8
// CHECK:       arith.truncf {{.*}} : f32 to f16
// CHECK:       nvgpu.ldmatrix %[[VS]][{{.*}}] {numTiles = 2 : i32, transpose = true}
// CHECK:       nvvm.mma.sync
// CHECK:       scf.yield
// CHECK:       gpu.shuffle xor
// CHECK:       vector.store {{.*}} : memref<420x64xf16>, vector<2xf16>
func.func @causal_masked(%q: tensor<2x3x70x64xf16>, %k: tensor<2x3x53x64xf16>, %v: tensor<2x3x53x64xf16>,
                         %m: tensor<1x3x70x53xf16>) -> tensor<2x3x70x64xf16> {
  %o = "prim.attention"(%q, %k, %v, %m) {scale = 0.125 : f64, causal = 1 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 1>}
      : (tensor<2x3x70x64xf16>, tensor<2x3x53x64xf16>, tensor<2x3x53x64xf16>, tensor<1x3x70x53xf16>) -> tensor<2x3x70x64xf16>
  return %o : tensor<2x3x70x64xf16>
}

// bf16, head dim 128: the registers go to mma.sync as i32; rows of 128 + 8 elements.
// CHECK-LABEL: func.func @attention_1(
// CHECK-SAME:  prim.solver = "attention_flash_mma"
// CHECK:       workgroup(%{{.+}} : memref<64x136xbf16, #gpu.address_space<workgroup>>, %{{.+}} : memref<64x136xbf16, #gpu.address_space<workgroup>>)
// CHECK:       vector.bitcast {{.*}} : vector<2xbf16> to vector<1xi32>
// CHECK:       nvvm.mma.sync {{.*}} multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>
// CHECK-SAME:  : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK-NOT:   memref.load
// CHECK:       math.exp2
func.func @plain_bf16(%q: tensor<1x2x100x128xbf16>, %k: tensor<1x2x130x128xbf16>, %v: tensor<1x2x130x128xbf16>)
    -> tensor<1x2x100x128xbf16> {
  %o = "prim.attention"(%q, %k, %v) {scale = 0.088 : f64, causal = 0 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 0>}
      : (tensor<1x2x100x128xbf16>, tensor<1x2x130x128xbf16>, tensor<1x2x130x128xbf16>) -> tensor<1x2x100x128xbf16>
  return %o : tensor<1x2x100x128xbf16>
}

// PTX:         gpu.binary @device
// PTX-SAME:    cp.async.cg.shared.global
// PTX-SAME:    ldmatrix.sync.aligned.m8n8.x2.shared.b16
// PTX-SAME:    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// PTX-SAME:    shfl.sync.bfly.b32
// PTX-SAME:    ex2.approx.f32
// PTX-SAME:    ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16
// PTX-SAME:    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32

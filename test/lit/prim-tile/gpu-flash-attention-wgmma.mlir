// prim.attention without a mask, in f16/bf16 with head dims 64 and 128, on sm_90 becomes the warpgroup-MMA
// flash-attention kernel (kernels/nvidia/flash_attention_wgmma.py): tensor maps of 128-row x 64-column boxes
// of one head (here BSHD: [1, 128, 1, 64]), a launch of 2 consumer warpgroups and a producer warpgroup (384
// threads) over 10 mbarriers (Q, K[2], V[2] full; Q, K[2], V[2] empty); the producer gives registers up
// (setmaxnreg 40) and loops over its items (causal: pairs of query tiles), waiting for empty slots before each
// TMA load; in the else branch the consumers take registers (232) and compute S = Q K^T (m64n128k16, both
// operands K-major from shared memory), the softmax with exp2 of one FMA, P packed in registers as wgmma's A
// fragments, O += P V (m64n64k16 with A from registers: inline PTX; B N-major), S[t] waited with one product
// still in flight and P[t-1] held until its product is done. The key-tile loop's bound goes through an opaque
// move and O starts from opaque zeros (either way LLVM put copies inside a wgmma stage: ptxas serialized them).
// RUN: openprim-opt %s -p 'prim-decompose{target=nvvm:sm_90},prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s
// The PTX instructions, through the whole pipeline:
// RUN: openprim-opt %s -p 'prim-pipeline{target=nvvm:sm_90}' | filecheck %s --check-prefix=PTX

// Causal, 300 positions (3 query tiles: pairs (2, 0) and (1) per head), 2 images x 3 heads: 12 blocks.
// CHECK-LABEL: func.func @attention_0(
// CHECK-SAME:  prim.solver = "attention_flash_wgmma"
// CHECK:       nvgpu.tma.create.descriptor %{{.+}} box[%c1, %c128, %c1, %c64] {{.*}} -> <tensor = memref<1x128x1x64xf16, 3>, swizzle = swizzle_128b
// CHECK:       gpu.launch blocks({{.*}}) in (%{{.+}} = %c12, %{{.+}} = %c1, %{{.+}} = %c1) threads({{.*}}) in (%{{.+}} = %c384,
// CHECK-SAME:  dynamic_shared_memory_size
// CHECK:       nvgpu.mbarrier.create -> <memorySpace = #gpu.address_space<workgroup>, num_barriers = 10>
// CHECK:       nvgpu.mbarrier.init %{{.+}}[%c9], %c256
// producer
// CHECK:       nvvm.setmaxregister decrease 40
// CHECK:       scf.for %{{.+}} = %{{.+}} to %c12 step %c12 iter_args
// CHECK:       scf.for
// CHECK:       nvgpu.mbarrier.try_wait.parity %{{.+}}[%c5]
// CHECK:       nvgpu.mbarrier.arrive.expect_tx
// CHECK:       nvgpu.tma.async.load
// CHECK:       nvgpu.mbarrier.try_wait.parity
// CHECK:       nvgpu.tma.async.load
// consumers
// CHECK:       } else {
// CHECK-NEXT:  nvvm.setmaxregister increase 232
// CHECK:       scf.for %{{.+}} = %{{.+}} to %c12 step %c12 iter_args
// CHECK:       nvvm.wgmma.fence.aligned
// CHECK-NEXT:  nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 16>, D[<f32>, <zero>], A[<f16>, <one>, <row>], B[<f16>, <one>, <col>]
// CHECK:       nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT:  nvvm.wgmma.wait.group.sync.aligned 0
// CHECK:       nvgpu.mbarrier.arrive
// CHECK:       arith.cmpi sgt, {{.*}} : i32
// CHECK:       gpu.shuffle xor
// CHECK:       math.fma
// CHECK-NEXT:  math.exp2
// CHECK:       arith.truncf {{.*}} : vector<2xf32> to vector<2xf16>
// CHECK-NEXT:  vector.bitcast {{.*}} : vector<2xf16> to vector<1xi32>
// CHECK:       [[P0:%.+]] = vector.from_elements {{.*}} : vector<32xi32>
// CHECK:       llvm.inline_asm has_side_effects asm_dialect = att "mov.b64 $0, $1;"
// CHECK:       [[O0:%.+]] = llvm.inline_asm has_side_effects asm_dialect = att "mov.b32 $0, 0;
// CHECK:       scf.for {{.*}} iter_args({{.*}} = [[O0]], {{.*}} = [[P0]])
// CHECK:       nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 16>
// CHECK:       nvvm.wgmma.fence.aligned
// CHECK:       vector.extract %{{.+}}[0] : i32 from vector<32xi32>
// CHECK:       llvm.inline_asm has_side_effects asm_dialect = att "{\0A.reg .pred p;\0Asetp.ne.b32 p, 1, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {$0,
// CHECK-SAME:  "=f,{{.*}},r,r,r,r,l,0,1,
// CHECK:       nvvm.wgmma.wait.group.sync.aligned 1
// CHECK:       nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NEXT:  llvm.inline_asm has_side_effects asm_dialect = att "", "r,r,
// CHECK:       vector.store {{.*}} : memref<2x300x3x64xf16>, vector<2xf16>
func.func @causal_bshd(%q: tensor<2x300x3x64xf16>, %k: tensor<2x300x3x64xf16>, %v: tensor<2x300x3x64xf16>) -> tensor<2x300x3x64xf16> {
  %o = "prim.attention"(%q, %k, %v) {scale = 0.125 : f64, causal = 1 : i64, layout = "BSHD", operandSegmentSizes = array<i32: 1, 1, 1, 0>}
      : (tensor<2x300x3x64xf16>, tensor<2x300x3x64xf16>, tensor<2x300x3x64xf16>) -> tensor<2x300x3x64xf16>
  return %o : tensor<2x300x3x64xf16>
}

// PTX:         gpu.binary @device
// PTX-SAME:    setmaxnreg.dec.sync.aligned.u32 {{\\09}}40;
// PTX-SAME:    mbarrier.try_wait.parity
// PTX-SAME:    cp.async.bulk.tensor.4d
// PTX-SAME:    setmaxnreg.inc.sync.aligned.u32 {{\\09}}232;
// PTX-SAME:    wgmma.fence.sync.aligned
// PTX-SAME:    wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16
// PTX-SAME:    wgmma.commit_group.sync.aligned
// PTX-SAME:    ex2.approx
// PTX-SAME:    wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16

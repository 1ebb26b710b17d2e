// prim.attention in f16/bf16 with head dims 64 and 128 stays whole on AMD matrix cores (prim-decompose) and
// becomes one flash-attention kernel (kernels/amd/flash_attention.py), multiplying transposed so that P^T
// stays in the score registers: S^T = K Q^T and O^T += V^T P^T on MFMA 32x32x8 (CDNA; 4 waves of 64 lanes,
// 128 queries per block) or WMMA 16x16x16 (RDNA3; 8 waves of 32, the other half of each P^T operand from
// lane xor 16). K is staged in LDS as rows [64][D + 8], V transposed [D][64 + 8]; the next key tile is
// loaded into registers while this one is multiplied; a query's statistics are reduced over the lanes of
// its accumulator column (xor 32 on MFMA 32x32, xor 16 on WMMA).
// RUN: openprim-opt %s -p 'prim-decompose{target=rocdl:gfx942},prim-select{target=rocdl:gfx942},prim-tile{target=rocdl:gfx942}' | filecheck %s --check-prefix=MFMA
// RUN: openprim-opt %s -p 'prim-decompose{target=rocdl:gfx1100},prim-select{target=rocdl:gfx1100},prim-tile{target=rocdl:gfx1100}' | filecheck %s --check-prefix=WMMA

// Causal with a mask broadcast over the batch, Sq = 150 (two query blocks), Sk = 53 (one ragged key tile).
// MFMA-LABEL: func.func @attention_0(
// MFMA-SAME:  prim.solver = "attention_flash_mfma"
// MFMA:       gpu.launch blocks({{.*}}) in (%{{.+}} = %c2, %{{.+}} = %c6, %{{.+}} = %c1{{.*}}) threads({{.*}}) in (%{{.+}} = %c256,
// MFMA-SAME:  workgroup(%[[KS:arg[0-9]+]] : memref<64x72xf16, #gpu.address_space<workgroup>>, %[[VT:arg[0-9]+]] : memref<64x72xf16, #gpu.address_space<workgroup>>)
// MFMA:       vector.load {{.*}} : memref<900x64xf16>, vector<4xf16>
// MFMA:       arith.minui
// MFMA:       vector.load {{.*}} : memref<318x64xf16>, vector<8xf16>
// MFMA:       scf.for
// MFMA:       vector.store {{.*}}, %[[KS]][{{.*}}] {alignment = 16 : i64} : memref<64x72xf16, #gpu.address_space<workgroup>>, vector<8xf16>
// MFMA:       memref.store {{.*}}, %[[VT]][{{.*}}] : memref<64x72xf16, #gpu.address_space<workgroup>>
// MFMA:       gpu.barrier
// MFMA:       vector.load {{.*}} : memref<318x64xf16>, vector<8xf16>
// MFMA:       vector.load %[[KS]][{{.*}}] {alignment = 8 : i64} : memref<64x72xf16, #gpu.address_space<workgroup>>, vector<4xf16>
// MFMA:       amdgpu.mfma 32x32x8 {{.*}} blgp = none : vector<4xf16>, vector<4xf16>, vector<16xf32>
// MFMA:       memref.load %{{.+}}[{{.*}}] : memref<1x3x150x53xf16>
// MFMA:       gpu.shuffle xor %{{.+}}, %c32_i32, %c64_i32 : f32
// MFMA:       math.exp2
// MFMA:       vector.from_elements {{.*}} : vector<4xf16>
// MFMA:       vector.load %[[VT]][{{.*}}] {alignment = 8 : i64} : memref<64x72xf16, #gpu.address_space<workgroup>>, vector<4xf16>
// MFMA-NEXT:  amdgpu.mfma 32x32x8
// MFMA:       gpu.barrier
// MFMA-NEXT:  scf.yield
// MFMA:       gpu.shuffle xor %{{.+}}, %c32_i32, %c64_i32 : f32
// MFMA:       vector.store {{.*}} : memref<900x64xf16>, vector<4xf16>
// WMMA-LABEL: func.func @attention_0(
// WMMA-SAME:  prim.solver = "attention_flash_wmma"
// WMMA:       threads({{.*}}) in (%{{.+}} = %c256,
// WMMA:       amdgpu.wmma 16x16x16 {{.*}} : vector<16xf16>, vector<16xf16>, vector<8xf32>
// WMMA:       gpu.shuffle xor %{{.+}}, %c16_i32, %c32_i32 : f32
// WMMA:       math.exp2
// WMMA:       gpu.shuffle xor %{{.+}}, %c16_i32, %c32_i32 : f32
// WMMA:       arith.select
// WMMA:       vector.from_elements {{.*}} : vector<16xf16>
// WMMA:       vector.load {{.*}} {alignment = 16 : i64} : memref<64x72xf16, #gpu.address_space<workgroup>>, vector<16xf16>
// WMMA-NEXT:  amdgpu.wmma 16x16x16
// WMMA:       vector.store {{.*}} : memref<900x64xf16>, vector<1xf16>
func.func @causal_masked(%q: tensor<2x3x150x64xf16>, %k: tensor<2x3x53x64xf16>, %v: tensor<2x3x53x64xf16>,
                         %m: tensor<1x3x150x53xf16>) -> tensor<2x3x150x64xf16> {
  %o = "prim.attention"(%q, %k, %v, %m) {scale = 0.125 : f64, causal = 1 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 1>}
      : (tensor<2x3x150x64xf16>, tensor<2x3x53x64xf16>, tensor<2x3x53x64xf16>, tensor<1x3x150x53xf16>) -> tensor<2x3x150x64xf16>
  return %o : tensor<2x3x150x64xf16>
}

// bf16, head dim 128: LDS rows of 128 + 8 (K) and 64 + 8 (V^T); no mask, whole key tiles: no masking at all.
// MFMA-LABEL: func.func @attention_1(
// MFMA-SAME:  prim.solver = "attention_flash_mfma"
// MFMA:       workgroup(%{{.+}} : memref<64x136xbf16, #gpu.address_space<workgroup>>, %{{.+}} : memref<128x72xbf16, #gpu.address_space<workgroup>>)
// MFMA:       amdgpu.mfma 32x32x8 {{.*}} : vector<4xbf16>, vector<4xbf16>, vector<16xf32>
// MFMA-NOT:   memref.load
// MFMA-NOT:   arith.cmpi uge
// MFMA:       math.exp2
func.func @plain_bf16(%q: tensor<1x2x100x128xbf16>, %k: tensor<1x2x128x128xbf16>, %v: tensor<1x2x128x128xbf16>)
    -> tensor<1x2x100x128xbf16> {
  %o = "prim.attention"(%q, %k, %v) {scale = 0.088 : f64, causal = 0 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 0>}
      : (tensor<1x2x100x128xbf16>, tensor<1x2x128x128xbf16>, tensor<1x2x128x128xbf16>) -> tensor<1x2x100x128xbf16>
  return %o : tensor<1x2x100x128xbf16>
}

// (sm_80: on sm_90 these shapes take the wgmma kernel, prim-tile/gpu-wgmma.mlir.)
// bf16 convolutions and matmuls with channels in multiples of 8 run on tensor cores too: MLIR 22's
// nvgpu.mma.sync has no bf16 PTX type, so the kernel emits nvvm.mma.sync m16n8k16 with bf16 multiplicands
// directly, its A (4) and B (2) registers being the ldmatrix fragments as i32, f32 accumulators.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_80},prim-tile{target=nvvm:sm_80}' | filecheck %s
// The PTX instruction (and a cubin, when ptxas is installed, through the same pipeline):
// RUN: openprim-opt %s -p 'prim-pipeline{target=nvvm:sm_80}' | filecheck %s --check-prefix=PTX

// CHECK-LABEL: func.func @conv2d_0(
// CHECK-SAME:  prim.solver = "conv_implicit_gemm_mma"
// CHECK:       gpu.launch
// CHECK-SAME:  workgroup(%{{.+}} : memref<64x40xbf16, #gpu.address_space<workgroup>>, %{{.+}} : memref<32x72xbf16, #gpu.address_space<workgroup>>)
// CHECK:       scf.for
// CHECK:       nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = false} : memref<64x40xbf16, #gpu.address_space<workgroup>> -> vector<4x2xbf16>
// CHECK:       nvgpu.ldmatrix {{.*}} {numTiles = 2 : i32, transpose = true} : memref<32x72xbf16, #gpu.address_space<workgroup>> -> vector<2x2xbf16>
// CHECK:       vector.bitcast {{.*}} : vector<2xbf16> to vector<1xi32>
// CHECK:       nvvm.mma.sync A[{{.*}}, {{.*}}, {{.*}}, {{.*}}] B[{{.*}}, {{.*}}] C[{{.*}}, {{.*}}, {{.*}}, {{.*}}]
// CHECK-SAME:  layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>
// CHECK-SAME:  multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>
// CHECK-SAME:  shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK-NOT:   nvgpu.mma.sync
// CHECK:       arith.truncf {{.*}} : f32 to bf16

// CHECK-LABEL: func.func @matmul_1(
// CHECK-SAME:  prim.solver = "gemm_mma"
// CHECK:       nvvm.mma.sync
// CHECK-SAME:  #nvvm.mma_type<bf16>

// PTX:         gpu.binary @device
// PTX-SAME:    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
module {
  func.func @bf16(%x: tensor<2x9x9x16xbf16>) -> tensor<2x9x9x24xbf16> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<24x3x3x16xbf16>} : () -> tensor<24x3x3x16xbf16>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "relu", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x9x16xbf16>, tensor<24x3x3x16xbf16>) -> tensor<2x9x9x24xbf16>
    return %y : tensor<2x9x9x24xbf16>
  }
  func.func @gemm(%a: tensor<40x64xbf16>, %b: tensor<64x32xbf16>) -> tensor<40x32xbf16> {
    %y = "prim.matmul"(%a, %b) {transpose_rhs = false, activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<40x64xbf16>, tensor<64x32xbf16>) -> tensor<40x32xbf16>
    return %y : tensor<40x32xbf16>
  }
}

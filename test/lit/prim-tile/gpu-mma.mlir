// (sm_80: on sm_90 these shapes take the wgmma kernel, prim-tile/gpu-wgmma.mlir.)
// f16 convolutions and matmuls with channels in multiples of 8 run on tensor cores (nvgpu.mma.sync
// m16n8k16, f32 accumulators): fragments come from padded shared-memory tiles through ldmatrix
// (B transposed), and the epilogue is fused.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_80},prim-tile{target=nvvm:sm_80}' | filecheck %s

// CHECK-LABEL: func.func @conv2d_0(
// CHECK-SAME:  prim.solver = "conv_implicit_gemm_mma"
// CHECK:       gpu.launch
// CHECK-SAME:  workgroup(%{{.+}} : memref<64x40xf16, #gpu.address_space<workgroup>>, %{{.+}} : memref<32x72xf16, #gpu.address_space<workgroup>>)
// CHECK:       scf.for
// CHECK:       nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = false} : memref<64x40xf16, #gpu.address_space<workgroup>> -> vector<4x2xf16>
// CHECK:       nvgpu.ldmatrix {{.*}} {numTiles = 2 : i32, transpose = true} : memref<32x72xf16, #gpu.address_space<workgroup>> -> vector<2x2xf16>
// CHECK:       nvgpu.mma.sync({{.*}}) {mmaShape = [16, 8, 16]} : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>
// CHECK:       arith.maximumf
// CHECK:       arith.truncf {{.*}} : f32 to f16

// f32 stays on the SIMT kernel.
// CHECK-LABEL: func.func @conv2d_1(
// CHECK-SAME:  prim.solver = "conv_implicit_gemm_gpu"
// CHECK-NOT:   nvgpu.mma.sync
// CHECK:       return
module {
  func.func @f16(%x: tensor<2x9x9x16xf16>) -> tensor<2x9x9x24xf16> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<24x3x3x16xf16>} : () -> tensor<24x3x3x16xf16>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "relu", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x9x16xf16>, tensor<24x3x3x16xf16>) -> tensor<2x9x9x24xf16>
    return %y : tensor<2x9x9x24xf16>
  }
  func.func @f32(%x: tensor<2x9x9x16xf32>) -> tensor<2x9x9x24xf32> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<24x3x3x16xf32>} : () -> tensor<24x3x3x16xf32>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x9x16xf32>, tensor<24x3x3x16xf32>) -> tensor<2x9x9x24xf32>
    return %y : tensor<2x9x9x24xf32>
  }
}

// f16/bf16 convolutions and matmuls with channels in multiples of 8 run on CDNA matrix cores
// (amdgpu.mfma 32x32x8, f32 accumulators, 64-lane waves): A and B^T tiles staged in LDS (k contiguous),
// each lane's operand one vector load, and the epilogue fused. f32 stays on the SIMT kernel.
// RUN: openprim-opt %s -p 'prim-select{target=rocdl:gfx942},prim-tile{target=rocdl:gfx942}' | filecheck %s

// CHECK-LABEL: func.func @conv2d_0(
// CHECK-SAME:  prim.solver = "conv_implicit_gemm_mfma"
// CHECK:       gpu.launch
// CHECK-SAME:  workgroup(%{{.+}} : memref<64x40xf16, #gpu.address_space<workgroup>>, %{{.+}} : memref<64x40xf16, #gpu.address_space<workgroup>>)
// CHECK:       scf.for
// CHECK:       vector.load {{.*}} : memref<64x40xf16, #gpu.address_space<workgroup>>, vector<4xf16>
// CHECK:       amdgpu.mfma 32x32x8 {{.*}} : vector<4xf16>, vector<4xf16>, vector<16xf32>
// CHECK:       arith.maximumf
// CHECK:       arith.truncf {{.*}} : f32 to f16

// CHECK-LABEL: func.func @matmul_1(
// CHECK-SAME:  prim.solver = "gemm_mfma"
// CHECK:       amdgpu.mfma 32x32x8 {{.*}} : vector<4xbf16>, vector<4xbf16>, vector<16xf32>

// CHECK-LABEL: func.func @conv2d_2(
// CHECK-SAME:  prim.solver = "conv_implicit_gemm_gpu"
// CHECK-NOT:   amdgpu.mfma
// CHECK:       return
module {
  func.func @f16(%x: tensor<2x9x9x16xf16>) -> tensor<2x9x9x24xf16> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<24x3x3x16xf16>} : () -> tensor<24x3x3x16xf16>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "relu", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x9x16xf16>, tensor<24x3x3x16xf16>) -> tensor<2x9x9x24xf16>
    return %y : tensor<2x9x9x24xf16>
  }
  func.func @bf16(%a: tensor<33x40xbf16>, %b: tensor<40x24xbf16>) -> tensor<33x24xbf16> {
    %y = "prim.matmul"(%a, %b) {transpose_rhs = 0, activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<33x40xbf16>, tensor<40x24xbf16>) -> tensor<33x24xbf16>
    return %y : tensor<33x24xbf16>
  }
  func.func @f32(%x: tensor<2x9x9x16xf32>) -> tensor<2x9x9x24xf32> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<24x3x3x16xf32>} : () -> tensor<24x3x3x16xf32>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x9x16xf32>, tensor<24x3x3x16xf32>) -> tensor<2x9x9x24xf32>
    return %y : tensor<2x9x9x24xf32>
  }
}

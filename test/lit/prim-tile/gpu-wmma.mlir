// On RDNA3 (gfx1100, 32-lane waves) the same convolutions and matmuls run on amdgpu.wmma 16x16x16:
// each lane's A and B operands are 16 k-contiguous elements read from LDS in one vector load, the
// accumulators vector<8xf32>; bias and residual are fused. gfx1030 has no matrix cores: SIMT kernel.
// RUN: openprim-opt %s -p 'prim-select{target=rocdl:gfx1100},prim-tile{target=rocdl:gfx1100}' | filecheck %s
// RUN: openprim-opt %s -p 'prim-select{target=rocdl:gfx1030},prim-tile{target=rocdl:gfx1030}' | filecheck %s --check-prefix=SIMT

// CHECK-LABEL: func.func @conv2d_0(
// CHECK-SAME:  prim.solver = "conv_implicit_gemm_wmma"
// CHECK:       gpu.launch
// CHECK-SAME:  = %c128, %{{.+}} = %c1, %{{.+}} = %c1) workgroup(%{{.+}} : memref<64x40xbf16, #gpu.address_space<workgroup>>, %{{.+}} : memref<64x40xbf16, #gpu.address_space<workgroup>>)
// CHECK:       scf.for
// CHECK:       vector.load {{.*}} : memref<64x40xbf16, #gpu.address_space<workgroup>>, vector<16xbf16>
// CHECK:       amdgpu.wmma 16x16x16 {{.*}} : vector<16xbf16>, vector<16xbf16>, vector<8xf32>
// CHECK:       vector.extract {{.*}} : f32 from vector<8xf32>
// CHECK:       memref.load {{.*}} : memref<16xbf16>
// CHECK:       memref.load {{.*}} : memref<162x16xbf16>
// CHECK:       arith.truncf {{.*}} : f32 to bf16

// CHECK-LABEL: func.func @matmul_1(
// CHECK-SAME:  prim.solver = "gemm_wmma"
// CHECK:       amdgpu.wmma 16x16x16 {{.*}} : vector<16xf16>, vector<16xf16>, vector<8xf32>

// SIMT-LABEL:  func.func @conv2d_0(
// SIMT-SAME:   prim.solver = "conv_implicit_gemm_gpu"
// SIMT-NOT:    amdgpu.wmma
// SIMT-LABEL:  func.func @matmul_1(
// SIMT-SAME:   prim.solver = "gemm_gpu"
// SIMT-NOT:    amdgpu.wmma
// SIMT:        return
module {
  func.func @conv(%x: tensor<2x9x9x16xbf16>, %b: tensor<16xbf16>, %r: tensor<2x9x9x16xbf16>) -> tensor<2x9x9x16xbf16> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<16x3x3x16xbf16>} : () -> tensor<16x3x3x16xbf16>
    %y = "prim.conv2d"(%x, %w, %b, %r) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "relu", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (tensor<2x9x9x16xbf16>, tensor<16x3x3x16xbf16>, tensor<16xbf16>, tensor<2x9x9x16xbf16>) -> tensor<2x9x9x16xbf16>
    return %y : tensor<2x9x9x16xbf16>
  }
  func.func @matmul(%a: tensor<33x40xf16>, %b: tensor<40x24xf16>) -> tensor<33x24xf16> {
    %y = "prim.matmul"(%a, %b) {transpose_rhs = 0, activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<33x40xf16>, tensor<40x24xf16>) -> tensor<33x24xf16>
    return %y : tensor<33x24xf16>
  }
}

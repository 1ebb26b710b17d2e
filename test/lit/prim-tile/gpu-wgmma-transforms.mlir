// im2col + GEMM and Winograd on sm_90 warpgroup MMA (find candidates, forced here). im2col: a launch
// fills a [M, R*S*C] scratch buffer 16 bytes per thread, then the TMA/wgmma GEMM reads it as a flat
// [M, K] matrix (2-d tensor maps). Winograd F(2x2): input and filter transform launches into scratch,
// the 16 GEMMs batched on grid z over 3-d tensor maps (f32 out), then the output transform with the
// fused activation.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90 solver=conv_im2col_gemm_wgmma},prim-tile{target=nvvm:sm_90}' | filecheck %s --check-prefix=IM2COL
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90 solver=conv_winograd_f2x3_wgmma},prim-tile{target=nvvm:sm_90}' | filecheck %s --check-prefix=WINO

// IM2COL-LABEL: func.func @conv2d_0(
// IM2COL-SAME:  prim.solver = "conv_im2col_gemm_wgmma"
// IM2COL:       %[[COL:.+]] = memref.alloc() {alignment = 64 : i64} : memref<162x576xf16>
// IM2COL:       gpu.launch
// IM2COL:       vector.store {{.*}}, %[[COL]][{{.*}}] {alignment = 16 : i64} : memref<162x576xf16>, vector<8xf16>
// IM2COL:       memref.cast %[[COL]] : memref<162x576xf16> to memref<*xf16>
// IM2COL:       nvgpu.tma.create.descriptor {{.*}} -> <tensor = memref<{{[0-9]+}}x64xf16, 3>
// IM2COL:       memref.collapse_shape {{.*}} : memref<3x3x64x24xf16> into memref<576x24xf16>
// IM2COL:       gpu.launch {{.*}} dynamic_shared_memory_size
// IM2COL:       nvgpu.warpgroup.mma

// WINO-LABEL:   func.func @conv2d_0(
// WINO-SAME:    prim.solver = "conv_winograd_f2x3_wgmma"
// WINO:         %[[V:.+]] = memref.alloc() {alignment = 64 : i64} : memref<16x50x64xf16>
// WINO:         %[[U:.+]] = memref.alloc() {alignment = 64 : i64} : memref<16x64x24xf16>
// WINO:         %[[M:.+]] = memref.alloc() {alignment = 64 : i64} : memref<16x50x24xf32>
// WINO:         gpu.launch
// WINO:         vector.store {{.*}}, %[[V]][{{.*}}] {alignment = 16 : i64}
// WINO:         gpu.launch
// WINO:         vector.store {{.*}}, %[[U]][{{.*}}] {alignment = 16 : i64}
// WINO:         nvgpu.tma.create.descriptor {{.*}} -> <tensor = memref<1x{{[0-9]+}}x64xf16, 3>
// WINO:         nvgpu.tma.create.descriptor {{.*}} -> <tensor = memref<1x64x64xf16, 3>
// WINO:         gpu.launch blocks({{.*}}) in ({{.*}}, %{{.+}} = %c16{{.*}}) {{.*}} dynamic_shared_memory_size
// WINO:         nvgpu.warpgroup.mma
// WINO:         vector.store {{.*}} : memref<800x24xf32>, vector<8xf32>
// WINO:         gpu.launch
// WINO:         vector.load %{{.+}}[{{.*}}] : memref<16x50x24xf32>, vector<8xf32>
// WINO:         arith.maximumf
// WINO:         vector.store {{.*}} : memref<2x9x9x24xf16>, vector<8xf16>
module {
  func.func @net(%x: tensor<2x9x9x64xf16>) -> tensor<2x9x9x24xf16> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<24x3x3x64xf16>} : () -> tensor<24x3x3x64xf16>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "relu", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x9x64xf16>, tensor<24x3x3x64xf16>) -> tensor<2x9x9x24xf16>
    return %y : tensor<2x9x9x24xf16>
  }
}

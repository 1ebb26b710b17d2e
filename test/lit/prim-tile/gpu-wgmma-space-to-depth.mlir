// Space-to-depth on sm_90 (the heuristic's choice for a 3-channel 7x7/2 stem; no channel padding):
// a launch repacks the input into 2x2 blocks of 4 (3 + 1 zero) channels, 16 per block pixel, with the
// padding rows and columns written as zeros (15 x 14 block pixels); a launch rearranges the filter as 4
// block rows of 64 (4 block columns x 16 channels); the wgmma GEMM reads k tiles through an overlapping
// view whose pixels are 16 elements apart but 64 wide (a filter row of blocks), one 64-channel k tile per
// block row, and stores with the fused ReLU.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s

// CHECK-LABEL: func.func @conv2d_0(
// CHECK-SAME:  prim.solver = "conv_space_to_depth_wgmma"
// CHECK:       %[[S:.+]] = memref.alloc() {alignment = 64 : i64} : memref<2x15x14x16xf16>
// CHECK:       %[[W:.+]] = memref.alloc() {alignment = 64 : i64} : memref<4x1x64x64xf16>
// CHECK:       gpu.launch
// CHECK-COUNT-6: vector.load %arg0[{{.*}}] {alignment = 2 : i64} : memref<2x23x21x3xf16>, vector<1xf16>
// CHECK:       vector.from_elements
// CHECK:       vector.store {{.*}}, %[[S]][{{.*}}] {alignment = 16 : i64} : memref<2x15x14x16xf16>, vector<8xf16>
// CHECK:       gpu.launch
// CHECK:       vector.store {{.*}}, %[[W]][{{.*}}] {alignment = 16 : i64} : memref<4x1x64x64xf16>, vector<8xf16>
// CHECK:       %[[V:.+]] = memref.reinterpret_cast %[[S]] to offset: [0], sizes: [2, 15, 11, 64], strides: [3360, 224, 16, 1]
// CHECK:       %[[VC:.+]] = memref.cast %[[V]] : memref<2x15x11x64xf16, strided<[3360, 224, 16, 1]>> to memref<*xf16>
// CHECK:       nvgpu.tma.create.descriptor %[[VC]] box[{{.*}}] : memref<*xf16> -> <tensor = memref<1x4x16x64xf16, 3>
// CHECK:       memref.cast %[[W]]
// CHECK:       nvgpu.tma.create.descriptor {{.*}} -> <tensor = memref<1x1x64x64xf16, 3>
// CHECK:       gpu.launch {{.*}} dynamic_shared_memory_size
// CHECK:       scf.for {{.*}} = %c0 to %c4 step %c1
// CHECK:       nvgpu.warpgroup.mma
// CHECK:       arith.maximumf
// CHECK:       vector.store {{.*}} : memref<264x64xf16>, vector<8xf16>
module {
  func.func @net(%x: tensor<2x23x21x3xf16>) -> tensor<2x12x11x64xf16> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<64x7x7x3xf16>} : () -> tensor<64x7x7x3xf16>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 2, 2>, padding = array<i64: 3, 3, 3, 3>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "relu", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x23x21x3xf16>, tensor<64x7x7x3xf16>) -> tensor<2x12x11x64xf16>
    return %y : tensor<2x12x11x64xf16>
  }
}

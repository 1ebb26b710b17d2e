// A filter gradient in f16 of an RGB stem on sm_90 (passes/backward_weights_gemms.py): 3 channels are no
// multiple of 8, which TMA's 16-byte strides need, so the input is padded with zero channels to 8, the op on
// it takes sm_90's filter-gradient kernel (conv_bwd_weights_wgmma, which copies the windows into patches
// first: fewer than 32 channels), and its gradient is cut back to the 3 channels. In f32 (no wgmma) the taps
// stay stacked into one GEMM: backward-weights-stacked-taps.mlir.
// RUN: openprim-opt %s -p "prim-select{target=nvvm:sm_90}" | filecheck %s
// RUN: openprim-opt %s -p "prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}" | filecheck %s --check-prefix=TILE

// CHECK:       %[[XP:.+]] = "prim.pad"(%arg0) {pads = array<i64: 0, 0, 0, 0, 0, 0, 0, 5>{{.*}} -> tensor<2x16x16x8xf16>
// CHECK-NEXT:  %[[G:.+]] = "prim.conv2d_backward_weights"(%[[XP]], %arg1) {{.*}}filter_layout = "KRSC"
// CHECK-SAME:  prim.solver = "conv_bwd_weights_wgmma"
// CHECK-SAME:  -> tensor<16x7x7x8xf16>
// CHECK-NEXT:  %[[T:.+]] = "prim.transpose"(%[[G]]) {perm = array<i64: 0, 3, 1, 2>} : (tensor<16x7x7x8xf16>) -> tensor<16x8x7x7xf16>
// CHECK-NEXT:  %[[C:.+]] = "prim.slice"(%[[T]]) {ends = array<i64: 16, 3, 7, 7>{{.*}} -> tensor<16x3x7x7xf16>
// CHECK-NEXT:  return %[[C]]
// CHECK-NOT:   prim.matmul

// The patches [2 x 8 x 8 pixels, 49 taps x 8 channels] (a thread per 16 bytes: 128 x 49 of them), then the GEMM
// on them as a 1x1 filter gradient: 7 column blocks of 64 (392 columns), pixel boxes of 8 x 8.
// TILE-LABEL: func.func @conv2d_backward_weights_1(
// TILE:       memref.alloc() {{.*}} : memref<128x392xf16>
// TILE:       gpu.launch blocks({{.*}}) in (%{{.+}} = %c25,
// TILE:       vector.store {{.*}} : memref<128x392xf16>, vector<8xf16>
// TILE:       nvgpu.tma.create.descriptor %{{.+}} box[%c1, %c8, %c8, %c64] : memref<*xf16>
// TILE:       gpu.launch blocks({{.*}}) in (%{{.+}} = %c7, %{{.+}} = %c1, %{{.+}} = %c1)
// TILE:       nvgpu.warpgroup.mma {{.*}} {transposeA, transposeB}
func.func @main(%x: tensor<2x16x16x3xf16>, %dy: tensor<2x8x8x16xf16>) -> tensor<16x3x7x7xf16> {
  %0 = "prim.conv2d_backward_weights"(%x, %dy) {strides = array<i64: 2, 2>, padding = array<i64: 3, 3, 3, 3>, dilations = array<i64: 1, 1>, groups = 1 : i64, layout = "NHWC", filter_layout = "KCRS", filter_size = array<i64: 7, 7>} : (tensor<2x16x16x3xf16>, tensor<2x8x8x16xf16>) -> tensor<16x3x7x7xf16>
  return %0 : tensor<16x3x7x7xf16>
}

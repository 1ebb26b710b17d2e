// A filter gradient in f16 NHWC on sm_90 keeps its op and takes conv_bwd_weights_wgmma, whose gradient is KRSC
// (a transpose back to the op's KCRS after it), and becomes the implicit-GEMM kernel of
// kernels/nvidia/wgmma_backward_weights.py: a k tile is 2 images' 7 x 8 box of output pixels (112: 98 of them
// on the 7 x 7 map), so the tensor maps are boxes [2, 7, 8, 64] of x (read every 2nd row and column: stride 2)
// and of dy; the grid is 9 column blocks (3 x 3 taps of 64 channels) x 2 row blocks (128 filters, 64 a
// block) x 4 runs of the 8 k tiles; a k tile is seven warpgroup MMAs of 16 pixels, both operands transposed;
// the runs' partial sums [4 x 128, 576] are added by a second launch.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s
// The PTX, through the whole pipeline: m64n64k16 with imm-trans-a = imm-trans-b = 1, a k tile's seven issued
// as one group (nvvm backend's chain_wgmma: one fence, one commit, no wait between them).
// RUN: openprim-opt %s -p 'prim-pipeline{target=nvvm:sm_90}' | filecheck %s --check-prefix=PTX

// CHECK:       call @conv2d_backward_weights_0(%arg0, %arg1) {prim.params = {splits = 4 : i64, tile = 6 : i64}
// CHECK-SAME:  prim.solver = "conv_bwd_weights_wgmma"} : (tensor<16x14x14x64xf16>, tensor<16x7x7x128xf16>) -> tensor<128x3x3x64xf16>
// CHECK-NEXT:  call @transpose_1
// CHECK-LABEL: func.func @conv2d_backward_weights_0(
// CHECK:       nvgpu.tma.create.descriptor %{{.+}} box[%c2, %c7, %c8, %c64] {openprim.element_strides = array<i64: 1, 2, 2, 1>}
// CHECK:       nvgpu.tma.create.descriptor %{{.+}} box[%c2, %c7, %c8, %c64] : memref<*xf16>
// CHECK:       memref.alloc() {{.*}} : memref<512x576xf32>
// CHECK:       gpu.launch blocks({{.*}}) in (%{{.+}} = %c9, %{{.+}} = %c2, %{{.+}} = %c4) threads({{.*}}) in (%{{.+}} = %c128,
// CHECK:       scf.for
// CHECK:       nvgpu.mbarrier.try_wait.parity
// CHECK-COUNT-7: nvgpu.warpgroup.mma %{{.+}}, %{{.+}}, %{{.+}} {transposeA, transposeB} : <tensor = memref<64x16xf16, {{.*}}>>, <tensor = memref<16x64xf16,
// CHECK-NOT:   nvgpu.warpgroup.mma %
// CHECK:       nvgpu.warpgroup.mma.store
// CHECK:       vector.store %{{.+}}, %alloc[{{.*}}] {{.*}} : memref<512x576xf32>, vector<8xf32>
// CHECK:       gpu.launch blocks({{.*}}) in (%{{.+}} = %c36,
// CHECK-COUNT-2: vector.load %alloc
// CHECK:       arith.truncf {{.*}} : vector<8xf32> to vector<8xf16>

// (nothing with a 'w' between: no other wgmma instruction)
// PTX:         wgmma.fence.sync.aligned;{{[^w]+}}wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{[^w]+}}, p, 1,  1, 1,  1;{{([^w]+wgmma.mma_async){6}[^w]+}}wgmma.commit_group.sync.aligned;
func.func @main(%x: tensor<16x14x14x64xf16>, %dy: tensor<16x7x7x128xf16>) -> tensor<128x64x3x3xf16> {
  %0 = "prim.conv2d_backward_weights"(%x, %dy) {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, layout = "NHWC", filter_layout = "KCRS", filter_size = array<i64: 3, 3>} : (tensor<16x14x14x64xf16>, tensor<16x7x7x128xf16>) -> tensor<128x64x3x3xf16>
  return %0 : tensor<128x64x3x3xf16>
}

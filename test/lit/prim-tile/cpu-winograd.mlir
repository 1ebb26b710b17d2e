// The CPU Winograd F(4x4, 3x3) kernel (kernels/cpu/winograd.py): no linalg, one function with the scratch
// V [36, chunk tiles, C] allocated on the heap (here one chunk of 12 tiles: the 9 tiles rounded up to whole
// register tiles of 6); the input transform threaded over the tiles (the 3 past the last one skipped), its 36
// input vectors of 8 channels selected against zeros outside the image; then the GEMMs threaded over
// (16 output channels, 6 tiles), each position's 6 x 16 register tile (12 vector<8xf32> accumulators)
// reduced over C in a loop unrolled 4 times, into a stack buffer M [36, 6, 16]; the output transform
// on vector<16xf32> with the fused bias and ReLU. 1x9x10x8 -> 16 channels: 3 x 3 tiles of 4 x 4 (the last
// row and column of tiles partly outside the 9 x 10 output: their stores are guarded).
// RUN: openprim-opt %s -p 'prim-select{target=cpu:x86-64-v3 solver=conv_winograd_f4x3_packed},prim-tile{target=cpu:x86-64-v3}' | filecheck %s

// CHECK:       module @kernels
// CHECK-LABEL: func.func @conv2d_0(%arg0: memref<1x9x10x8xf32>, %arg1: memref<36x1x8x16xf32>, %arg2: memref<16xf32>, %arg3: memref<1x9x10x16xf32>)
// CHECK-NOT:   linalg.
// CHECK:       memref.alloc() {alignment = 64 : i64} : memref<3456xf32>
// CHECK:       scf.forall (%{{.*}}) in (12)
// CHECK:       arith.cmpi ult, %{{.*}}, %c9 : index
// CHECK-COUNT-36: arith.select %{{.*}}, %{{.*}}, %{{.*}} : vector<8xf32>
// CHECK:       scf.forall (%{{.*}}) in (2)
// CHECK:       memref.alloca() {alignment = 64 : i64} : memref<3456xf32>
// The whole block (12 accumulators; C = 8 is 2 steps of 4 channels), then the 9 % 6 = 3 tail tiles (6).
// CHECK:       %{{.*}}:12 = scf.for
// CHECK-COUNT-48: vector.fma %{{.*}} : vector<8xf32>
// CHECK:       %{{.*}}:6 = scf.for
// CHECK-COUNT-24: vector.fma %{{.*}} : vector<8xf32>
// CHECK:       arith.maximumf %{{.*}} : vector<16xf32>
// CHECK:       scf.if
// CHECK:       vector.store %{{.*}} : memref<1440xf32>, vector<16xf32>
func.func @winograd(%x: tensor<1x9x10x8xf32>) -> tensor<1x9x10x16xf32> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<16x3x3x8xf32>} : () -> tensor<16x3x3x8xf32>
  %b = "prim.constant"() {value = dense<0.25> : tensor<16xf32>} : () -> tensor<16xf32>
  %y = "prim.conv2d"(%x, %w, %b) {activation = "relu", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 1, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x9x10x8xf32>, tensor<16x3x3x8xf32>, tensor<16xf32>) -> tensor<1x9x10x16xf32>
  return %y : tensor<1x9x10x16xf32>
}

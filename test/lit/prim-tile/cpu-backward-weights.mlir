// The filter gradient on the CPU (kernels/cpu/backward_weights.py, conv_bwd_weights_gemm): one vector-dialect
// kernel, no linalg. The threads share the K tiles (scf.forall over 2: 48 filters are 3 tiles of 16, 1 + 2);
// per block of filters the gradient is zeroed, then every chunk of output rows (the 2 x 16 rows (n, oh) in
// chunks that fit L2) passes through each tap's register tiles: 6 channels x 16 filters in 6 x 2 vectors
// vector<8xf32> (AVX2), loaded from the gradient, carried through the rows and columns, stored back; 10
// channels are a 6-channel tile then a 4-channel one. Stride 2 and padding 1: for tap r = 0 the first row
// of every image reads above it, so the row loop tests oh >= 1 (scf.if); the columns' bounds per tap s are
// constants (tap s = 0: ow from 1).
// RUN: openprim-opt %s -p 'prim-select{target=cpu:x86-64-v3},prim-tile{target=cpu:x86-64-v3}' | filecheck %s

// CHECK-LABEL: func.func @conv2d_backward_weights_0(%arg0: memref<2x31x31x10xf32>, %arg1: memref<2x16x16x48xf32>, %arg2: memref<3x3x10x48xf32>)
// CHECK-SAME:    prim.solver = "conv_bwd_weights_gemm"
// CHECK-NOT:   linalg.
// CHECK:       scf.forall (%{{.+}}) in (2) {
// CHECK:         vector.store %{{.+}} : memref<4320xf32>, vector<8xf32>
// CHECK:         scf.for
// CHECK:           vector.load {{.*}} : memref<4320xf32>, vector<8xf32>
// CHECK-COUNT-11:  vector.load {{.*}} : memref<4320xf32>, vector<8xf32>
// CHECK:           scf.for {{.*}} -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
// CHECK:             arith.cmpi uge
// CHECK:             scf.if
// CHECK:               scf.for %{{.+}} = %c1 to %c16
// CHECK-COUNT-2:         vector.load {{.*}} : memref<24576xf32>, vector<8xf32>
// CHECK:                 memref.load {{.*}} : memref<19220xf32>
// CHECK-NEXT:            vector.broadcast
// CHECK-NEXT:            vector.fma {{.*}} : vector<8xf32>
// CHECK:           vector.store {{.*}} : memref<4320xf32>, vector<8xf32>
// CHECK-NOT:   linalg.
// CHECK:       return
func.func @main(%x: tensor<2x31x31x10xf32>, %dy: tensor<2x16x16x48xf32>) -> tensor<3x3x10x48xf32> {
  %0 = "prim.conv2d_backward_weights"(%x, %dy) {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, layout = "NHWC", filter_layout = "RSCK", filter_size = array<i64: 3, 3>} : (tensor<2x31x31x10xf32>, tensor<2x16x16x48xf32>) -> tensor<3x3x10x48xf32>
  return %0 : tensor<3x3x10x48xf32>
}

// max_pool2d_backward on the CPU, NHWC f32 (kernels/cpu/max_pool_backward.py): images split between the
// threads; each image's dx zeroed, then every window scatters its dy to its first maximum, lanes along the
// channels (37: two vectors of 16 in a loop and a tail vector of 5): the taps' "inside the image" flags and
// clamped addresses per pixel, a strict ogt scan (the first maximum wins), a masked add per tap.
// RUN: openprim-opt %s -p prim-select,prim-tile | filecheck %s

// CHECK-LABEL: func.func @max_pool2d_backward_0(%arg0: memref<4x20x18x37xf32>, %arg1: memref<4x40x36x37xf32>, %arg2: memref<4x40x36x37xf32>)
// CHECK:         scf.forall (%{{.*}}) in (4) {
// CHECK:           vector.store %{{.*}} : memref<213120xf32>, vector<16xf32>
// CHECK:           vector.store %{{.*}} : memref<213120xf32>, vector<5xf32>
// CHECK:           arith.cmpi slt
// CHECK:           arith.minsi
// CHECK:           arith.cmpf ogt, {{.*}} : vector<16xf32>
// CHECK:           arith.cmpi eq, {{.*}} : vector<16xi32>
// CHECK:           arith.addf {{.*}} : vector<16xf32>
// CHECK:           arith.cmpf ogt, {{.*}} : vector<5xf32>
func.func @main(%dy: tensor<4x20x18x37xf32>, %x: tensor<4x40x36x37xf32>) -> tensor<4x40x36x37xf32> {
  %0 = "prim.max_pool2d_backward"(%dy, %x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = 0 : i64, layout = "NHWC"} : (tensor<4x20x18x37xf32>, tensor<4x40x36x37xf32>) -> tensor<4x40x36x37xf32>
  return %0 : tensor<4x40x36x37xf32>
}

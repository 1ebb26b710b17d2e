// max_pool2d, avg_pool2d and global_avg_pool on the CPU (NHWC): prim-tile takes the kernels of
// kernels/cpu/pool.py (no linalg, no padded copy). Lanes along the channels: blocks of 4 x vector<16xf32>
// accumulators carried through the loop over the window rows inside the image (bounds from oh, no checks),
// the taps of a row unrolled; the C % 16 tail is a vector of its exact width. Border columns are emitted
// with their taps inside the image, then a loop over the interior columns. Output rows are split between
// the threads (scf.forall) from SERIAL_ELEMENTS (262144) elements moved (input + output); f16/bf16 widened on load, rounded
// once at the store.
// RUN: openprim-opt %s -p prim-select,prim-tile | filecheck %s

// CHECK:       module @kernels
// The stem pool of ResNet at 58x58x64, 3x3 s2 p1: threads over the 29 rows; the row's window rows [r_lo, r_hi)
// clipped to the image; column 0 (its left tap in the padding) first, then the interior columns 1..28.
// CHECK-LABEL: func.func @max_pool2d_0(%arg0: memref<1x58x58x64xf32>, %arg1: memref<1x29x29x64xf32>)
// CHECK-NOT:   {{linalg\.|tensor\.pad}}
// CHECK:       %[[NEG_INF:.+]] = arith.constant dense<0xFF800000> : vector<16xf32>
// CHECK:       scf.forall (%{{.+}}) in (29)
// CHECK:       %[[LO:.+]] = arith.maxsi
// CHECK:       %[[HI:.+]] = arith.minsi
// CHECK:       scf.for %{{.+}} = %[[LO]] to %[[HI]] step %{{.+}} iter_args(%{{.+}} = %[[NEG_INF]], %{{.+}} = %[[NEG_INF]], %{{.+}} = %[[NEG_INF]], %{{.+}} = %[[NEG_INF]]) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK:       vector.load {{.*}} : memref<215296xf32>, vector<16xf32>
// CHECK:       arith.maximumf {{.*}} : vector<16xf32>
// CHECK:       vector.store {{.*}} : memref<53824xf32>, vector<16xf32>
// CHECK:       scf.for %{{.+}} = %c1 to %c29
// CHECK:       scf.for %{{.+}} = %[[LO]] to %[[HI]]
// CHECK-COUNT-12: arith.maximumf {{.*}} : vector<16xf32>
// CHECK:       scf.yield
// CHECK-NOT:   linalg.
// CHECK:       return

// 37 channels (2 vectors + a tail of 5), asymmetric padding, ceil_mode; small: one thread.
// CHECK-LABEL: func.func @max_pool2d_1(%arg0: memref<1x15x14x37xf32>, %arg1: memref<1x8x7x37xf32>)
// CHECK-NOT:   scf.forall
// CHECK:       -> (vector<16xf32>, vector<16xf32>, vector<5xf32>)
// CHECK:       vector.load {{.*}} : memref<7770xf32>, vector<5xf32>
// CHECK:       vector.store {{.*}} : memref<2072xf32>, vector<5xf32>
// CHECK:       return

// DenseNet's first transition pool in bf16 (56x56, 2x2 s2, 128 channels: a loop over two blocks of 64); the divisor's
// row factor per row, times 1/divisor.
// CHECK-LABEL: func.func @avg_pool2d_2(%arg0: memref<1x56x56x128xbf16>, %arg1: memref<1x28x28x128xbf16>)
// CHECK:       scf.forall (%{{.+}}) in (28)
// CHECK:       arith.sitofp {{.*}} : i32 to f32
// CHECK:       arith.divf {{.*}} : f32
// CHECK:       scf.for %{{.+}} = %c0 to %c2
// CHECK:       arith.extf {{.*}} : vector<16xbf16> to vector<16xf32>
// CHECK:       arith.addf {{.*}} : vector<16xf32>
// CHECK:       arith.mulf {{.*}} : vector<16xf32>
// CHECK:       arith.truncf {{.*}} : vector<16xf32> to vector<16xbf16>
// CHECK:       vector.store {{.*}} : memref<100352xbf16>, vector<16xbf16>
// CHECK:       return

// global_avg_pool f16, 2 x 12x12 x 1000: threads over the 2 x 15 (image, 64-channel block)s, then the
// 40 channels left (2 vectors + 8) of each image.
// CHECK-LABEL: func.func @global_avg_pool_3(%arg0: memref<2x12x12x1000xf16>, %arg1: memref<2x1x1x1000xf16>)
// CHECK:       scf.forall (%{{.+}}) in (30)
// CHECK:       scf.for %{{.+}} = %c0 to %c144 {{.*}} -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK:       arith.extf {{.*}} : vector<16xf16> to vector<16xf32>
// CHECK:       vector.store {{.*}} : memref<2000xf16>, vector<16xf16>
// CHECK:       scf.for %{{.+}} = %c0 to %c2
// CHECK:       scf.for %{{.+}} = %c0 to %c144 {{.*}} -> (vector<16xf32>, vector<16xf32>, vector<8xf32>)
// CHECK:       vector.store {{.*}} : memref<2000xf16>, vector<8xf16>
// CHECK-NOT:   linalg.
// CHECK:       return
func.func @main(%x: tensor<1x58x58x64xf32>, %o: tensor<1x15x14x37xf32>, %d: tensor<1x56x56x128xbf16>, %g: tensor<2x12x12x1000xf16>) -> (tensor<1x29x29x64xf32>, tensor<1x8x7x37xf32>, tensor<1x28x28x128xbf16>, tensor<2x1x1x1000xf16>) {
  %0 = "prim.max_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = 0, layout = "NHWC"} : (tensor<1x58x58x64xf32>) -> tensor<1x29x29x64xf32>
  %1 = "prim.max_pool2d"(%o) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 0, 0, 1>, dilations = array<i64: 1, 1>, ceil_mode = 1, layout = "NHWC"} : (tensor<1x15x14x37xf32>) -> tensor<1x8x7x37xf32>
  %2 = "prim.avg_pool2d"(%d) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, ceil_mode = 0, count_include_pad = 0, layout = "NHWC"} : (tensor<1x56x56x128xbf16>) -> tensor<1x28x28x128xbf16>
  %3 = "prim.global_avg_pool"(%g) {layout = "NHWC"} : (tensor<2x12x12x1000xf16>) -> tensor<2x1x1x1000xf16>
  return %0, %1, %2, %3 : tensor<1x29x29x64xf32>, tensor<1x8x7x37xf32>, tensor<1x28x28x128xbf16>, tensor<2x1x1x1000xf16>
}

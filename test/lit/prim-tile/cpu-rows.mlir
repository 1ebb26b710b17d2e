// softmax, log_softmax and layer_norm on the CPU: prim-tile takes the row kernel of kernels/cpu/rows.py
// (no linalg). Rows are swept in vector<16xf32>: the full vectors in a loop carrying the accumulator, the
// L % 16 tail as one masked load whose outside lanes are set to the reduction's neutral value; exp is a
// polynomial in vector FMAs with 2^n built in the exponent bits (no libm call). Rows are split between the
// threads (scf.forall) from SERIAL_ELEMENTS (32768) elements; smaller outputs run on one thread.
// RUN: openprim-opt %s -p prim-select,prim-tile | filecheck %s

// CHECK:       module @kernels
// 64 rows of 600 = 37 vectors + a tail of 8: threaded; max, then the sum of exp, its sweep storing each exp
// in the output (f32), then the output scaled in place: one exp per value.
// CHECK-LABEL: func.func @softmax_0(%arg0: memref<64x600xf32>, %arg1: memref<64x600xf32>)
// CHECK-NOT:   linalg.
// CHECK:       vector.constant_mask [8] : vector<16xi1>
// CHECK:       scf.forall (%{{.+}}) in (64)
// CHECK:       scf.for {{.*}} to %c37 {{.*}} -> (vector<16xf32>)
// CHECK:       arith.maximumf {{.*}} : vector<16xf32>
// CHECK:       vector.maskedload [[X:%.+]][{{.*}} : memref<38400xf32>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK:       vector.reduction <maximumf>, {{.*}} : vector<16xf32> into f32
// CHECK:       math.floor {{.*}} : vector<16xf32>
// CHECK:       arith.bitcast {{.*}} : vector<16xi32> to vector<16xf32>
// CHECK:       vector.store {{.*}}, [[Y:%.+]][{{.*}} : memref<38400xf32>, vector<16xf32>
// CHECK:       vector.maskedstore [[Y]]
// CHECK:       vector.reduction <add>, {{.*}} : vector<16xf32> into f32
// CHECK-NOT:   math.floor
// CHECK:       vector.load [[Y]]
// CHECK:       arith.mulf
// CHECK:       vector.store {{.*}}, [[Y]]
// CHECK:       vector.maskedstore [[Y]]
// CHECK-NOT:   {{linalg\.|math\.exp|math\.floor}}
// CHECK:       return

// log_softmax in f16, 3 rows of 16: one thread (no forall), no tail; widened on load, rounded at the store.
// CHECK-LABEL: func.func @log_softmax_1(%arg0: memref<3x16xf16>, %arg1: memref<3x16xf16>)
// CHECK-NOT:   scf.forall
// CHECK:       arith.extf {{.*}} : vector<16xf16> to vector<16xf32>
// CHECK:       math.log {{.*}} : f32
// CHECK:       arith.truncf {{.*}} : vector<16xf32> to vector<16xf16>
// CHECK-NOT:   vector.maskedstore
// CHECK:       return

// layer_norm with scale and shift over 2 x 5 rows of 37: mean, then variance, rsqrt, the affine params
// loaded as vectors (their tail masked too).
// CHECK-LABEL: func.func @layer_norm_2(%arg0: memref<2x5x37xf32>, %arg1: memref<37xf32>, %arg2: memref<37xf32>, %arg3: memref<2x5x37xf32>)
// CHECK:       vector.constant_mask [5] : vector<16xi1>
// CHECK:       scf.for
// CHECK:       vector.reduction <add>
// CHECK:       vector.reduction <add>
// CHECK:       math.rsqrt {{.*}} : f32
// CHECK:       vector.maskedload %arg1[{{.*}}], {{.*}} : memref<37xf32>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK:       vector.maskedload %arg2[{{.*}}], {{.*}} : memref<37xf32>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK:       vector.maskedstore
// CHECK-NOT:   linalg.
// CHECK:       return
func.func @main(%x: tensor<64x600xf32>, %h: tensor<3x16xf16>, %n: tensor<2x5x37xf32>, %s: tensor<37xf32>, %t: tensor<37xf32>) -> (tensor<64x600xf32>, tensor<3x16xf16>, tensor<2x5x37xf32>) {
  %0 = "prim.softmax"(%x) {axis = -1 : i64} : (tensor<64x600xf32>) -> tensor<64x600xf32>
  %1 = "prim.log_softmax"(%h) {axis = 1 : i64} : (tensor<3x16xf16>) -> tensor<3x16xf16>
  %2 = "prim.layer_norm"(%n, %s, %t) {epsilon = 1.0e-05 : f32, normalized_ndim = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<2x5x37xf32>, tensor<37xf32>, tensor<37xf32>) -> tensor<2x5x37xf32>
  return %0, %1, %2 : tensor<64x600xf32>, tensor<3x16xf16>, tensor<2x5x37xf32>
}

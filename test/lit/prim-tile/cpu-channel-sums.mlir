// Per-channel sums of NHWC maps on the CPU (kernels/cpu/channel_sums.py): the rows are swept in memory order
// in chunks split between the threads (scf.forall over 228 chunks of 442 rows, the last one short: min),
// channel vectors of 16 (37 channels: two full vectors and a masked tail), partial sums per chunk in an f32
// scratch, then combined over the chunks. The statistics sweep twice (the mean, then the centered squares);
// the backward once with two accumulators per vector, then writes dx per element; the backward's sums alone
// (the scale's and shift's gradients) are that sweep and the totals stored as [2, C]; a reduce over all
// dims but the last is one sweep. Given those sums as its last operand, the backward reads them (the
// coefficients per channel vector from rows 0 and 1) and only writes dx: no sweep of sums.
// RUN: openprim-opt %s -p prim-select,prim-tile | filecheck %s

// CHECK-LABEL: func.func @batch_norm_statistics_0(%arg0: memref<8x112x112x37xf32>, %arg1: memref<2x37xf32>)
// CHECK:         vector.constant_mask [5] : vector<16xi1>
// CHECK:         memref.alloc() {alignment = 64 : i64} : memref<8436xf32>
// CHECK:         scf.forall (%{{.*}}) in (228) {
// CHECK:           arith.minui
// CHECK:           scf.for {{.*}} iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK:             vector.load {{.*}} : memref<3713024xf32>, vector<16xf32>
// CHECK:             vector.maskedload
// CHECK:         scf.forall (%{{.*}}) in (228) {
// CHECK:           arith.subf
// CHECK:           arith.mulf
// CHECK:         math.rsqrt {{.*}} : vector<16xf32>
// CHECK-LABEL: func.func @batch_norm_backward_
// CHECK:         scf.forall (%{{.*}}) in (228) {
// CHECK:           scf.for {{.*}} -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK:         scf.forall (%{{.*}}) in (228) {
// CHECK:           vector.store
// CHECK-LABEL: func.func @batch_norm_backward_sums_{{.*}}(%arg0: memref<8x112x112x37xf32>, %arg1: memref<8x112x112x37xf32>, %arg2: memref<37xf32>, %arg3: memref<2x37xf32>)
// CHECK:         scf.forall (%{{.*}}) in (228) {
// CHECK:           scf.for {{.*}} -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK-NOT:     scf.forall
// CHECK:         vector.maskedstore %{{.*}}[%c32], {{.*}} : memref<74xf32>
// CHECK:         vector.maskedstore %{{.*}}[%c69], {{.*}} : memref<74xf32>
// CHECK-LABEL: func.func @reduce_
// CHECK:         scf.forall (%{{.*}}) in (228) {
// CHECK:           arith.maximumf {{.*}} : vector<16xf32>
// CHECK-LABEL: func.func @batch_norm_backward_{{.*}}(%arg0: memref<8x112x112x37xf32>, %arg1: memref<8x112x112x37xf32>, %arg2: memref<37xf32>, %arg3: memref<37xf32>, %arg4: memref<37xf32>, %arg5: memref<2x37xf32>, %arg6: memref<8x112x112x37xf32>)
// CHECK-NOT:     -> (vector<16xf32>, vector<16xf32>
// CHECK:         vector.maskedload %{{.*}}[%c69]
// CHECK:         scf.forall (%{{.*}}) in (228) {
// CHECK:           vector.store
// CHECK-NOT:     scf.forall
func.func @main(%x: tensor<8x112x112x37xf32>, %dy: tensor<8x112x112x37xf32>, %s: tensor<37xf32>, %mean: tensor<37xf32>, %inv: tensor<37xf32>) -> (tensor<2x37xf32>, tensor<8x112x112x37xf32>, tensor<2x37xf32>, tensor<37xf32>, tensor<8x112x112x37xf32>) {
  %st = "prim.batch_norm_statistics"(%x) {epsilon = 1.0e-05 : f64, layout = "NHWC"} : (tensor<8x112x112x37xf32>) -> tensor<2x37xf32>
  %dx = "prim.batch_norm_backward"(%dy, %x, %s, %mean, %inv) {layout = "NHWC"} : (tensor<8x112x112x37xf32>, tensor<8x112x112x37xf32>, tensor<37xf32>, tensor<37xf32>, tensor<37xf32>) -> tensor<8x112x112x37xf32>
  %sums = "prim.batch_norm_backward_sums"(%dy, %x, %mean) {layout = "NHWC"} : (tensor<8x112x112x37xf32>, tensor<8x112x112x37xf32>, tensor<37xf32>) -> tensor<2x37xf32>
  %mx = "prim.reduce"(%dy) {kind = "max", axes = array<i64: 0, 1, 2>, keepdims = 0 : i64} : (tensor<8x112x112x37xf32>) -> tensor<37xf32>
  %given = "prim.batch_norm_backward"(%dy, %x, %s, %mean, %inv, %sums) {layout = "NHWC"} : (tensor<8x112x112x37xf32>, tensor<8x112x112x37xf32>, tensor<37xf32>, tensor<37xf32>, tensor<37xf32>, tensor<2x37xf32>) -> tensor<8x112x112x37xf32>
  return %st, %dx, %sums, %mx, %given : tensor<2x37xf32>, tensor<8x112x112x37xf32>, tensor<2x37xf32>, tensor<37xf32>, tensor<8x112x112x37xf32>
}

// A kernel without a solver schedule still uses the threads: its final op is split on its first
// evenly divisible parallel dim by an scf.forall (producers fused in), then vectorized. Below
// SERIAL_POINTS (kernels/schedules.py: 65536 points of the final op) it runs on one thread: no forall.
// (softmax has its own CPU row kernel, kernels/cpu/rows.py: an scf.forall over its 6 rows.)
// RUN: openprim-opt %s -p prim-fuse,prim-select,prim-tile | filecheck %s

// CHECK:       module @kernels
// CHECK:       func.func @fused_elementwise_0(
// CHECK:         scf.forall (%{{.*}}) = (0) to (8) step (4)
// CHECK:           vector.transfer_read
// CHECK:           math.tanh {{.*}} : vector<64xf32>
// CHECK:       func.func @softmax_1(
// CHECK:         scf.forall (%{{.*}}) in (6)
// CHECK:       func.func @fused_elementwise_2(
// CHECK-NOT:     scf.forall
// CHECK:           math.tanh {{.*}} : vector<16xf32>
// CHECK:       return
func.func @main(%x: tensor<8x8192xf32>, %y: tensor<6x12288xf32>, %s: tensor<8x16xf32>) -> (tensor<8x8192xf32>, tensor<6x12288xf32>, tensor<8x16xf32>) {
  %0 = "prim.tanh"(%x) : (tensor<8x8192xf32>) -> tensor<8x8192xf32>
  %1 = "prim.mul"(%0, %x) : (tensor<8x8192xf32>, tensor<8x8192xf32>) -> tensor<8x8192xf32>
  %2 = "prim.softmax"(%y) {axis = -1 : i64} : (tensor<6x12288xf32>) -> tensor<6x12288xf32>
  %3 = "prim.tanh"(%s) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %4 = "prim.mul"(%3, %s) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %1, %2, %4 : tensor<8x8192xf32>, tensor<6x12288xf32>, tensor<8x16xf32>
}

// A batch norm's input gradient given the sums its scale and shift gradients already made
// (kernels/gpu/channel_sums.py backward_kernel, the `sums` operand that Graph.batch_norm_backward passes):
// no partial sums, no coefficient scratch, one elementwise launch of 6272 x 8 threads (8 channels each),
// each computing k1 = scale inv_std, k2 = k1 sum(dy) / M, k3 = k1 inv_std^2 sum(dy (x - mean)) / M from
// rows 0 and 1 of the sums, then dx = k1 dy - k2 - k3 (x - mean). Without the operand the kernel sums
// first (two more launches over dy and x).
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s

// CHECK-LABEL: func.func @batch_norm_backward_0(%arg0: memref<8x28x28x64xf16>, %arg1: memref<8x28x28x64xf16>, %arg2: memref<64xf16>, %arg3: memref<64xf16>, %arg4: memref<64xf16>, %arg5: memref<2x64xf16>, %arg6: memref<8x28x28x64xf16>)
// CHECK-NOT:     memref.alloc
// CHECK:         gpu.launch blocks({{.*}}) in ({{.*}} = %c196, {{.*}} = %c1, {{.*}} = %c1) threads({{.*}}) in ({{.*}} = %c256, {{.*}} = %c1, {{.*}} = %c1)
// CHECK:           vector.load %arg5[%c0, %{{.*}}] {{.*}} : memref<2x64xf16>, vector<8xf16>
// CHECK:           vector.load %arg5[%c1, %{{.*}}] {{.*}} : memref<2x64xf16>, vector<8xf16>
// CHECK:           vector.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] {{.*}} : memref<6272x64xf16{{.*}}>, vector<8xf16>
// CHECK-NOT:     gpu.launch

// CHECK-LABEL: func.func @batch_norm_backward_1(
// CHECK:         memref.alloc() {alignment = 64 : i64} : memref<3x64xf32>
// CHECK-COUNT-3: gpu.launch
func.func @main(%x: tensor<8x28x28x64xf16>, %dy: tensor<8x28x28x64xf16>, %s: tensor<64xf16>, %mean: tensor<64xf16>, %inv: tensor<64xf16>, %sums: tensor<2x64xf16>) -> (tensor<8x28x28x64xf16>, tensor<8x28x28x64xf16>) {
  %dx = "prim.batch_norm_backward"(%dy, %x, %s, %mean, %inv, %sums) {layout = "NHWC"} : (tensor<8x28x28x64xf16>, tensor<8x28x28x64xf16>, tensor<64xf16>, tensor<64xf16>, tensor<64xf16>, tensor<2x64xf16>) -> tensor<8x28x28x64xf16>
  %alone = "prim.batch_norm_backward"(%dy, %x, %s, %mean, %inv) {layout = "NHWC"} : (tensor<8x28x28x64xf16>, tensor<8x28x28x64xf16>, tensor<64xf16>, tensor<64xf16>, tensor<64xf16>) -> tensor<8x28x28x64xf16>
  return %dx, %alone : tensor<8x28x28x64xf16>, tensor<8x28x28x64xf16>
}

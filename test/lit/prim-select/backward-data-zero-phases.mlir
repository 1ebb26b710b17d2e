// A strided 1x1 backward-data convolution (stride 2: only phase (0, 0) has a tap) becomes one forward 1x1
// convolution, and the three phases of zeros become padding of their neighbours (passes/backward_data_phases.py
// _concat): the channels of row phase 0 padded after (phase (0, 1)), then that row padded after by a whole
// zero row (phase 1): two pads, no zero tensor, no concat.
// RUN: openprim-opt %s -p "prim-select{target=nvvm:sm_90}" | filecheck %s

// CHECK-NOT:   prim.broadcast
// CHECK-NOT:   prim.concat
// CHECK:       %[[Y:.+]] = "prim.conv2d"(%arg0, %{{.+}}) {{.*}} -> tensor<2x4x4x8xf32>
// CHECK-NEXT:  %[[C:.+]] = "prim.pad"(%[[Y]]) {pads = array<i64: 0, 0, 0, 0, 0, 0, 0, 8>{{.*}} -> tensor<2x4x4x16xf32>
// CHECK-NEXT:  %[[R:.+]] = "prim.reshape"(%[[C]]) : (tensor<2x4x4x16xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT:  %[[W:.+]] = "prim.pad"(%[[R]]) {pads = array<i64: 0, 0, 0, 0, 0, 0, 8, 0>{{.*}} -> tensor<2x4x16x8xf32>
// CHECK-NEXT:  %[[DX:.+]] = "prim.reshape"(%[[W]]) : (tensor<2x4x16x8xf32>) -> tensor<2x8x8x8xf32>
// CHECK-NEXT:  return %[[DX]]
func.func @main(%dy: tensor<2x4x4x16xf32>, %w: tensor<16x1x1x8xf32>) -> tensor<2x8x8x8xf32> {
  %0 = "prim.conv2d_backward_data"(%dy, %w) {strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, layout = "NHWC", filter_layout = "KRSC", input_size = array<i64: 8, 8>} : (tensor<2x4x4x16xf32>, tensor<16x1x1x8xf32>) -> tensor<2x8x8x8xf32>
  return %0 : tensor<2x8x8x8xf32>
}

// A strided backward-data convolution (ResNet's 3x3 stride 2 at 56 -> 28, the input gradient of 64 channels
// from dy of 128) becomes one stride-1 forward convolution per phase of the input gradient's rows and columns
// (passes/backward_data_phases.py): phase (0, 0) takes the middle tap (1x1), (0, 1) and (1, 0) two taps
// reversed (gathers [2, 0]: dy one row or column further, padded after), (1, 1) four; each row phase's taps
// gathered once. The phases are interleaved by concatenations (channels, then columns) that are reshapes of
// the row-major layout, chosen because the predicted time beats conv_bwd_data_gemm's GEMM and col2im.
// RUN: openprim-opt %s -p prim-select | filecheck %s

// CHECK-NOT:   prim.conv2d_backward_data
// CHECK:       %[[W:.+]] = "prim.reshape"(%arg1) : (tensor<128x3x3x64xf32>) -> tensor<1x128x3x3x64xf32>
// CHECK:       "prim.conv2d"(%arg0, %{{.*}}) {{.*}}padding = array<i64: 0, 0, 0, 0>{{.*}}prim.problem = "conv2d-8x128x28x28-k64-1x1-s1x1-p0x0x0x0
// CHECK:       dense<[2, 0]>
// CHECK:       "prim.conv2d"(%arg0, %{{.*}}) {{.*}}padding = array<i64: 0, 0, 0, 1>{{.*}}prim.problem = "conv2d-8x128x28x28-k64-1x2-s1x1-p0x0x0x1
// CHECK:       %[[ROWS:.+]] = "prim.gather"(%[[W]], %{{.*}}) {axis = 2 : i64} : (tensor<1x128x3x3x64xf32>, tensor<2xi64>) -> tensor<1x128x2x3x64xf32>
// CHECK:       "prim.conv2d"(%arg0, %{{.*}}) {{.*}}padding = array<i64: 0, 0, 1, 0>{{.*}}prim.problem = "conv2d-8x128x28x28-k64-2x1-s1x1-p0x0x1x0
// CHECK-NOT:   "prim.gather"(%[[W]]
// CHECK:       "prim.gather"(%[[ROWS]], %{{.*}}) {axis = 3 : i64}
// CHECK:       "prim.conv2d"(%arg0, %{{.*}}) {{.*}}padding = array<i64: 0, 0, 1, 1>{{.*}}prim.problem = "conv2d-8x128x28x28-k64-2x2-s1x1-p0x0x1x1
// CHECK:       "prim.concat"({{.*}}) {axis = 3 : i64} : (tensor<8x28x28x64xf32>, tensor<8x28x28x64xf32>) -> tensor<8x28x28x128xf32>
// CHECK:       "prim.reshape"({{.*}}) : (tensor<8x28x28x128xf32>) -> tensor<8x28x56x64xf32>
// CHECK:       "prim.concat"({{.*}}) {axis = 2 : i64} : (tensor<8x28x56x64xf32>, tensor<8x28x56x64xf32>) -> tensor<8x28x112x64xf32>
// CHECK:       "prim.reshape"({{.*}}) : (tensor<8x28x112x64xf32>) -> tensor<8x56x56x64xf32>
func.func @main(%dy: tensor<8x28x28x128xf32>, %w: tensor<128x3x3x64xf32>) -> tensor<8x56x56x64xf32> {
  %0 = "prim.conv2d_backward_data"(%dy, %w) {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, layout = "NHWC", filter_layout = "KRSC", input_size = array<i64: 56, 56>} : (tensor<8x28x28x128xf32>, tensor<128x3x3x64xf32>) -> tensor<8x56x56x64xf32>
  return %0 : tensor<8x56x56x64xf32>
}

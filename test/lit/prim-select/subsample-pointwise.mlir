// A strided, unpadded 1x1 convolution on the CPU (ResNet's downsampling shortcut) becomes a strided slice
// of the pixels it reads and a stride-1 1x1 convolution, which then takes the pointwise GEMM path. A padded
// one keeps its stride, and so does a GPU's (its kernels read strided pixels in place).
// RUN: openprim-opt %s -p prim-select | filecheck %s
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90}' | filecheck %s --check-prefix=GPU

// CHECK-LABEL: func.func @shortcut
// CHECK:       %[[S:.+]] = "prim.slice"(%arg0) {ends = array<i64: 2, 9, 11, 16>, starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 2, 2, 1>} : (tensor<2x9x11x16xf16>) -> tensor<2x5x6x16xf16>
// CHECK:       "prim.conv2d"(%[[S]], {{.*}}strides = array<i64: 1, 1>{{.*}} -> tensor<2x5x6x32xf16>
// CHECK-LABEL: func.func @padded
// CHECK-NOT:   prim.slice
// CHECK:       strides = array<i64: 2, 3>
// GPU-LABEL:   func.func @shortcut
// GPU-NOT:     prim.slice
// GPU:         strides = array<i64: 2, 2>
func.func @shortcut(%x: tensor<2x9x11x16xf16>) -> tensor<2x5x6x32xf16> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<32x1x1x16xf16>} : () -> tensor<32x1x1x16xf16>
  %y = "prim.conv2d"(%x, %w) {strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x11x16xf16>, tensor<32x1x1x16xf16>) -> tensor<2x5x6x32xf16>
  return %y : tensor<2x5x6x32xf16>
}

func.func @padded(%x: tensor<1x8x9x8xf32>) -> tensor<1x5x4x8xf32> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<8x1x1x8xf32>} : () -> tensor<8x1x1x8xf32>
  %y = "prim.conv2d"(%x, %w) {strides = array<i64: 2, 3>, padding = array<i64: 1, 1, 0, 0>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x8x9x8xf32>, tensor<8x1x1x8xf32>) -> tensor<1x5x4x8xf32>
  return %y : tensor<1x5x4x8xf32>
}

// prim-select on NVIDIA: a depthwise convolution whose result only a 1x1 convolution reads becomes one
// prim.depthwise_pointwise (kernels/nvidia/depthwise_pointwise.py keeps the depthwise result on chip) where
// the fused grid has 8+ blocks per multiprocessor (sm_90: 132 x 8 = 1056 blocks of 64 pixels; batch 32 at
// 56 x 56 has 1568); the filters become constants [R, S, C] and [C, K]. Small grids, other targets and a
// depthwise result with a second reader stay two convolutions.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90}' | filecheck %s
// RUN: openprim-opt %s -p 'prim-select{target=rocdl:gfx942}' | filecheck %s --check-prefix=AMD
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s --check-prefix=KERNEL

// CHECK-LABEL: func.func @fused
// CHECK-DAG:   %[[WD:.+]] = "prim.constant"() {value = dense<5.000000e-01> : tensor<3x3x8xf16>}
// CHECK-DAG:   %[[WP:.+]] = "prim.constant"() {value = dense<1.250000e-01> : tensor<8x16xf16>}
// CHECK:       "prim.depthwise_pointwise"(%arg0, %[[WD]], %{{.+}}, %[[WP]], %arg1)
// CHECK-SAME:  activation = "none", {{.*}}dw_activation = "clamp", dw_activation_params = array<f64: 0.000000e+00, 6.000000e+00>
// CHECK-SAME:  operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 1>
// CHECK-SAME:  prim.solver = "conv_depthwise_pointwise_mma"
// CHECK-SAME:  -> tensor<32x56x56x16xf16>
// CHECK-NOT:   "prim.conv2d"
// CHECK:       return
// AMD-LABEL:   func.func @fused
// AMD-COUNT-2: "prim.conv2d"
// AMD-NOT:     prim.depthwise_pointwise
// KERNEL-LABEL: func.func @depthwise_pointwise_0(
// KERNEL:      gpu.launch
// KERNEL:      scf.for
// KERNEL:      math.fma {{.*}} : vector<8xf32>
// KERNEL:      arith.minimumf
// KERNEL:      arith.truncf {{.*}} : vector<8xf32> to vector<8xf16>
// KERNEL:      nvgpu.mma.sync
func.func @fused(%x: tensor<32x56x56x8xf16>, %r: tensor<32x56x56x16xf16>) -> tensor<32x56x56x16xf16> {
  %wd = "prim.constant"() {value = dense<0.5> : tensor<8x3x3x1xf16>} : () -> tensor<8x3x3x1xf16>
  %bd = "prim.constant"() {value = dense<0.25> : tensor<8xf16>} : () -> tensor<8xf16>
  %h = "prim.conv2d"(%x, %wd, %bd) {activation = "clamp", activation_params = array<f64: 0.0, 6.0>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 8, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<32x56x56x8xf16>, tensor<8x3x3x1xf16>, tensor<8xf16>) -> tensor<32x56x56x8xf16>
  %wp = "prim.constant"() {value = dense<0.125> : tensor<16x1x1x8xf16>} : () -> tensor<16x1x1x8xf16>
  %y = "prim.conv2d"(%h, %wp, %r) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 1, layout = "NHWC", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 1>} : (tensor<32x56x56x8xf16>, tensor<16x1x1x8xf16>, tensor<32x56x56x16xf16>) -> tensor<32x56x56x16xf16>
  return %y : tensor<32x56x56x16xf16>
}

// Batch 2: 98 blocks, too few to hide the fused kernel's depthwise latency.
// CHECK-LABEL: func.func @small_grid
// CHECK-COUNT-2: "prim.conv2d"
// CHECK-NOT:   prim.depthwise_pointwise
func.func @small_grid(%x: tensor<2x56x56x8xf16>) -> tensor<2x56x56x16xf16> {
  %wd = "prim.constant"() {value = dense<0.5> : tensor<8x3x3x1xf16>} : () -> tensor<8x3x3x1xf16>
  %h = "prim.conv2d"(%x, %wd) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 8, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x56x56x8xf16>, tensor<8x3x3x1xf16>) -> tensor<2x56x56x8xf16>
  %wp = "prim.constant"() {value = dense<0.125> : tensor<16x1x1x8xf16>} : () -> tensor<16x1x1x8xf16>
  %y = "prim.conv2d"(%h, %wp) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 1, layout = "NHWC", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x56x56x8xf16>, tensor<16x1x1x8xf16>) -> tensor<2x56x56x16xf16>
  return %y : tensor<2x56x56x16xf16>
}

// The depthwise result is also returned: it has to be written, so nothing is fused.
// CHECK-LABEL: func.func @two_readers
// CHECK-COUNT-2: "prim.conv2d"
// CHECK-NOT:   prim.depthwise_pointwise
func.func @two_readers(%x: tensor<32x56x56x8xf16>) -> (tensor<32x56x56x8xf16>, tensor<32x56x56x16xf16>) {
  %wd = "prim.constant"() {value = dense<0.5> : tensor<8x3x3x1xf16>} : () -> tensor<8x3x3x1xf16>
  %h = "prim.conv2d"(%x, %wd) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 8, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<32x56x56x8xf16>, tensor<8x3x3x1xf16>) -> tensor<32x56x56x8xf16>
  %wp = "prim.constant"() {value = dense<0.125> : tensor<16x1x1x8xf16>} : () -> tensor<16x1x1x8xf16>
  %y = "prim.conv2d"(%h, %wp) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 1, layout = "NHWC", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<32x56x56x8xf16>, tensor<16x1x1x8xf16>) -> tensor<32x56x56x16xf16>
  return %h, %y : tensor<32x56x56x8xf16>, tensor<32x56x56x16xf16>
}

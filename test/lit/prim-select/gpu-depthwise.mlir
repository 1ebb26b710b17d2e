// On GPU targets depthwise convolutions (groups = C = K) get conv_depthwise_gpu with its pixels per
// thread (at 3x3 in f16: 4 rows (ht) of 4 pixels (wt), 4-byte vectors; at 5x5: 2 rows, 8-byte vectors),
// an NCHW one after the move to NHWC; a channel multiplier of 2 (groups = C, K = 2C) is not depthwise: its
// constant filter is made dense (block-diagonal, prim-select's _densify_groups) and it runs on the
// matrix cores. The CPU keeps its own solver.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90}' | filecheck %s --check-prefix=GPU
// RUN: openprim-opt %s -p 'prim-select{target=rocdl:gfx942}' | filecheck %s --check-prefix=GPU
// RUN: openprim-opt %s -p 'prim-select{target=cpu}' | filecheck %s --check-prefix=CPU

// GPU-LABEL: func.func @mobilenet
// GPU:       "prim.conv2d"
// GPU-SAME:  filter_layout = "RSCK"
// GPU-SAME:  prim.params = {ht = 4 : i64, vbytes = 4 : i64, wt = 4 : i64}
// GPU-SAME:  prim.problem = "conv2d-32x144x56x56-k144-3x3-s1x1-p1x1x1x1-d1x1-g144-NHWC-KRSC-f16-bias+clamp"
// GPU-SAME:  prim.solver = "conv_depthwise_gpu"
// CPU-LABEL: func.func @mobilenet
// CPU:       prim.solver = "conv_depthwise"
func.func @mobilenet(%x: tensor<32x56x56x144xf16>, %b: tensor<144xf16>) -> tensor<32x56x56x144xf16> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<144x3x3x1xf16>} : () -> tensor<144x3x3x1xf16>
  %y = "prim.conv2d"(%x, %w, %b) {activation = "clamp", activation_params = array<f64: 0.0, 6.0>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 144, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<32x56x56x144xf16>, tensor<144x3x3x1xf16>, tensor<144xf16>) -> tensor<32x56x56x144xf16>
  return %y : tensor<32x56x56x144xf16>
}

// GPU-LABEL: func.func @nchw_5x5_s2
// GPU:       "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>}
// GPU:       "prim.conv2d"
// GPU-SAME:  prim.params = {ht = 2 : i64, vbytes = 8 : i64, wt = 4 : i64}
// GPU-SAME:  prim.problem = "conv2d-2x40x28x28-k40-5x5-s2x2-p2x2x2x2-d1x1-g40-NHWC-KRSC-f32-none"
// GPU-SAME:  prim.solver = "conv_depthwise_gpu"
// GPU:       "prim.transpose"
func.func @nchw_5x5_s2(%x: tensor<2x40x28x28xf32>) -> tensor<2x40x14x14xf32> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<40x1x5x5xf32>} : () -> tensor<40x1x5x5xf32>
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 40, layout = "NCHW", padding = array<i64: 2, 2, 2, 2>, strides = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x40x28x28xf32>, tensor<40x1x5x5xf32>) -> tensor<2x40x14x14xf32>
  return %y : tensor<2x40x14x14xf32>
}

// GPU-LABEL: func.func @multiplier2
// GPU:       groups = 1 : i64
// GPU-SAME:  prim.solver = "conv_{{[a-z_0-9]+}}_{{wgmma|mfma}}"
func.func @multiplier2(%x: tensor<1x9x9x8xf16>) -> tensor<1x9x9x16xf16> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<16x3x3x1xf16>} : () -> tensor<16x3x3x1xf16>
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 8, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x9x9x8xf16>, tensor<16x3x3x1xf16>) -> tensor<1x9x9x16xf16>
  return %y : tensor<1x9x9x16xf16>
}

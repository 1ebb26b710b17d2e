// On GPU targets an f16 NHWC convolution with 3 input channels (a network's stem) gets 5 zero channels
// appended to its input (a prim.pad) and to its constant filter (folded): the tensor-core kernel reads
// 8 channels at a time, and even with 8/3 of the flops it is predicted faster than the SIMT kernel.
// On sm_90 space-to-depth takes the 3 channels as they are (no pad); the CPU has no such kernel: the same
// convolution is left alone there.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_80}' | filecheck %s --check-prefix=GPU
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90}' | filecheck %s --check-prefix=SM90
// RUN: openprim-opt %s -p 'prim-select{target=cpu}' | filecheck %s --check-prefix=CPU

// GPU-LABEL: func.func @stem
// GPU:       %[[X:.*]] = "prim.pad"(%arg0) {pads = array<i64: 0, 0, 0, 0, 0, 0, 0, 5>, value = 0.000000e+00 : f64} : (tensor<4x32x32x3xf16>) -> tensor<4x32x32x8xf16>
// GPU:       %[[W:.*]] = "prim.constant"() {{.*}} -> tensor<7x7x8x64xf16>
// GPU:       "prim.conv2d"(%[[X]], %[[W]])
// GPU-SAME:  prim.problem = "conv2d-4x8x32x32-k64-7x7-s2x2-p3x3x3x3-d1x1-g1-NHWC-KRSC-f16-none"
// GPU-SAME:  prim.solver = "conv_implicit_gemm_mma"
// SM90-LABEL: func.func @stem
// SM90-NOT:   prim.pad
// SM90:       prim.problem = "conv2d-4x3x32x32-k64-7x7-s2x2-p3x3x3x3-d1x1-g1-NHWC-KRSC-f16-none"
// SM90-SAME:  prim.solver = "conv_space_to_depth_wgmma"
// CPU-LABEL: func.func @stem
// CPU-NOT:   prim.pad
// CPU:       prim.problem = "conv2d-4x3x32x32-k64-7x7-s2x2-p3x3x3x3-d1x1-g1-NHWC-KRSC-f16-none"
func.func @stem(%x: tensor<4x32x32x3xf16>) -> tensor<4x16x16x64xf16> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<64x7x7x3xf16>} : () -> tensor<64x7x7x3xf16>
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 1, layout = "NHWC", padding = array<i64: 3, 3, 3, 3>, strides = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<4x32x32x3xf16>, tensor<64x7x7x3xf16>) -> tensor<4x16x16x64xf16>
  return %y : tensor<4x16x16x64xf16>
}

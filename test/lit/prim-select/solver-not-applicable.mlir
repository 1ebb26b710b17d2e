// A forced solver that does not apply is an error at the op, naming the solver, the problem and the
// reason (one line, exit status 1); an unknown solver name lists the known ones.
// RUN: not openprim-opt %s -p 'prim-select{solver=conv_depthwise}' 2>&1 | filecheck %s --check-prefix=DW
// RUN: not openprim-opt %s -p 'prim-select{solver=conv_1x1_gemm}' 2>&1 | filecheck %s --check-prefix=GEMM
// RUN: not openprim-opt %s -p 'prim-select{solver=winograd}' 2>&1 | filecheck %s --check-prefix=UNKNOWN

// DW:      {{^(.*/)?}}solver-not-applicable.mlir:[[# @LINE + 7]]:8: error: solver 'conv_depthwise' is not applicable to conv2d-1x2x4x4-k2-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none: not depthwise (needs groups = C = K){{$}}
// DW-NOT:  {{.}}
// GEMM:    {{^(.*/)?}}solver-not-applicable.mlir:[[# @LINE + 5]]:8: error: solver 'conv_1x1_gemm' is not applicable to conv2d-1x2x4x4-k2-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none: not a 1x1, stride-1, unpadded convolution{{$}}
// GEMM-NOT: {{.}}
// UNKNOWN: {{^}}openprim-opt: error: unknown solver 'winograd'; solvers: conv_direct, conv_1x1_gemm, conv_im2col_gemm, conv_depthwise, conv_reference, conv_implicit_gemm, gemm, gemm_packed, gemm_reference, conv_winograd_f2x3, conv_winograd_f4x3, conv_winograd_f2x3_packed, conv_winograd_f4x3_packed, conv_implicit_gemm_gpu, conv_depthwise_gpu, conv_grouped_gemm, gemm_gpu, gemv_gpu, norm_gemv_gpu, conv_implicit_gemm_mma, gemm_mma, conv_implicit_gemm_wgmma, conv_im2col_gemm_wgmma, conv_winograd_f2x3_wgmma, conv_winograd_f4x3_wgmma, conv_space_to_depth_wgmma, gemm_wgmma, gemv_mma, norm_gemv_mma, conv_implicit_gemm_mfma, gemm_mfma, conv_implicit_gemm_wmma, gemm_wmma, conv_depthwise_pointwise_mma, attention_flash_mma, attention_flash_wgmma, attention_flash_mfma, attention_flash_wmma, attention_decode_gpu, conv_bwd_data_gemm, conv_bwd_data_reference, conv_bwd_weights_gemm, conv_bwd_weights_wgmma, conv_bwd_weights_reference{{$}}
// UNKNOWN-NOT: {{.}}
func.func @conv3x3(%x: tensor<1x4x4x2xf32>, %w: tensor<3x3x2x2xf32>) -> tensor<1x4x4x2xf32> {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 1, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x4x2xf32>, tensor<3x3x2x2xf32>) -> tensor<1x4x4x2xf32>
  return %y : tensor<1x4x4x2xf32>
}

// A backward convolution's forced solver (issue 31).
// Forced, a backward solver keeps the op (no forward rewrite); a forced forward solver is for the forward
// convolutions only (as a conv2d solver is for conv2d only), so this one gets the heuristic's.
// RUN: openprim-opt %s -p 'prim-select{solver=conv_bwd_data_gemm}' | filecheck %s --check-prefix=FORCED
// FORCED-LABEL: func.func @stride1
// FORCED:       "prim.conv2d_backward_data"{{.*}}prim.choice = "forced"{{.*}}prim.solver = "conv_bwd_data_gemm"
// RUN: openprim-opt %s -p 'prim-select{solver=conv_direct}' | filecheck %s --check-prefix=OTHER
// OTHER:       "prim.conv2d_backward_data"{{.*}}prim.choice = "heuristic"{{.*}}prim.solver = "conv_bwd_data_gemm"
func.func @stride1(%dy: tensor<2x6x9x7xf32>, %w: tensor<6x4x3x3xf32>) -> tensor<2x4x9x7xf32> {
  %dx = "prim.conv2d_backward_data"(%dy, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NCHW", filter_layout = "KCRS", input_size = array<i64: 9, 7>} : (tensor<2x6x9x7xf32>, tensor<6x4x3x3xf32>) -> tensor<2x4x9x7xf32>
  return %dx : tensor<2x4x9x7xf32>
}

// Forcing a solver, MIOpen-style: the pass option solver=NAME, or $OPENPRIM_SOLVER. The heuristic
// picks conv_direct for this 3x3 conv (direct-conv tunables ct/ft/wt); forced, conv_im2col_gemm
// with the GEMM's tunables kt/mt/nt (their values are the heuristic's, not pinned here). A forced
// conv solver leaves matmuls to the heuristic.
// RUN: openprim-opt %s -p prim-select | filecheck %s --check-prefix=DEFAULT
// RUN: openprim-opt %s -p 'prim-select{solver=conv_im2col_gemm}' | filecheck %s --check-prefix=FORCED
// RUN: env OPENPRIM_SOLVER=conv_im2col_gemm openprim-opt %s -p prim-select | filecheck %s --check-prefix=FORCED
// The option wins over the environment.
// RUN: env OPENPRIM_SOLVER=conv_reference openprim-opt %s -p 'prim-select{solver=conv_im2col_gemm}' | filecheck %s --check-prefix=FORCED

// DEFAULT-LABEL: func.func @conv3x3
// DEFAULT:       "prim.conv2d"
// DEFAULT-SAME:  prim.params = {ct = {{[0-9]+}} : i64, ft = {{[0-9]+}} : i64, wt = {{[0-9]+}} : i64}
// DEFAULT-SAME:  prim.solver = "conv_direct"
// DEFAULT:       "prim.matmul"
// DEFAULT-SAME:  prim.solver = "gemm_packed"

// FORCED-LABEL: func.func @conv3x3
// FORCED:       "prim.conv2d"
// FORCED-SAME:  prim.params = {kt = {{[0-9]+}} : i64, mt = {{[0-9]+}} : i64, nt = {{[0-9]+}} : i64}
// FORCED-SAME:  prim.problem = "conv2d-1x2x4x4-k2-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none"
// FORCED-SAME:  prim.solver = "conv_im2col_gemm"
// FORCED:       "prim.matmul"
// FORCED-SAME:  prim.solver = "gemm_packed"
func.func @conv3x3(%x: tensor<1x4x4x2xf32>, %w: tensor<3x3x2x2xf32>, %a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> (tensor<1x4x4x2xf32>, tensor<2x4xf32>) {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 1, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x4x2xf32>, tensor<3x3x2x2xf32>) -> tensor<1x4x4x2xf32>
  %m = "prim.matmul"(%a, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %y, %m : tensor<1x4x4x2xf32>, tensor<2x4xf32>
}

// Backward convolutions get solvers of their direction (issue 31; solvers/cpu_backward.py). A stride-1 input
// gradient is the forward convolution of dy with the filter's K and C swapped (prim-layout's KCRS -> KRSC and
// the swap into RSCK as one transpose) and its taps reversed (a gather of whole rows along R S; a solver that
// wants another layout gets it before the flip: prim-select/input-gradient-flip.mlir), so a forward solver
// serves it; a strided one is a stride-1
// forward convolution per phase, interleaved (prim-select/backward-data-phases.mlir; conv_bwd_data_gemm
// where it is forced: backward-forced.mlir); a filter gradient (of 8 or more channels: fewer stack their taps,
// backward-weights-gemms.mlir) is conv_bwd_weights_gemm, computed RSCK and transposed back (the two
// transposes after it in a row are one).
// RUN: openprim-opt %s -p prim-select | filecheck %s

// CHECK-LABEL: func.func @conv_bwd
// CHECK-DAG:   %[[DY:.+]] = "prim.transpose"(%arg1) {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x6x9x7xf32>) -> tensor<2x9x7x6xf32>
// CHECK:       %[[T:.+]] = "prim.transpose"(%arg3) {perm = array<i64: 2, 3, 0, 1>} : (tensor<6x4x3x3xf32>) -> tensor<3x3x6x4xf32>
// CHECK-NEXT:  %[[TAPS:.+]] = "prim.reshape"(%[[T]]) : (tensor<3x3x6x4xf32>) -> tensor<1x9x24xf32>
// CHECK-NEXT:  %[[REV:.+]] = "prim.constant"() {value = dense<[8, 7, 6, 5, 4, 3, 2, 1, 0]> : tensor<9xi64>}
// CHECK-NEXT:  %[[FLIP:.+]] = "prim.gather"(%[[TAPS]], %[[REV]]) {axis = 1 : i64}
// CHECK-NEXT:  %[[WF:.+]] = "prim.reshape"(%[[FLIP]]) : (tensor<1x9x24xf32>) -> tensor<3x3x6x4xf32>
// CHECK-NEXT:  %[[DX:.+]] = "prim.conv2d"(%[[DY]], %[[WF]]) {{{.*}}filter_layout = "RSCK"{{.*}}padding = array<i64: 1, 1, 1, 1>
// CHECK-SAME:  prim.problem = "conv2d-2x6x9x7-k4-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none"
// CHECK-SAME:  strides = array<i64: 1, 1>} : (tensor<2x9x7x6xf32>, tensor<3x3x6x4xf32>) -> tensor<2x9x7x4xf32>
// CHECK-NOT:   "prim.conv2d_backward_data"
// CHECK:       "prim.conv2d"({{.*}}prim.problem = "conv2d-2x6x5x4-k4-2x2-s1x1-p0x0x1x1-d1x1-g1-NHWC-RSCK-f32-none"
// CHECK:       "prim.concat"({{.*}}) {axis = 2 : i64} : (tensor<2x5x8x4xf32>, tensor<2x5x8x4xf32>) -> tensor<2x5x16x4xf32>
// CHECK:       %[[DW:.+]] = "prim.conv2d_backward_weights"({{.*}}, %[[DY]]) {{{.*}}filter_layout = "RSCK"
// CHECK-SAME:  prim.problem = "conv2d_bwd_weights-2x8x9x7-k6-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-KRSC-f32-none", prim.solver = "conv_bwd_weights_gemm"
// CHECK-SAME:  -> tensor<3x3x8x6xf32>
// CHECK-NEXT:  %[[DWN:.+]] = "prim.transpose"(%[[DW]]) {perm = array<i64: 3, 2, 0, 1>} : (tensor<3x3x8x6xf32>) -> tensor<6x8x3x3xf32>
func.func @conv_bwd(%x: tensor<2x8x9x7xf32>, %dy: tensor<2x6x9x7xf32>, %dy2: tensor<2x6x5x4xf32>, %w: tensor<6x4x3x3xf32>) -> (tensor<2x4x9x7xf32>, tensor<2x4x9x7xf32>, tensor<6x8x3x3xf32>) {
  %dx = "prim.conv2d_backward_data"(%dy, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NCHW", filter_layout = "KCRS", input_size = array<i64: 9, 7>} : (tensor<2x6x9x7xf32>, tensor<6x4x3x3xf32>) -> tensor<2x4x9x7xf32>
  %dx2 = "prim.conv2d_backward_data"(%dy2, %w) {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NCHW", filter_layout = "KCRS", input_size = array<i64: 9, 7>} : (tensor<2x6x5x4xf32>, tensor<6x4x3x3xf32>) -> tensor<2x4x9x7xf32>
  %dw = "prim.conv2d_backward_weights"(%x, %dy) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NCHW", filter_layout = "KCRS", filter_size = array<i64: 3, 3>} : (tensor<2x8x9x7xf32>, tensor<2x6x9x7xf32>) -> tensor<6x8x3x3xf32>
  return %dx, %dx2, %dw : tensor<2x4x9x7xf32>, tensor<2x4x9x7xf32>, tensor<6x8x3x3xf32>
}

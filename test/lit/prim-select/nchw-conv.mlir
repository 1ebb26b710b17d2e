// An NCHW conv2d runs in NHWC: transpose in -> NHWC conv with an RSCK filter -> transpose back. The
// constant KCRS filter is re-laid out at compile time (values checked), and the solver's choice is
// written on the op: prim.solver, prim.params (its tunables) and prim.problem (the descriptor the tuning
// database keys on: the problem as selection sees it, before the filter relayout, so KRSC here).
// prim-select runs prim-layout's stage itself on a function that prim-layout has not marked, so the IR is
// the same with prim-layout before it; a function that prim-layout left as it is (layout=keep) keeps its
// NCHW layers, and the mark is gone either way.
// RUN: openprim-opt %s -p prim-select | filecheck %s
// RUN: openprim-opt %s -p prim-layout,prim-select | filecheck %s
// RUN: openprim-opt %s -p 'prim-layout{layout=keep},prim-select' | filecheck %s --check-prefix=KEEP
// KEEP-LABEL:  func.func @conv(%arg0: tensor<1x1x4x4xf32>) -> tensor<1x2x4x3xf32> {
// KEEP-NEXT:   "prim.constant"
// KEEP-NEXT:   "prim.conv2d"(%arg0, %{{[^)]+}})
// KEEP-SAME:   prim.problem = "conv2d-1x1x4x4-k2-1x2-s1x1-p0x0x0x0-d1x1-g1-NCHW-KCRS-f32-none"
// KEEP-NEXT:   return

// Filter KCRS 2x1x1x2: W[k=0] = [1, 2], W[k=1] = [3, 4] -> RSCK 1x2x1x2: [s=0] = [1, 3], [s=1] = [2, 4].
// CHECK-LABEL: func.func @conv(%arg0: tensor<1x1x4x4xf32>) -> tensor<1x2x4x3xf32> {
// One input channel: the transpose to NHWC moves only a size-1 dim, so it is a reshape (a view).
// CHECK-NEXT:  %[[X:.+]] = "prim.reshape"(%arg0) : (tensor<1x1x4x4xf32>) -> tensor<1x4x4x1xf32>
// CHECK-NEXT:  %[[W:.+]] = "prim.constant"() {value = dense<{{\[\[\[\[}}1.000000e+00, 3.000000e+00]], {{\[\[}}2.000000e+00, 4.000000e+00]]]]> : tensor<1x2x1x2xf32>}
// CHECK-NEXT:  %[[Y:.+]] = "prim.conv2d"(%[[X]], %[[W]])
// CHECK-SAME:  filter_layout = "RSCK"
// CHECK-SAME:  layout = "NHWC"
// CHECK-SAME:  prim.params = {ct = {{[0-9]+}} : i64, ft = {{[0-9]+}} : i64, wt = {{[0-9]+}} : i64}
// CHECK-SAME:  prim.problem = "conv2d-1x1x4x4-k2-1x2-s1x1-p0x0x0x0-d1x1-g1-NHWC-KRSC-f32-none"
// CHECK-SAME:  prim.solver = "conv_direct"
// CHECK-SAME:  (tensor<1x4x4x1xf32>, tensor<1x2x1x2xf32>) -> tensor<1x4x3x2xf32>
// CHECK-NEXT:  %[[R:.+]] = "prim.transpose"(%[[Y]]) {perm = array<i64: 0, 3, 1, 2>} : (tensor<1x4x3x2xf32>) -> tensor<1x2x4x3xf32>
// CHECK-NEXT:  return %[[R]] : tensor<1x2x4x3xf32>
// CHECK-NOT:   "prim.constant"() {value = dense<{{.*}}tensor<2x1x1x2xf32>
func.func @conv(%x: tensor<1x1x4x4xf32>) -> tensor<1x2x4x3xf32> {
  %w = "prim.constant"() {value = dense<[[[[1.0, 2.0]]], [[[3.0, 4.0]]]]> : tensor<2x1x1x2xf32>} : () -> tensor<2x1x1x2xf32>
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x1x4x4xf32>, tensor<2x1x1x2xf32>) -> tensor<1x2x4x3xf32>
  return %y : tensor<1x2x4x3xf32>
}

// A filter known only at run time is transposed in the graph instead (KCRS -> KRSC for the layout
// change, then KRSC -> RSCK for the solver: the two in a row are one transpose, KCRS -> RSCK, here of
// the 2 x 2 matrix that a 1x1 filter is, between views), and an NCHW residual is transposed to NHWC as well.
// CHECK-LABEL: func.func @runtime_filter
// CHECK-DAG:   %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
// CHECK-DAG:   %[[Z:.+]] = "prim.transpose"(%arg2) {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
// CHECK:       %[[M:.+]] = "prim.reshape"(%arg1) : (tensor<2x2x1x1xf32>) -> tensor<2x2xf32>
// CHECK-NEXT:  %[[T:.+]] = "prim.transpose"(%[[M]]) {perm = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
// CHECK-NEXT:  %[[W:.+]] = "prim.reshape"(%[[T]]) : (tensor<2x2xf32>) -> tensor<1x1x2x2xf32>
// CHECK-NEXT:  %[[Y:.+]] = "prim.conv2d"(%[[X]], %[[W]], %[[Z]])
// CHECK-SAME:  filter_layout = "RSCK"
// CHECK-SAME:  prim.problem = "conv2d-1x2x2x2-k2-1x1-s1x1-p0x0x0x0-d1x1-g1-NHWC-KRSC-f32-residual"
// CHECK-NEXT:  %[[R:.+]] = "prim.transpose"(%[[Y]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  return %[[R]]
func.func @runtime_filter(%x: tensor<1x2x2x2xf32>, %w: tensor<2x2x1x1xf32>, %z: tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32> {
  %y = "prim.conv2d"(%x, %w, %z) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 1>} : (tensor<1x2x2x2xf32>, tensor<2x2x1x1xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  return %y : tensor<1x2x2x2xf32>
}

// Pooling in NCHW is wrapped the same way.
// CHECK-LABEL: func.func @pool
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NEXT:  %[[P:.+]] = "prim.max_pool2d"(%[[X]]) {{{.*}}layout = "NHWC"{{.*}}} : (tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32>
// CHECK-NEXT:  %[[R:.+]] = "prim.transpose"(%[[P]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  return %[[R]]
func.func @pool(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32> {
  %0 = "prim.max_pool2d"(%x) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0, layout = "NCHW"} : (tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32>
  return %0 : tensor<1x2x2x2xf32>
}

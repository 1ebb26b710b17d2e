// prim-layout runs an NCHW conv2d in NHWC: transpose in -> NHWC conv with a KRSC filter -> transpose back.
// A constant KCRS filter is permuted at compile time (values checked); a filter known only at run time and
// an NCHW residual get transposes in the graph. Pools and norms are wrapped the same way, and between two
// wrapped layers the inverse transposes cancel. The function is marked with the layout it was given
// (prim-select then does not lay it out again); layout=keep leaves every op as it is.
// RUN: openprim-opt %s -p prim-layout | filecheck %s
// RUN: openprim-opt %s -p 'prim-layout{layout=keep}' | filecheck %s --check-prefix=KEEP

// Filter KCRS 2x1x1x2: W[k=0] = [1, 2], W[k=1] = [3, 4] -> KRSC 2x1x2x1: [k=0] = [[1], [2]], [k=1] = [[3], [4]].
// CHECK-LABEL: func.func @conv(%arg0: tensor<1x1x4x4xf32>) -> tensor<1x2x4x3xf32> attributes {prim.layout = "NHWC"}
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x1x4x4xf32>) -> tensor<1x4x4x1xf32>
// CHECK-NEXT:  %[[W:.+]] = "prim.constant"() {value = dense<{{\[\[\[\[}}1.000000e+00], [2.000000e+00]]], {{\[\[\[}}3.000000e+00], [4.000000e+00]]]]> : tensor<2x1x2x1xf32>}
// CHECK-NEXT:  %[[Y:.+]] = "prim.conv2d"(%[[X]], %[[W]])
// CHECK-SAME:  filter_layout = "KRSC"
// CHECK-SAME:  layout = "NHWC"
// CHECK-SAME:  (tensor<1x4x4x1xf32>, tensor<2x1x2x1xf32>) -> tensor<1x4x3x2xf32>
// CHECK-NEXT:  %[[R:.+]] = "prim.transpose"(%[[Y]]) {perm = array<i64: 0, 3, 1, 2>} : (tensor<1x4x3x2xf32>) -> tensor<1x2x4x3xf32>
// CHECK-NEXT:  return %[[R]] : tensor<1x2x4x3xf32>
// KEEP-LABEL:  func.func @conv(%arg0: tensor<1x1x4x4xf32>) -> tensor<1x2x4x3xf32> attributes {prim.layout = "keep"}
// KEEP-NEXT:   "prim.constant"() {value = dense<{{\[\[\[\[}}1.000000e+00, 2.000000e+00]]], {{\[\[\[}}3.000000e+00, 4.000000e+00]]]]> : tensor<2x1x1x2xf32>}
// KEEP-NEXT:   "prim.conv2d"(%arg0, %{{.+}}) {{.*}}filter_layout = "KCRS"{{.*}}layout = "NCHW"
// KEEP-NEXT:   return
func.func @conv(%x: tensor<1x1x4x4xf32>) -> tensor<1x2x4x3xf32> {
  %w = "prim.constant"() {value = dense<[[[[1.0, 2.0]]], [[[3.0, 4.0]]]]> : tensor<2x1x1x2xf32>} : () -> tensor<2x1x1x2xf32>
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x1x4x4xf32>, tensor<2x1x1x2xf32>) -> tensor<1x2x4x3xf32>
  return %y : tensor<1x2x4x3xf32>
}

// CHECK-LABEL: func.func @runtime_filter
// CHECK-DAG:   %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
// CHECK-DAG:   %[[Z:.+]] = "prim.transpose"(%arg2) {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
// CHECK-DAG:   %[[W:.+]] = "prim.transpose"(%arg1) {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x2x1x1xf32>) -> tensor<2x1x1x2xf32>
// CHECK:       %[[Y:.+]] = "prim.conv2d"(%[[X]], %[[W]], %[[Z]])
// CHECK-SAME:  filter_layout = "KRSC"
// CHECK-NEXT:  %[[R:.+]] = "prim.transpose"(%[[Y]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  return %[[R]]
func.func @runtime_filter(%x: tensor<1x2x2x2xf32>, %w: tensor<2x2x1x1xf32>, %z: tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32> {
  %y = "prim.conv2d"(%x, %w, %z) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 1>} : (tensor<1x2x2x2xf32>, tensor<2x2x1x1xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  return %y : tensor<1x2x2x2xf32>
}

// max pool -> batch norm -> global average pool, all NCHW: one transpose in, one out.
// CHECK-LABEL: func.func @pool_norm
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NEXT:  %[[P:.+]] = "prim.max_pool2d"(%[[X]]) {{{.*}}layout = "NHWC"{{.*}}} : (tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32>
// CHECK-NEXT:  %[[B:.+]] = "prim.batch_norm"(%[[P]], %arg1, %arg2, %arg3, %arg4) {{{.*}}layout = "NHWC"} : (tensor<1x2x2x2xf32>, {{.*}}) -> tensor<1x2x2x2xf32>
// CHECK-NEXT:  %[[G:.+]] = "prim.global_avg_pool"(%[[B]]) {layout = "NHWC"} : (tensor<1x2x2x2xf32>) -> tensor<1x1x1x2xf32>
// CHECK-NEXT:  %[[R:.+]] = "prim.transpose"(%[[G]]) {perm = array<i64: 0, 3, 1, 2>} : (tensor<1x1x1x2xf32>) -> tensor<1x2x1x1xf32>
// CHECK-NEXT:  return %[[R]]
func.func @pool_norm(%x: tensor<1x2x4x4xf32>, %s: tensor<2xf32>, %t: tensor<2xf32>, %m: tensor<2xf32>, %v: tensor<2xf32>) -> tensor<1x2x1x1xf32> {
  %0 = "prim.max_pool2d"(%x) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0, layout = "NCHW"} : (tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32>
  %1 = "prim.batch_norm"(%0, %s, %t, %m, %v) {epsilon = 1.0e-5, layout = "NCHW"} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  %2 = "prim.global_avg_pool"(%1) {layout = "NCHW"} : (tensor<1x2x2x2xf32>) -> tensor<1x2x1x1xf32>
  return %2 : tensor<1x2x1x1xf32>
}

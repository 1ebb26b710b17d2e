// The backward ops of training (issue 31): each verifies with its result shape and prints back unchanged.
// RUN: openprim-opt %s | filecheck %s
// prim-fuse leaves them as they are (no fusion); prim-layout and prim-select: test/lit/prim-layout/backward-ops.mlir,
// test/lit/prim-select/backward-conv.mlir.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// CHECK-LABEL: func.func @conv
// CHECK: "prim.conv2d_backward_data"(%arg1, %arg2) {{.*}}input_size = array<i64: 9, 7>{{.*}} : (tensor<2x6x4x3xf32>, tensor<6x2x3x3xf32>) -> tensor<2x4x9x7xf32>
// CHECK: "prim.conv2d_backward_weights"(%arg0, %arg1) {{.*}}filter_size = array<i64: 3, 3>{{.*}} : (tensor<2x4x9x7xf32>, tensor<2x6x4x3xf32>) -> tensor<3x3x2x6xf32>
func.func @conv(%x: tensor<2x4x9x7xf32>, %dy: tensor<2x6x4x3xf32>, %w: tensor<6x2x3x3xf32>) -> (tensor<2x4x9x7xf32>, tensor<3x3x2x6xf32>) {
  %dx = "prim.conv2d_backward_data"(%dy, %w) {strides = array<i64: 2, 2>, padding = array<i64: 1, 0, 0, 1>, dilations = array<i64: 1, 1>, groups = 2, layout = "NCHW", filter_layout = "KCRS", input_size = array<i64: 9, 7>} : (tensor<2x6x4x3xf32>, tensor<6x2x3x3xf32>) -> tensor<2x4x9x7xf32>
  %dw = "prim.conv2d_backward_weights"(%x, %dy) {strides = array<i64: 2, 2>, padding = array<i64: 1, 0, 0, 1>, dilations = array<i64: 1, 1>, groups = 2, layout = "NCHW", filter_layout = "RSCK", filter_size = array<i64: 3, 3>} : (tensor<2x4x9x7xf32>, tensor<2x6x4x3xf32>) -> tensor<3x3x2x6xf32>
  return %dx, %dw : tensor<2x4x9x7xf32>, tensor<3x3x2x6xf32>
}

// CHECK-LABEL: func.func @norms
// CHECK: "prim.batch_norm_training"(%arg0, %arg2, %arg3) {epsilon = 1.000000e-05 : f64, layout = "NHWC"} : (tensor<2x5x3x4xf16>, tensor<4xf16>, tensor<4xf16>) -> tensor<2x5x3x4xf16>
// CHECK: "prim.batch_norm_statistics"(%arg0) {epsilon = 1.000000e-05 : f64, layout = "NHWC"} : (tensor<2x5x3x4xf16>) -> tensor<2x4xf16>
// CHECK: "prim.batch_norm_backward"(%arg1, %arg0, %arg2, %arg4, %arg5) {layout = "NHWC"}
// CHECK: "prim.batch_norm_backward_sums"(%arg1, %arg0, %arg4) {layout = "NHWC"} : (tensor<2x5x3x4xf16>, tensor<2x5x3x4xf16>, tensor<4xf16>) -> tensor<2x4xf16>
// CHECK: "prim.layer_norm_backward"(%arg1, %arg0, %arg6) {{.*}}normalized_ndim = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK: "prim.layer_norm_backward"(%arg1, %arg0) {{.*}}operandSegmentSizes = array<i32: 1, 1, 0>}
func.func @norms(%x: tensor<2x5x3x4xf16>, %dy: tensor<2x5x3x4xf16>, %s: tensor<4xf16>, %b: tensor<4xf16>, %m: tensor<4xf16>,
                 %i: tensor<4xf16>, %ls: tensor<3x4xf16>)
    -> (tensor<2x5x3x4xf16>, tensor<2x4xf16>, tensor<2x5x3x4xf16>, tensor<2x4xf16>, tensor<2x5x3x4xf16>, tensor<2x5x3x4xf16>) {
  %y = "prim.batch_norm_training"(%x, %s, %b) {epsilon = 1.0e-5, layout = "NHWC"} : (tensor<2x5x3x4xf16>, tensor<4xf16>, tensor<4xf16>) -> tensor<2x5x3x4xf16>
  %st = "prim.batch_norm_statistics"(%x) {epsilon = 1.0e-5, layout = "NHWC"} : (tensor<2x5x3x4xf16>) -> tensor<2x4xf16>
  %dx = "prim.batch_norm_backward"(%dy, %x, %s, %m, %i) {layout = "NHWC"} : (tensor<2x5x3x4xf16>, tensor<2x5x3x4xf16>, tensor<4xf16>, tensor<4xf16>, tensor<4xf16>) -> tensor<2x5x3x4xf16>
  %sums = "prim.batch_norm_backward_sums"(%dy, %x, %m) {layout = "NHWC"} : (tensor<2x5x3x4xf16>, tensor<2x5x3x4xf16>, tensor<4xf16>) -> tensor<2x4xf16>
  %lx = "prim.layer_norm_backward"(%dy, %x, %ls) {epsilon = 1.0e-5, normalized_ndim = 2, operandSegmentSizes = array<i32: 1, 1, 1>} : (tensor<2x5x3x4xf16>, tensor<2x5x3x4xf16>, tensor<3x4xf16>) -> tensor<2x5x3x4xf16>
  %lx2 = "prim.layer_norm_backward"(%dy, %x) {epsilon = 1.0e-5, normalized_ndim = 1, operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x5x3x4xf16>, tensor<2x5x3x4xf16>) -> tensor<2x5x3x4xf16>
  return %y, %st, %dx, %sums, %lx, %lx2 : tensor<2x5x3x4xf16>, tensor<2x4xf16>, tensor<2x5x3x4xf16>, tensor<2x4xf16>, tensor<2x5x3x4xf16>, tensor<2x5x3x4xf16>
}

// CHECK-LABEL: func.func @elementwise_and_rows
// CHECK: "prim.activation_backward"(%arg1, %arg0) {activation = "clamp", activation_params = array<f64: 0.000000e+00, 6.000000e+00>}
// CHECK: "prim.softmax_backward"(%arg1, %arg0) {axis = -1 : i64}
// CHECK: "prim.log_softmax_backward"(%arg1, %arg0) {axis = 0 : i64}
// CHECK: "prim.cross_entropy"(%arg0, %arg2) : (tensor<5x7xbf16>, tensor<5xi64>) -> tensor<1xbf16>
// CHECK: "prim.cross_entropy_backward"(%arg0, %arg2, %arg3) {operandSegmentSizes = array<i32: 1, 1, 1>} : (tensor<5x7xbf16>, tensor<5xi64>, tensor<1xbf16>) -> tensor<5x7xbf16>
func.func @elementwise_and_rows(%x: tensor<5x7xbf16>, %dy: tensor<5x7xbf16>, %t: tensor<5xi64>, %g: tensor<1xbf16>)
    -> (tensor<5x7xbf16>, tensor<5x7xbf16>, tensor<5x7xbf16>, tensor<1xbf16>, tensor<5x7xbf16>) {
  %a = "prim.activation_backward"(%dy, %x) {activation = "clamp", activation_params = array<f64: 0.0, 6.0>} : (tensor<5x7xbf16>, tensor<5x7xbf16>) -> tensor<5x7xbf16>
  %s = "prim.softmax_backward"(%dy, %x) {axis = -1} : (tensor<5x7xbf16>, tensor<5x7xbf16>) -> tensor<5x7xbf16>
  %l = "prim.log_softmax_backward"(%dy, %x) {axis = 0} : (tensor<5x7xbf16>, tensor<5x7xbf16>) -> tensor<5x7xbf16>
  %c = "prim.cross_entropy"(%x, %t) : (tensor<5x7xbf16>, tensor<5xi64>) -> tensor<1xbf16>
  %d = "prim.cross_entropy_backward"(%x, %t, %g) {operandSegmentSizes = array<i32: 1, 1, 1>} : (tensor<5x7xbf16>, tensor<5xi64>, tensor<1xbf16>) -> tensor<5x7xbf16>
  return %a, %s, %l, %c, %d : tensor<5x7xbf16>, tensor<5x7xbf16>, tensor<5x7xbf16>, tensor<1xbf16>, tensor<5x7xbf16>
}

// CHECK-LABEL: func.func @pools
// CHECK: "prim.max_pool2d_backward"(%arg1, %arg0) {{.*}} : (tensor<1x5x4x2xf32>, tensor<1x9x7x2xf32>) -> tensor<1x9x7x2xf32>
// CHECK: "prim.avg_pool2d_backward"(%arg1) {{.*}}input_size = array<i64: 9, 7>{{.*}} : (tensor<1x5x4x2xf32>) -> tensor<1x9x7x2xf32>
func.func @pools(%x: tensor<1x9x7x2xf32>, %dy: tensor<1x5x4x2xf32>) -> (tensor<1x9x7x2xf32>, tensor<1x9x7x2xf32>) {
  %m = "prim.max_pool2d_backward"(%dy, %x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = 0, layout = "NHWC"} : (tensor<1x5x4x2xf32>, tensor<1x9x7x2xf32>) -> tensor<1x9x7x2xf32>
  %a = "prim.avg_pool2d_backward"(%dy) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, ceil_mode = 0, count_include_pad = 1, layout = "NHWC", input_size = array<i64: 9, 7>} : (tensor<1x5x4x2xf32>) -> tensor<1x9x7x2xf32>
  return %m, %a : tensor<1x9x7x2xf32>, tensor<1x9x7x2xf32>
}

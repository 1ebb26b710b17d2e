// The training ops run in NHWC like the forward ones (issue 31): a backward convolution's dy and x and a batch
// norm's dy and x are transposed in, a KCRS filter becomes KRSC, a filter gradient is computed KRSC and
// transposed back, per-channel statistics keep their [2, C] shape; dy's transpose is shared.
// RUN: openprim-opt %s -p prim-layout | filecheck %s

// CHECK-LABEL: func.func @conv_bwd
// CHECK-NEXT:  %[[DY:.+]] = "prim.transpose"(%arg1) {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x6x9x7xf32>) -> tensor<2x9x7x6xf32>
// CHECK-NEXT:  %[[W:.+]] = "prim.transpose"(%arg2) {perm = array<i64: 0, 2, 3, 1>} : (tensor<6x4x3x3xf32>) -> tensor<6x3x3x4xf32>
// CHECK-NEXT:  %[[DX:.+]] = "prim.conv2d_backward_data"(%[[DY]], %[[W]]) {{{.*}}filter_layout = "KRSC"{{.*}}layout = "NHWC"{{.*}}} : (tensor<2x9x7x6xf32>, tensor<6x3x3x4xf32>) -> tensor<2x9x7x4xf32>
// CHECK-NEXT:  %[[DXN:.+]] = "prim.transpose"(%[[DX]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x4x9x7xf32>) -> tensor<2x9x7x4xf32>
// CHECK-NEXT:  %[[DW:.+]] = "prim.conv2d_backward_weights"(%[[X]], %[[DY]]) {{{.*}}filter_layout = "KRSC"{{.*}}layout = "NHWC"{{.*}}} : (tensor<2x9x7x4xf32>, tensor<2x9x7x6xf32>) -> tensor<6x3x3x4xf32>
// CHECK-NEXT:  %[[DWN:.+]] = "prim.transpose"(%[[DW]]) {perm = array<i64: 0, 3, 1, 2>} : (tensor<6x3x3x4xf32>) -> tensor<6x4x3x3xf32>
// CHECK-NEXT:  return %[[DXN]], %[[DWN]]
func.func @conv_bwd(%x: tensor<2x4x9x7xf32>, %dy: tensor<2x6x9x7xf32>, %w: tensor<6x4x3x3xf32>) -> (tensor<2x4x9x7xf32>, tensor<6x4x3x3xf32>) {
  %dx = "prim.conv2d_backward_data"(%dy, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NCHW", filter_layout = "KCRS", input_size = array<i64: 9, 7>} : (tensor<2x6x9x7xf32>, tensor<6x4x3x3xf32>) -> tensor<2x4x9x7xf32>
  %dw = "prim.conv2d_backward_weights"(%x, %dy) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NCHW", filter_layout = "KCRS", filter_size = array<i64: 3, 3>} : (tensor<2x4x9x7xf32>, tensor<2x6x9x7xf32>) -> tensor<6x4x3x3xf32>
  return %dx, %dw : tensor<2x4x9x7xf32>, tensor<6x4x3x3xf32>
}

// A filter gradient asked for in RSCK has no layout to change: only its operands move.
// CHECK-LABEL: func.func @rsck_gradient
// CHECK:       "prim.conv2d_backward_weights"({{.*}}filter_layout = "RSCK"{{.*}}layout = "NHWC"{{.*}} -> tensor<3x3x4x6xf32>
// CHECK-NEXT:  return
func.func @rsck_gradient(%x: tensor<2x4x9x7xf32>, %dy: tensor<2x6x9x7xf32>) -> tensor<3x3x4x6xf32> {
  %dw = "prim.conv2d_backward_weights"(%x, %dy) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NCHW", filter_layout = "RSCK", filter_size = array<i64: 3, 3>} : (tensor<2x4x9x7xf32>, tensor<2x6x9x7xf32>) -> tensor<3x3x4x6xf32>
  return %dw : tensor<3x3x4x6xf32>
}

// CHECK-LABEL: func.func @bn_bwd
// CHECK-NEXT:  %[[DY:.+]] = "prim.transpose"(%arg1) {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NEXT:  %[[DX:.+]] = "prim.batch_norm_backward"(%[[DY]], %[[X]], %arg2, %arg3, %arg4) {layout = "NHWC"} : (tensor<2x3x5x4xf32>, tensor<2x3x5x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x5x4xf32>
// CHECK-NEXT:  %[[DXN:.+]] = "prim.transpose"(%[[DX]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  %[[ST:.+]] = "prim.batch_norm_statistics"(%[[X]]) {{{.*}}layout = "NHWC"} : (tensor<2x3x5x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:  return %[[DXN]], %[[ST]]
func.func @bn_bwd(%x: tensor<2x4x3x5xf32>, %dy: tensor<2x4x3x5xf32>, %s: tensor<4xf32>, %m: tensor<4xf32>, %i: tensor<4xf32>) -> (tensor<2x4x3x5xf32>, tensor<2x4xf32>) {
  %dx = "prim.batch_norm_backward"(%dy, %x, %s, %m, %i) {layout = "NCHW"} : (tensor<2x4x3x5xf32>, tensor<2x4x3x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x3x5xf32>
  %st = "prim.batch_norm_statistics"(%x) {epsilon = 1.0e-5, layout = "NCHW"} : (tensor<2x4x3x5xf32>) -> tensor<2x4xf32>
  return %dx, %st : tensor<2x4x3x5xf32>, tensor<2x4xf32>
}

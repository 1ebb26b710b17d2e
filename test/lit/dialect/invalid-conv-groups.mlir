// conv2d: groups must divide both channel counts (4 input channels, 6 filters, groups=4).
// The diagnostic is exactly one line, file:line:col of the op, naming the op; exit status 1.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// Passes verify their input first: the same diagnostic.
// RUN: not openprim-opt %s -p prim-fuse 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-conv-groups.mlir:[[# @LINE + 3]]:8: error: 'prim.conv2d' op groups=4 must divide input channels 4 and output channels 6{{$}}
// CHECK-NOT: {{.}}
func.func @f(%x: tensor<1x4x4x4xf32>, %w: tensor<6x1x1x1xf32>) -> tensor<1x6x4x4xf32> {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>, groups = 4} : (tensor<1x4x4x4xf32>, tensor<6x1x1x1xf32>) -> tensor<1x6x4x4xf32>
  return %y : tensor<1x6x4x4xf32>
}

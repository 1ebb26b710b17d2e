// An attribute of the wrong kind (groups = "one", a string, where an i64 is required) is rejected when
// IRDL verifies the parsed module.
// FIXME: the one-line diagnostic names neither the op nor the attribute (MLIR puts the op in a note,
// which openprim-opt drops); invalid-attr-kind-names-op.mlir expects the op name and is XFAIL.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-attr-kind.mlir:[[# @LINE + 3]]:8: error: {{.*}}expected base attribute 'builtin.integer' but got 'builtin.string'{{$}}
// CHECK-NOT: {{.}}
func.func @f(%x: tensor<1x4x4x4xf32>, %w: tensor<6x4x1x1xf32>) -> tensor<1x6x4x4xf32> {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>, groups = "one"} : (tensor<1x4x4x4xf32>, tensor<6x4x1x1xf32>) -> tensor<1x6x4x4xf32>
  return %y : tensor<1x6x4x4xf32>
}

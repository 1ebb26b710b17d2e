// The wrong-attribute-kind diagnostic should name the op, as every other prim diagnostic does.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-attr-kind-names-op.mlir:[[# @LINE + 2]]:8: error: {{.*}}'prim.conv2d'{{.*}}builtin.integer
func.func @f(%x: tensor<1x4x4x4xf32>, %w: tensor<6x4x1x1xf32>) -> tensor<1x6x4x4xf32> {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>, groups = "one"} : (tensor<1x4x4x4xf32>, tensor<6x4x1x1xf32>) -> tensor<1x6x4x4xf32>
  return %y : tensor<1x6x4x4xf32>
}

// --print-ir-after-all dumps the module after every pass (ours and upstream ones) on stderr, with
// MLIR's headers, then the result is printed as usual.
// RUN: openprim-opt %s -p prim-fuse,prim-select,canonicalize --print-ir-after-all 2>&1 | filecheck %s

// CHECK:      // -----// IR Dump After prim-fuse {{.*}}//----- //
// CHECK-NEXT: module {
// CHECK:      "prim.conv2d"{{.*}}activation = "relu"
// CHECK-NOT:  prim.solver
// CHECK:      // -----// IR Dump After prim-select {{.*}}//----- //
// CHECK-NEXT: module {
// CHECK:      "prim.conv2d"{{.*}}prim.solver = "conv_{{[a-z_0-9]+}}"
// CHECK:      // -----// IR Dump After Canonicalizer (canonicalize) {{.*}}//----- //
// CHECK-NEXT: module {
// The result, after the dumps.
// CHECK:      {{^}}module {
// CHECK:      "prim.conv2d"{{.*}}prim.solver = "conv_{{[a-z_0-9]+}}"
// CHECK-NOT:  IR Dump
func.func @conv_bias_relu(%x: tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
  %b = "prim.constant"() {value = dense<[[[0.5]], [[-0.5]]]> : tensor<2x1x1xf32>} : () -> tensor<2x1x1xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %a = "prim.add"(%c, %b) : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %r = "prim.relu"(%a) : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  return %r : tensor<1x2x3x3xf32>
}

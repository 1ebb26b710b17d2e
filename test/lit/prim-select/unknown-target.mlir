// prim-select with an unknown target should fail with one error line, like prim-tile and prim-lower
// ("unknown target 'gpu' (this build supports: cpu)").
// RUN: not openprim-opt %s -p 'prim-select{target=gpu}' 2>&1 | filecheck %s
// CHECK-NOT:  Traceback
// CHECK:      {{^.*}}unknown target 'gpu'{{.*$}}
// CHECK-NOT:  {{.}}
func.func @main(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %y = "prim.matmul"(%a, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// prim.attention's shape rule: key and value must have the same shape.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: error: 'prim.attention' op key 1x2x9x16 and value 1x2x9x8 must have the same shape
func.func @bad(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x9x16xf32>, %v: tensor<1x2x9x8xf32>) -> tensor<1x2x8x16xf32> {
  %o = "prim.attention"(%q, %k, %v) {scale = 0.25 : f64, causal = 0 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 0>}
      : (tensor<1x2x8x16xf32>, tensor<1x2x9x16xf32>, tensor<1x2x9x8xf32>) -> tensor<1x2x8x16xf32>
  return %o : tensor<1x2x8x16xf32>
}

// prim-decompose: prim.attention on a target without an attention kernel (the CPU, and f32 anywhere) becomes
// matmul(q * scale, k^T) -> mask add -> causal add -> softmax -> matmul(p, v), the scale on q where q is no
// larger than the scores (D <= Sk), else on the scores.
// RUN: openprim-opt %s -p 'prim-decompose{target=cpu}' | filecheck %s
// RUN: openprim-opt %s -p 'prim-decompose{target=nvvm:sm_90}' | filecheck %s --check-prefix=F32GPU

// D = 4 <= Sk = 7: the scale on q.
// CHECK-LABEL: func.func @causal_masked
// CHECK:      %[[C:.+]] = "prim.constant"() {value = dense<2.500000e-01> : tensor<f32>}
// CHECK-NEXT: %[[Q:.+]] = "prim.mul"(%arg0, %[[C]]) : (tensor<2x3x5x4xf32>, tensor<f32>) -> tensor<2x3x5x4xf32>
// CHECK-NEXT: %[[S:.+]] = "prim.matmul"(%[[Q]], %arg1)
// CHECK-SAME: transpose_rhs = 1
// CHECK-SAME: -> tensor<2x3x5x7xf32>
// CHECK-NEXT: %[[M:.+]] = "prim.add"(%[[S]], %arg3)
// CHECK-NEXT: %[[T:.+]] = "prim.constant"() {value = dense<{{\[\[}}0.000000e+00, 0xFF800000, 0xFF800000
// CHECK-SAME: tensor<5x7xf32>
// CHECK-NEXT: %[[Y:.+]] = "prim.add"(%[[M]], %[[T]])
// CHECK-NEXT: %[[P:.+]] = "prim.softmax"(%[[Y]]) {axis = -1 : i64}
// CHECK-NEXT: %[[O:.+]] = "prim.matmul"(%[[P]], %arg2)
// CHECK-SAME: transpose_rhs = 0
// CHECK-SAME: -> tensor<2x3x5x4xf32>
// CHECK-NEXT: return %[[O]]
// F32GPU-LABEL: func.func @causal_masked
// F32GPU-NOT: prim.attention
func.func @causal_masked(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x7x4xf32>, %v: tensor<2x3x7x4xf32>,
                         %m: tensor<1x3x5x7xf32>) -> tensor<2x3x5x4xf32> {
  %o = "prim.attention"(%q, %k, %v, %m) {scale = 0.25 : f64, causal = 1 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 1>}
      : (tensor<2x3x5x4xf32>, tensor<2x3x7x4xf32>, tensor<2x3x7x4xf32>, tensor<1x3x5x7xf32>) -> tensor<2x3x5x4xf32>
  return %o : tensor<2x3x5x4xf32>
}

// Neither mask nor causal; D = 8 > Sk = 3: the scale on the scores, between the products.
// CHECK-LABEL: func.func @plain
// CHECK:      "prim.matmul"
// CHECK-NEXT: "prim.constant"
// CHECK-NEXT: "prim.mul"
// CHECK-NEXT: "prim.softmax"
// CHECK-NEXT: "prim.matmul"
// CHECK-NOT:  prim.attention
func.func @plain(%q: tensor<1x1x3x8xf32>, %k: tensor<1x1x3x8xf32>, %v: tensor<1x1x3x8xf32>) -> tensor<1x1x3x8xf32> {
  %o = "prim.attention"(%q, %k, %v) {scale = 0.5 : f64, causal = 0 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 0>}
      : (tensor<1x1x3x8xf32>, tensor<1x1x3x8xf32>, tensor<1x1x3x8xf32>) -> tensor<1x1x3x8xf32>
  return %o : tensor<1x1x3x8xf32>
}

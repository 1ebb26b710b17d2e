// prim-fuse: GELU's tanh approximation written out (GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x +
// 0.044715 x^3)))) becomes gelu(x, approximate = "tanh"), which then folds into the matmul before it as its
// activation; x^3 as pow(x, 3). A constant off the formula leaves the ops as they are.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// CHECK-LABEL: func.func @mlp_gelu_new
// CHECK:      %[[M:.+]] = "prim.matmul"(%arg0, %{{.+}}) {activation = "gelu_tanh"
// CHECK-NOT:  prim.tanh
// CHECK-NOT:  prim.pow
// CHECK:      return %[[M]]
func.func @mlp_gelu_new(%x: tensor<4x8xf32>) -> tensor<4x16xf32> {
  %w = "prim.constant"() {value = dense<0.25> : tensor<8x16xf32>} : () -> tensor<8x16xf32>
  %h = "prim.matmul"(%x, %w) {transpose_rhs = 0 : i64, activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %half = "prim.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %three = "prim.constant"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
  %k = "prim.constant"() {value = dense<0.044715> : tensor<f32>} : () -> tensor<f32>
  %r = "prim.constant"() {value = dense<0.797884583> : tensor<f32>} : () -> tensor<f32>
  %one = "prim.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %a = "prim.mul"(%half, %h) : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %p = "prim.pow"(%h, %three) : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %b = "prim.mul"(%k, %p) : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %c = "prim.add"(%h, %b) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %d = "prim.mul"(%r, %c) : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %t = "prim.tanh"(%d) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %e = "prim.add"(%one, %t) : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = "prim.mul"(%a, %e) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// 0.05 in place of 0.044715: not GELU; the ops stay (one fused elementwise function).
// CHECK-LABEL: func.func @other_constant
// CHECK-NOT:  prim.gelu
// CHECK:      return
func.func @other_constant(%h: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %half = "prim.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %three = "prim.constant"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
  %k = "prim.constant"() {value = dense<0.05> : tensor<f32>} : () -> tensor<f32>
  %r = "prim.constant"() {value = dense<0.797884583> : tensor<f32>} : () -> tensor<f32>
  %one = "prim.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %a = "prim.mul"(%half, %h) : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %p = "prim.pow"(%h, %three) : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %b = "prim.mul"(%k, %p) : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %c = "prim.add"(%h, %b) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %d = "prim.mul"(%r, %c) : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %t = "prim.tanh"(%d) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %e = "prim.add"(%one, %t) : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = "prim.mul"(%a, %e) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// An f16 model's constants are the formula's rounded to f16 (0.044715 -> 0.0447083, sqrt(2/pi) ->
// 0.797852): still GELU, folded into the matmul.
// CHECK-LABEL: func.func @f16_constants
// CHECK:      %[[M:.+]] = "prim.matmul"(%arg0, %{{.+}}) {activation = "gelu_tanh"
// CHECK-NOT:  prim.tanh
// CHECK:      return %[[M]]
func.func @f16_constants(%x: tensor<4x8xf16>) -> tensor<4x16xf16> {
  %w = "prim.constant"() {value = dense<0.25> : tensor<8x16xf16>} : () -> tensor<8x16xf16>
  %h = "prim.matmul"(%x, %w) {transpose_rhs = 0 : i64, activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<4x8xf16>, tensor<8x16xf16>) -> tensor<4x16xf16>
  %half = "prim.constant"() {value = dense<0.5> : tensor<f16>} : () -> tensor<f16>
  %three = "prim.constant"() {value = dense<3.0> : tensor<f16>} : () -> tensor<f16>
  %k = "prim.constant"() {value = dense<4.470830e-02> : tensor<f16>} : () -> tensor<f16>
  %r = "prim.constant"() {value = dense<7.978520e-01> : tensor<f16>} : () -> tensor<f16>
  %one = "prim.constant"() {value = dense<1.0> : tensor<f16>} : () -> tensor<f16>
  %a = "prim.mul"(%h, %half) : (tensor<4x16xf16>, tensor<f16>) -> tensor<4x16xf16>
  %p = "prim.pow"(%h, %three) : (tensor<4x16xf16>, tensor<f16>) -> tensor<4x16xf16>
  %b = "prim.mul"(%p, %k) : (tensor<4x16xf16>, tensor<f16>) -> tensor<4x16xf16>
  %c = "prim.add"(%h, %b) : (tensor<4x16xf16>, tensor<4x16xf16>) -> tensor<4x16xf16>
  %d = "prim.mul"(%c, %r) : (tensor<4x16xf16>, tensor<f16>) -> tensor<4x16xf16>
  %t = "prim.tanh"(%d) : (tensor<4x16xf16>) -> tensor<4x16xf16>
  %e = "prim.add"(%t, %one) : (tensor<4x16xf16>, tensor<f16>) -> tensor<4x16xf16>
  %y = "prim.mul"(%a, %e) : (tensor<4x16xf16>, tensor<4x16xf16>) -> tensor<4x16xf16>
  return %y : tensor<4x16xf16>
}

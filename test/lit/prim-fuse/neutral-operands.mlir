// x + 0, 0 + x, x - 0, x * 1, x / 1 are x (neutral_operands.py); 0 - x, x + 0.5 and a zero that broadcasts
// x to a larger shape stay ops.
// RUN: openprim-opt %s -p prim-fuse{elementwise=false} | filecheck %s

// CHECK-LABEL: func.func @neutral
// CHECK-NOT:  prim.add
// CHECK-NOT:  prim.mul
// CHECK-NOT:  prim.div
// CHECK:      %[[Y:.+]] = "prim.sub"(%arg0, %{{.+}})
// CHECK-NOT:  prim.add
// CHECK:      return %arg0, %[[Y]]
func.func @neutral(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %zero = "prim.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %zeros = "prim.constant"() {value = dense<0.0> : tensor<3xf32>} : () -> tensor<3xf32>
  %one = "prim.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %half = "prim.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %a = "prim.add"(%x, %zero) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %b = "prim.add"(%zeros, %a) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %c = "prim.sub"(%b, %zero) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %d = "prim.mul"(%one, %c) : (tensor<f32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %e = "prim.div"(%d, %one) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %f = "prim.sub"(%e, %half) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  return %e, %f : tensor<2x3xf32>, tensor<2x3xf32>
}

// CHECK-LABEL: func.func @kept
// CHECK:      "prim.sub"(%{{.+}}, %arg0)
// CHECK:      "prim.add"(%arg0, %{{.+}}) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK:      "prim.div"(%{{.+}}, %arg0)
func.func @kept(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<2x3xf32>, tensor<3xf32>) {
  %zero = "prim.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %zeros = "prim.constant"() {value = dense<0.0> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %one = "prim.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %a = "prim.sub"(%zero, %x) : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  %b = "prim.add"(%x, %zeros) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %c = "prim.div"(%one, %x) : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  return %a, %b, %c : tensor<3xf32>, tensor<2x3xf32>, tensor<3xf32>
}

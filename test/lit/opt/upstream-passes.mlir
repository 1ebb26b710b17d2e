// Upstream MLIR passes mix with ours in one pipeline: symbol-dce drops the unused private function
// before prim-fuse outlines the tanh -> relu chain into @fused_0.
// RUN: openprim-opt %s -p symbol-dce,prim-fuse | filecheck %s
// CHECK-NOT:   @unused
// CHECK:       func.func private @fused_0(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {prim.fused}
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:  call @fused_0(%arg0)
// CHECK-NOT:   @unused
func.func private @unused(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "prim.tanh"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "prim.relu"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

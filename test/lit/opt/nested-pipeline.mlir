// Op-anchored upstream pipelines, as mlir-opt spells them (func.func(...), builtin.module(...)).
// `builtin.module(...)` at the top applies to the whole module, as with mlir-opt.
// RUN: openprim-opt %s -p 'prim-fuse,func.func(canonicalize),builtin.module(symbol-dce)' | filecheck %s
// CHECK-NOT:   @unused
// CHECK:       func.func private @fused_0
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:  call @fused_0(%arg0)
func.func private @unused(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "prim.tanh"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "prim.relu"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

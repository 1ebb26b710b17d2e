// Chains of elementwise ops (each intermediate used once) -> a private function marked prim.fused
// holding the chain, and a call to it in the graph (one kernel later). Fused functions are numbered in
// module order and placed before the graph function that calls them.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// CHECK-LABEL: func.func private @fused_0(%arg0: tensor<2x3xf32>, %arg1: tensor<3xf32>) -> tensor<2x3xf32> attributes {prim.fused} {
// CHECK-NEXT:   %[[A:.+]] = "prim.relu"(%arg0)
// CHECK-NEXT:   %[[B:.+]] = "prim.mul"(%[[A]], %arg1) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:   %[[C:.+]] = "prim.sigmoid"(%[[B]])
// CHECK-NEXT:   return %[[C]] : tensor<2x3xf32>
// CHECK-NEXT: }
// CHECK-LABEL: func.func @chain(%arg0: tensor<2x3xf32>, %arg1: tensor<3xf32>) -> tensor<2x3xf32> {
// CHECK-NEXT:   %[[R:.+]] = call @fused_0(%arg0, %arg1) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:   return %[[R]]
// CHECK-NEXT: }
func.func @chain(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = "prim.relu"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "prim.mul"(%0, %y) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %2 = "prim.sigmoid"(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %2 : tensor<2x3xf32>
}

// A non-elementwise op (softmax) splits two chains: two fused functions, softmax between the calls.
// CHECK-LABEL: func.func private @fused_1(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {prim.fused} {
// CHECK-NEXT:   "prim.tanh"
// CHECK-NEXT:   "prim.silu"
// CHECK-NEXT:   return
// CHECK-LABEL: func.func private @fused_2(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> attributes {prim.fused} {
// CHECK-NEXT:   "prim.sub"(%arg0, %arg1)
// CHECK-NEXT:   "prim.elu"
// CHECK-NEXT:   return
// CHECK-LABEL: func.func @two_chains
// CHECK-NEXT:   %[[A:.+]] = call @fused_1(%arg0)
// CHECK-NEXT:   %[[S:.+]] = "prim.softmax"(%[[A]])
// CHECK-NEXT:   %[[B:.+]] = call @fused_2(%[[S]], %arg0)
// CHECK-NEXT:   return %[[B]]
func.func @two_chains(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "prim.tanh"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "prim.silu"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %s = "prim.softmax"(%1) {axis = 0} : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "prim.sub"(%s, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = "prim.elu"(%2) {alpha = 1.0} : (tensor<4xf32>) -> tensor<4xf32>
  return %3 : tensor<4xf32>
}

// A tree (two producers joined by an add) is one group too.
// CHECK-LABEL: func.func private @fused_3(%arg0: tensor<4xf16>) -> tensor<4xf16> attributes {prim.fused} {
// CHECK-DAG:    %[[R:.+]] = "prim.relu"(%arg0)
// CHECK-DAG:    %[[T:.+]] = "prim.tanh"(%arg0)
// CHECK:        %[[S:.+]] = "prim.add"(%[[R]], %[[T]])
// CHECK-NEXT:   return %[[S]]
// CHECK-LABEL: func.func @tree
// CHECK-NEXT:   call @fused_3(%arg0) : (tensor<4xf16>) -> tensor<4xf16>
// CHECK-NEXT:   return
func.func @tree(%x: tensor<4xf16>) -> tensor<4xf16> {
  %0 = "prim.relu"(%x) : (tensor<4xf16>) -> tensor<4xf16>
  %1 = "prim.tanh"(%x) : (tensor<4xf16>) -> tensor<4xf16>
  %2 = "prim.add"(%0, %1) : (tensor<4xf16>, tensor<4xf16>) -> tensor<4xf16>
  return %2 : tensor<4xf16>
}

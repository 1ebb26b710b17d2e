// Two identical prim-fuse'd elementwise chains (tanh -> sigmoid on 2x8) become one kernel called
// twice; the private @fused_N helpers are gone after lowering.
// RUN: openprim-opt %s -p prim-fuse,prim-lower | filecheck %s

// CHECK:       func.func private @fused_elementwise_0(tensor<2x8xf32>) -> tensor<2x8xf32> attributes {prim.kernel}
// CHECK-NOT:   @fused_
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:  %[[A:.+]] = call @fused_elementwise_0(%arg0)
// CHECK-NEXT:  %[[B:.+]] = call @fused_elementwise_0(%arg1)
// CHECK-NEXT:  return %[[A]], %[[B]]
// CHECK:       module @kernels
// CHECK-COUNT-1: llvm.func @fused_elementwise_0(%arg0: !llvm.ptr, %arg1: !llvm.ptr) attributes {prim.in_place = [0], prim.op = "fused_elementwise"}
// CHECK-NOT:   llvm.func
func.func @main(%x: tensor<2x8xf32>, %y: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %0 = "prim.tanh"(%x) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %1 = "prim.sigmoid"(%0) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %2 = "prim.tanh"(%y) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %3 = "prim.sigmoid"(%2) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %1, %3 : tensor<2x8xf32>, tensor<2x8xf32>
}

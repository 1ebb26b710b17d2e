// prim-lower alone: every prim op becomes a reference kernel, lowered to the LLVM dialect inside
// `module @kernels` with the bare-pointer convention (void kernel(T *in0, ..., T *out)); the graph
// keeps func.func declarations {prim.kernel} and calls. Identical ops (same op, shapes, attributes)
// share one kernel: two 2x8 relus -> one @relu_0 called twice; the 8-element relu is another kernel.
// RUN: openprim-opt %s -p prim-lower | filecheck %s

// CHECK:       func.func private @relu_0(tensor<2x8xf32>) -> tensor<2x8xf32> attributes {prim.kernel}
// CHECK-NEXT:  func.func private @relu_1(tensor<8xf32>) -> tensor<8xf32> attributes {prim.kernel}
// CHECK-NEXT:  func.func private @softmax_2(tensor<2x8xf32>) -> tensor<2x8xf32> attributes {prim.kernel}
// CHECK-NOT:   func.func private
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:  %[[A:.+]] = call @relu_0(%arg0) : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:  %[[B:.+]] = call @relu_0(%arg1) : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:  %[[C:.+]] = call @relu_1(%arg2) : (tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT:  %[[D:.+]] = call @softmax_2(%[[B]]) : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:  return %[[A]], %[[D]], %[[C]]
// CHECK-NEXT:  }

// No func.func (and no memref) is left in the kernels module: only llvm.func.
// CHECK-NEXT:  module @kernels attributes {{[{].*}}prim.target = "cpu"} {
// CHECK-NOT:   func.func
// CHECK-NOT:   memref<
// CHECK:       llvm.func @relu_0(%arg0: !llvm.ptr, %arg1: !llvm.ptr) attributes {prim.in_place = [0], prim.op = "relu"} {
// CHECK:       llvm.intr.maximum
// CHECK:       llvm.return
// CHECK-NOT:   func.func
// CHECK:       llvm.func @relu_1(%arg0: !llvm.ptr, %arg1: !llvm.ptr) attributes {prim.in_place = [0], prim.op = "relu"} {
// CHECK-NOT:   func.func
// CHECK:       llvm.func @softmax_2(%arg0: !llvm.ptr, %arg1: !llvm.ptr) attributes {prim.op = "softmax"} {
// CHECK:       llvm.intr.exp
// CHECK-NOT:   func.func
// CHECK-NOT:   llvm.func @relu
func.func @main(%x: tensor<2x8xf32>, %y: tensor<2x8xf32>, %z: tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32>) {
  %0 = "prim.relu"(%x) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %1 = "prim.relu"(%y) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %2 = "prim.relu"(%z) : (tensor<8xf32>) -> tensor<8xf32>
  %3 = "prim.softmax"(%1) {axis = 1} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %0, %3, %2 : tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32>
}

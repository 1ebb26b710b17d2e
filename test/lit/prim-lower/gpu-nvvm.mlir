// prim-lower{target=nvvm:sm_90}: every kernel function keeps only its host side, scratch buffers
// (memref.alloc) and `gpu.launch_func @device::@...` with constant grid and block sizes (the launch
// plan), and the device code of all kernels is one `gpu.binary @device` holding PTX for sm_90a (sm_90 compiles with its wgmma and TMA) with an
// `.entry` per launched function. The graph keeps its calls on tensors.
// RUN: openprim-opt %s -p 'prim-lower{target=nvvm:sm_90}' | filecheck %s

// CHECK-LABEL: func.func @main(
// CHECK-NEXT:  %[[R:.+]] = call @relu_0(%arg0) : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:  %[[S:.+]] = call @softmax_1(%[[R]]) : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:  return %[[S]]

// CHECK:       module @kernels attributes {gpu.container_module, prim.target = "nvvm:sm_90"} {
// CHECK-NEXT:  func.func @relu_0(%arg0: memref<2x8xf32>, %arg1: memref<2x8xf32>) attributes {prim.op = "relu"} {
// CHECK-NEXT:  %[[ONE:.+]] = arith.constant 1 : index
// CHECK-NEXT:  %[[T32:.+]] = arith.constant 32 : index
// CHECK-NEXT:  gpu.launch_func @device::@relu_0_kernel blocks in (%[[ONE]], %[[ONE]], %[[ONE]]) threads in (%[[T32]], %[[ONE]], %[[ONE]]) args(%arg0 : memref<2x8xf32>, %arg1 : memref<2x8xf32>)
// CHECK-NEXT:  return

// The softmax reductions (row max, row sum) go through two scratch buffers, one launch per loop nest.
// CHECK:       func.func @softmax_1(%arg0: memref<2x8xf32>, %arg1: memref<2x8xf32>) attributes {prim.op = "softmax"} {
// CHECK-COUNT-2: arith.constant {{[0-9]+}} : index
// CHECK-COUNT-2: memref.alloc() {{.*}}: memref<2xf32>
// CHECK-NEXT:  gpu.launch_func @device::@softmax_1_kernel blocks in (%{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}) threads in
// CHECK-COUNT-4: gpu.launch_func @device::@softmax_1_kernel_{{[0-9]}} blocks in
// CHECK-NEXT:  return
// CHECK-NEXT:  }
// CHECK-NOT:   func.func
// CHECK-NOT:   gpu.module
// CHECK:       gpu.binary @device {{.*}}[#gpu.object<#nvvm.target<O = 3, chip = "sm_90a">
// CHECK-SAME:  assembly = "{{.*}}.target sm_90a
// CHECK-SAME:  .visible .entry relu_0_kernel(
// CHECK-SAME:  .visible .entry softmax_1_kernel(
// CHECK-SAME:  .visible .entry softmax_1_kernel_3(
// CHECK-NOT:   gpu.module
func.func @main(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = "prim.relu"(%x) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %1 = "prim.softmax"(%0) {axis = 1} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %1 : tensor<2x8xf32>
}

// prim-lower{target=rocdl:gfx942}: the same host side as for nvvm (allocs and gpu.launch_func with
// constant sizes), and one `gpu.binary @device` whose object is a linked AMDGPU code object (an ELF;
// its bytes are checked by test/python/test_gpu_targets.py) for the gfx942 target.
// REQUIRES: amdgpu-toolchain
// RUN: openprim-opt %s -p 'prim-lower{target=rocdl:gfx942}' | filecheck %s

// CHECK:       module @kernels attributes {gpu.container_module, prim.target = "rocdl:gfx942"} {
// CHECK-NEXT:  func.func @relu_0(%arg0: memref<2x8xf32>, %arg1: memref<2x8xf32>) attributes {prim.op = "relu"} {
// CHECK-NEXT:  %[[ONE:.+]] = arith.constant 1 : index
// CHECK-NEXT:  %[[T32:.+]] = arith.constant 32 : index
// CHECK-NEXT:  gpu.launch_func @device::@relu_0_kernel blocks in (%[[ONE]], %[[ONE]], %[[ONE]]) threads in (%[[T32]], %[[ONE]], %[[ONE]]) args(%arg0 : memref<2x8xf32>, %arg1 : memref<2x8xf32>)
// CHECK-NEXT:  return
// CHECK:       func.func @softmax_1(
// CHECK-COUNT-5: gpu.launch_func @device::@softmax_1_kernel
// CHECK-NEXT:  return
// CHECK-NOT:   func.func
// CHECK-NOT:   gpu.module
// CHECK:       gpu.binary @device {{.*}}[#gpu.object<#rocdl.target<chip = "gfx942">, bin = "\7FELF
// CHECK-NOT:   gpu.module
func.func @main(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = "prim.relu"(%x) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %1 = "prim.softmax"(%0) {axis = 1} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %1 : tensor<2x8xf32>
}

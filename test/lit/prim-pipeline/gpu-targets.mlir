// prim-pipeline{target=nvvm:sm_90} on conv + bias + relu (NCHW): fused into one convolution run in
// NHWC between two transposes; the convolution gets the GPU solver's own kernel, the transposes the
// generic grid mapping. Every kernel is lowered to launches, no prim compute op is left, and all the
// device code is one gpu.binary with an `.entry` per launched function.
// RUN: openprim-opt %s -p 'prim-pipeline{target=nvvm:sm_90}' | filecheck %s

// CHECK-LABEL: func.func @main(
// CHECK-NOT:   "prim.{{(conv2d|relu|transpose)}}"
// CHECK:       call @transpose_0(%arg0)
// CHECK:       call @conv2d_1(
// CHECK-NEXT:  call @transpose_2(
// CHECK-NEXT:  return

// CHECK:       module @kernels attributes {gpu.container_module, prim.target = "nvvm:sm_90"} {
// CHECK-NEXT:  func.func @transpose_0(%arg0: memref<1x4x8x8xf32>, %arg1: memref<1x8x8x4xf32>) attributes {prim.op = "transpose"} {
// CHECK-NOT:   scf.
// CHECK:       gpu.launch_func @device::@transpose_0_kernel blocks in
// CHECK-NEXT:  return
// CHECK:       func.func @conv2d_1(%arg0: memref<1x8x8x4xf32>, %arg1: memref<3x3x4x8xf32>, %arg2: memref<8xf32>, %arg3: memref<1x8x8x8xf32>) attributes {prim.op = "conv2d", prim.solver = "{{[a-z0-9_]+}}"} {
// CHECK-NOT:   scf.
// CHECK:       gpu.launch_func @device::@conv2d_1_kernel{{(_[0-9]+)?}} blocks in
// CHECK:       return
// CHECK:       func.func @transpose_2(
// CHECK-NOT:   scf.
// CHECK:       gpu.launch_func @device::@transpose_2_kernel blocks in
// CHECK-NEXT:  return
// CHECK-NOT:   func.func
// CHECK-NOT:   "prim.
// CHECK-NOT:   gpu.module
// CHECK-COUNT-1: gpu.binary @device {{.*}}#nvvm.target<O = 3, chip = "sm_90a">
// CHECK-SAME:  .entry transpose_0_kernel(
// CHECK-SAME:  .entry conv2d_1_kernel
// CHECK-SAME:  .entry transpose_2_kernel(
// CHECK-NOT:   gpu.binary
// CHECK-NOT:   gpu.module
func.func @main(%x: tensor<1x4x8x8xf32>) -> tensor<1x8x8x8xf32> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<8x4x3x3xf32>} : () -> tensor<8x4x3x3xf32>
  %b = "prim.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<8xf32>} : () -> tensor<8xf32>
  %c = "prim.conv2d"(%x, %w, %b) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x8x8xf32>
  %r = "prim.relu"(%c) : (tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  return %r : tensor<1x8x8x8xf32>
}

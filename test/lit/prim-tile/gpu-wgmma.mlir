// sm_90: f16/bf16 stride-1 convolutions and matmuls run on warpgroup MMA (kernels/nvidia/wgmma.py). The host makes
// TMA tensor maps over the NHWC input (a 4-d box of images x rows x columns x 64 channels: here the
// 64-row tile as 1 x 4 x 16 pixels) and the RSCK filter (1 x 1 x 64 x 64); the kernel takes
// dynamic shared memory above 48 KB, inits one mbarrier per stage, and per k tile waits on its slot's
// barrier, multiplies with nvgpu.warpgroup.mma (B n-contiguous: transposeB) and refills the slot the
// previous tile used; the accumulators go through shared memory to the fused epilogue.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s
// In the PTX, 4-d and 2-d bulk tensor copies complete on mbarriers, and wgmma is m64nNk16.
// RUN: openprim-opt %s -p 'prim-pipeline{target=nvvm:sm_90}' | filecheck %s --check-prefix=PTX
// A stride-2 convolution reads its box with TMA element strides (1 x 2 x 2 x 1: the box spans twice the
// rows and columns it lands as). On sm_80 every one keeps mma.sync.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_80}' | filecheck %s --check-prefix=SM80

// CHECK-LABEL: func.func @conv2d_0(
// CHECK-SAME:  prim.solver = "conv_implicit_gemm_wgmma"
// CHECK:       %[[X:.+]] = memref.cast %{{.+}} : memref<2x9x9x64xf16> to memref<*xf16>
// CHECK:       nvgpu.tma.create.descriptor %[[X]] box[%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}] : memref<*xf16> -> <tensor = memref<1x4x16x64xf16, 3>, swizzle = swizzle_128b
// CHECK:       nvgpu.tma.create.descriptor %{{.+}} : memref<*xf16> -> <tensor = memref<1x1x64x64xf16, 3>
// CHECK:       gpu.launch {{.*}} dynamic_shared_memory_size
// CHECK:       nvgpu.mbarrier.create -> <memorySpace = #gpu.address_space<workgroup>, num_barriers = [[S:[0-9]+]]>
// CHECK:       nvgpu.mbarrier.init
// CHECK:       nvgpu.mbarrier.arrive.expect_tx
// CHECK:       nvgpu.tma.async.load {{.*}} -> memref<1x4x16x64xf16, #gpu.address_space<workgroup>>
// CHECK:       nvgpu.tma.async.load {{.*}} -> memref<1x1x64x64xf16, #gpu.address_space<workgroup>>
// CHECK:       nvgpu.warpgroup.mma.init.accumulator
// CHECK:       scf.for
// CHECK:       nvgpu.mbarrier.try_wait.parity
// CHECK:       nvgpu.warpgroup.generate.descriptor
// CHECK:       nvgpu.warpgroup.mma {{.*}} {transposeB}
// CHECK:       scf.yield
// CHECK:       nvvm.wgmma.wait.group.sync.aligned 0
// CHECK:       nvgpu.warpgroup.mma.store
// CHECK:       arith.maximumf
// CHECK:       vector.store {{.*}} : memref<162x24xf16>, vector<8xf16>

// CHECK-LABEL: func.func @conv2d_1(
// CHECK-SAME:  prim.solver = "conv_implicit_gemm_wgmma"
// CHECK:       nvgpu.tma.create.descriptor {{.*}} {openprim.element_strides = array<i64: 1, 2, 2, 1>} : memref<*xf16> -> <tensor = memref<{{[0-9]+}}x{{[0-9]+}}x{{[0-9]+}}x64xf16, 3>

// CHECK-LABEL: func.func @matmul_2(
// CHECK-SAME:  prim.solver = "gemm_wgmma"
// CHECK:       memref.collapse_shape
// CHECK:       nvgpu.tma.create.descriptor {{.*}} -> <tensor = memref<{{64|128}}x64xbf16, 3>
// CHECK:       nvgpu.tma.create.descriptor {{.*}} -> <tensor = memref<64x64xbf16, 3>
// CHECK:       nvgpu.warpgroup.mma

// PTX:         gpu.binary @device
// PTX-SAME:    .target sm_90a
// PTX-SAME:    cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes
// PTX-SAME:    mbarrier.try_wait.parity.shared.b64
// PTX-SAME:    wgmma.mma_async.sync.aligned.m64n{{[0-9]+}}k16.f32.f16.f16
// PTX-SAME:    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes
// PTX-SAME:    wgmma.mma_async.sync.aligned.m64n{{[0-9]+}}k16.f32.bf16.bf16

// SM80:        prim.solver = "conv_implicit_gemm_mma"
// SM80:        prim.solver = "conv_implicit_gemm_mma"
// SM80:        prim.solver = "gemm_mma"
module {
  func.func @net(%x: tensor<2x9x9x64xf16>, %a: tensor<3x40x96xbf16>) -> (tensor<2x9x9x24xf16>, tensor<2x5x5x24xf16>, tensor<3x40x72xbf16>) {
    %w = "prim.constant"() {value = dense<0.5> : tensor<24x3x3x64xf16>} : () -> tensor<24x3x3x64xf16>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "relu", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x9x64xf16>, tensor<24x3x3x64xf16>) -> tensor<2x9x9x24xf16>
    %z = "prim.conv2d"(%x, %w) {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x9x64xf16>, tensor<24x3x3x64xf16>) -> tensor<2x5x5x24xf16>
    %b = "prim.constant"() {value = dense<0.25> : tensor<96x72xbf16>} : () -> tensor<96x72xbf16>
    %m = "prim.matmul"(%a, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<3x40x96xbf16>, tensor<96x72xbf16>) -> tensor<3x40x72xbf16>
    return %y, %z, %m : tensor<2x9x9x24xf16>, tensor<2x5x5x24xf16>, tensor<3x40x72xbf16>
  }
}

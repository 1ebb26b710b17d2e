// The mma kernel's multi-stage pipeline: the solver's "tile" parameter indexes gpu_mma.CONFIGS, (tile,
// stages); a tuning record picks "small-s4" (entry 5) = the 64x64 tile with 4 shared-memory stages. Global -> shared copies
// are cp.async (nvgpu.device_async_copy, 16 bytes, L1 bypassed, the source element count 0 outside the
// image or past K: zero fill), one commit group per k tile, S - 1 = 3 tiles issued before the loop, and
// each iteration waits until at most S - 2 = 2 groups are pending before it multiplies its buffer.
// RUN: rm -f %t.sqlite
// RUN: env OPENPRIM_USER_DB_PATH=%t.sqlite openprim db add conv2d-2x16x9x9-k24-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-KRSC-f16-relu nvvm:sm_90 conv_implicit_gemm_mma '{"tile": "small-s4"}' 1e-6
// RUN: env OPENPRIM_USER_DB_PATH=%t.sqlite openprim-opt %s -p 'prim-select{target=nvvm:sm_90 mode=immediate},prim-tile{target=nvvm:sm_90}' | filecheck %s
// The PTX has cp.async.cg with a source size (zero fill), commit and wait groups.
// RUN: env OPENPRIM_USER_DB_PATH=%t.sqlite openprim-opt %s -p 'prim-pipeline{target=nvvm:sm_90}' | filecheck %s --check-prefix=PTX
// f32 on tensor cores (TF32, m16n8k8) only with OPENPRIM_ALLOW_TF32=1, with the same pipeline.
// RUN: env OPENPRIM_USER_DB_PATH=%t.sqlite OPENPRIM_ALLOW_TF32=1 openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s --check-prefix=TF32

// CHECK-LABEL: func.func @conv2d_0(
// CHECK-SAME:  prim.solver = "conv_implicit_gemm_mma"
// CHECK:       gpu.launch
// CHECK-SAME:  workgroup(%{{.+}} : memref<4x64x40xf16, #gpu.address_space<workgroup>>, %{{.+}} : memref<4x32x72xf16, #gpu.address_space<workgroup>>)
// CHECK:       nvgpu.device_async_copy {{.*}}, 8, %{{.+}} {bypassL1} : memref<2x9x9x16xf16> to memref<4x64x40xf16, #gpu.address_space<workgroup>>
// CHECK:       nvgpu.device_async_copy {{.*}}, 8, %{{.+}} {bypassL1} : memref<144x24xf16> to memref<4x32x72xf16, #gpu.address_space<workgroup>>
// CHECK:       %[[GROUP:.+]] = nvgpu.device_async_create_group
// CHECK-COUNT-2: nvgpu.device_async_create_group
// CHECK:       scf.for
// CHECK:       nvgpu.device_async_wait %{{.+}} {numGroups = 2 : i32}
// CHECK-NEXT:  gpu.barrier
// CHECK:       nvgpu.device_async_copy
// CHECK:       nvgpu.device_async_create_group
// CHECK:       nvgpu.ldmatrix
// CHECK:       nvgpu.mma.sync
// CHECK:       scf.yield
// CHECK:       nvgpu.device_async_wait %{{.+}} {numGroups = 0 : i32}

// PTX:         gpu.binary @device
// PTX-SAME:    cp.async.cg.shared.global [%rd{{[0-9]+}}{{(\+[0-9]+)?}}], [%rd{{[0-9]+}}], 16, %r
// PTX-SAME:    cp.async.commit_group
// PTX-SAME:    cp.async.wait_group {{[^;]*}}2;
// PTX-SAME:    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32

// TF32-LABEL: func.func @conv2d_1(
// TF32-SAME:  prim.solver = "conv_implicit_gemm_mma"
// TF32:       workgroup(%{{.+}} : memref<{{([0-9]+x)?}}{{64|128}}x20xf32, #gpu.address_space<workgroup>>
// TF32:       nvgpu.ldmatrix {{.*}} -> vector<4x1xf32>
// TF32:       nvgpu.mma.sync({{.*}}) {mmaShape = [16, 8, 8], tf32Enabled} : (vector<4x1xf32>, vector<2x1xf32>, vector<2x2xf32>) -> vector<2x2xf32>
module {
  func.func @f16(%x: tensor<2x9x9x16xf16>) -> tensor<2x9x9x24xf16> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<24x3x3x16xf16>} : () -> tensor<24x3x3x16xf16>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "relu", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x9x16xf16>, tensor<24x3x3x16xf16>) -> tensor<2x9x9x24xf16>
    return %y : tensor<2x9x9x24xf16>
  }
  func.func @f32(%x: tensor<2x9x9x16xf32>) -> tensor<2x9x9x24xf32> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<24x3x3x16xf32>} : () -> tensor<24x3x3x16xf32>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x9x16xf32>, tensor<24x3x3x16xf32>) -> tensor<2x9x9x24xf32>
    return %y : tensor<2x9x9x24xf32>
  }
}

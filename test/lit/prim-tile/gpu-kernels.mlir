// GPU targets: prim-tile gives the GEMM-like solvers, row reductions and layout transposes their own
// gpu-dialect kernels (already bufferized, with their launch); everything else stays linalg for
// prim-lower's grid mapping.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s

// The filter is an argument here, so a (tiled) transpose kernel makes it RSCK first: transpose_0.
// Implicit-GEMM convolution: shared-memory tiles of A (transposed) and B, a k loop carrying the
// register accumulators and the prefetched next tiles, FMAs between two barriers, fused relu.
// CHECK-LABEL: func.func @conv2d_1(%arg0: memref<2x9x9x8xf32>, %arg1: memref<3x3x8x16xf32>, %arg2: memref<2x9x9x16xf32>)
// CHECK-SAME:  prim.solver = "conv_implicit_gemm_gpu"
// CHECK:       gpu.launch blocks
// CHECK-SAME:  workgroup(%{{.+}} : memref<{{[0-9]+}}x{{[0-9]+}}xf32, #gpu.address_space<workgroup>>, %{{.+}} : memref<{{[0-9]+}}x{{[0-9]+}}xf32, #gpu.address_space<workgroup>>)
// CHECK:       scf.for {{.*}} iter_args(
// CHECK:       gpu.barrier
// CHECK:       vector.fma
// CHECK:       gpu.barrier
// CHECK:       arith.maximumf
// CHECK-NOT:   linalg.
// CHECK:       return

// NHWC -> NCHW through a padded 32x33 shared tile, one block per tile and batch entry.
// CHECK-LABEL: func.func @transpose_2(%arg0: memref<2x9x9x16xf32>, %arg1: memref<2x16x9x9xf32>)
// CHECK:       gpu.launch blocks({{.*}}) in ({{.*}} = %c1, {{.*}} = %c3, {{.*}} = %c2) threads({{.*}}) in ({{.*}} = %c32, {{.*}} = %c8, {{.*}} = %c1)
// CHECK-SAME:  workgroup(%{{.+}} : memref<32x33xf32, #gpu.address_space<workgroup>>)
// CHECK:       gpu.barrier

// Softmax over rows: one block per row, two block-wide reductions.
// CHECK-LABEL: func.func @softmax_3(%arg0: memref<6x100xf32>, %arg1: memref<6x100xf32>)
// CHECK:       gpu.launch blocks({{.*}}) in ({{.*}} = %c6,
// CHECK:       gpu.all_reduce maximumf
// CHECK:       math.exp
// CHECK:       gpu.all_reduce add
// CHECK-NOT:   linalg.

// Layer norm of rows of whole 16-byte vectors: a warp per row (8 rows a block of 256 threads), the row in
// registers; the mean, then the variance of the deviations, each a lane's vector sum and an xor-shuffle
// butterfly (no block reduction); then the scale, and vector stores.
// CHECK-LABEL: func.func @layer_norm_4(
// CHECK:       gpu.launch blocks({{.*}}) in ({{.*}} = %c1, {{.*}}) threads({{.*}}) in ({{.*}} = %c256,
// CHECK:       vector.load {{.*}} : memref<6x100xf32>, vector<4xf32>
// CHECK:       vector.reduction <add>
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK:       vector.reduction <add>
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK:       math.rsqrt
// CHECK:       vector.store {{.*}} : memref<6x100xf32>, vector<4xf32>
// CHECK-NOT:   gpu.all_reduce
// CHECK:       return

// An elementwise kernel stays linalg here.
// CHECK-LABEL: func.func @sigmoid_5(
// CHECK:       linalg.generic
module {
  func.func @conv(%x: tensor<2x9x9x8xf32>, %w: tensor<16x3x3x8xf32>) -> tensor<2x16x9x9xf32> {
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KRSC", activation = "relu", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x9x8xf32>, tensor<16x3x3x8xf32>) -> tensor<2x9x9x16xf32>
    %t = "prim.transpose"(%y) {perm = array<i64: 0, 3, 1, 2>} : (tensor<2x9x9x16xf32>) -> tensor<2x16x9x9xf32>
    return %t : tensor<2x16x9x9xf32>
  }
  func.func @rows(%x: tensor<6x100xf32>, %s: tensor<100xf32>) -> (tensor<6x100xf32>, tensor<6x100xf32>, tensor<6x100xf32>) {
    %a = "prim.softmax"(%x) {axis = -1} : (tensor<6x100xf32>) -> tensor<6x100xf32>
    %b = "prim.layer_norm"(%x, %s) {epsilon = 1.0e-05, normalized_ndim = 1, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<6x100xf32>, tensor<100xf32>) -> tensor<6x100xf32>
    %c = "prim.sigmoid"(%x) : (tensor<6x100xf32>) -> tensor<6x100xf32>
    return %a, %b, %c : tensor<6x100xf32>, tensor<6x100xf32>, tensor<6x100xf32>
  }
}

// GPU implicit GEMM on NCHW (prim-select's layout=keep): the grouped, strided NCHW convolution reaches
// conv_implicit_gemm_gpu untransposed. A[m, k] is read from x[n, c, ih, iw] one element per load (the
// threads of a block take consecutive m: consecutive ow, coalesced), the RSCK filter as B[R*S*Cg, K], and
// the residual and output as [N, K, OH*OW] (out[n, k, oh, ow]); grid z = the 4 groups. No transpose kernel.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90 layout=keep},prim-tile{target=nvvm:sm_90}' | filecheck %s

// CHECK-NOT:   func.func @transpose
// CHECK-LABEL: func.func @conv2d_0(%arg0: memref<2x16x9x7xf32>, %arg1: memref<3x3x4x32xf32>, %arg2: memref<2x32x5x7xf32>, %arg3: memref<2x32x5x7xf32>)
// CHECK-SAME:  prim.solver = "conv_implicit_gemm_gpu"
// CHECK:       gpu.launch blocks({{.*}}) in ({{.*}}, {{.*}}, {{.*}} = %c4) threads
// CHECK:       memref.collapse_shape %arg1 {{\[\[}}0, 1, 2], [3]] : memref<3x3x4x32xf32> into memref<36x32xf32>
// CHECK:       %[[OUT:.+]] = memref.collapse_shape %arg3 {{\[\[}}0], [1], [2, 3]] : memref<2x32x5x7xf32> into memref<2x32x35xf32>
// CHECK:       %[[RES:.+]] = memref.collapse_shape %arg2 {{\[\[}}0], [1], [2, 3]] : memref<2x32x5x7xf32> into memref<2x32x35xf32>
// CHECK:       vector.load %arg0[%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}] {alignment = 4 : i64} : memref<2x16x9x7xf32>, vector<1xf32>
// CHECK:       scf.for {{.*}} iter_args(
// CHECK:       gpu.barrier
// CHECK:       vector.fma
// CHECK:       gpu.barrier
// CHECK:       memref.load %[[RES]][%{{.+}}, %{{.+}}, %{{.+}}] : memref<2x32x35xf32>
// CHECK:       arith.maximumf
// CHECK:       memref.store %{{.+}}, %[[OUT]][%{{.+}}, %{{.+}}, %{{.+}}] : memref<2x32x35xf32>
// CHECK-NOT:   func.func @transpose
func.func @conv(%x: tensor<2x16x9x7xf32>, %w: tensor<3x3x4x32xf32>, %r: tensor<2x32x5x7xf32>) -> tensor<2x32x5x7xf32> {
  %y = "prim.conv2d"(%x, %w, %r) {strides = array<i64: 2, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 4, layout = "NCHW", filter_layout = "RSCK", activation = "relu", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 1>} : (tensor<2x16x9x7xf32>, tensor<3x3x4x32xf32>, tensor<2x32x5x7xf32>) -> tensor<2x32x5x7xf32>
  return %y : tensor<2x32x5x7xf32>
}

// conv_grouped_gemm (forced) on a grouped 3x3 convolution (groups = 4, C = 8, K = 16: Cg = 2, Kg = 4) and a
// grouped 1x1 one. The 3x3 input is padded and copied into im2col rows [N*OH*OW, R*S, C] = [36, 9, 8],
// viewed per group as A[m, t, g, c] = [36, 9, 4, 2]; the RSCK filter is viewed as B[t, c, g, n] =
// [9, 2, 4, 4]. One batched contraction C[g, m, n] with threads over the groups (M = 36 does not split
// into whole 4-row register tiles per thread), register tiles of one group x MT x NT, a loop over the 9
// taps carrying the accumulator in registers, and outer-product FMAs along the group's 4 output channels.
// The 1x1, stride-1 convolution reads the input itself as A (no im2col copy): each thread's 32 rows of it
// are viewed as [32, 1, 4, 16]; the reduction loop runs over the group's 16 channels.
// RUN: openprim-opt %s -p 'prim-select{solver=conv_grouped_gemm},prim-tile' | filecheck %s

// CHECK-LABEL: func.func @conv2d_0(%arg0: memref<1x9x7x8xf32>, %arg1: memref<3x3x2x16xf32>, %arg2: memref<16xf32>, %arg3: memref<1x9x4x16xf32>) attributes {prim.op = "conv2d", prim.solver = "conv_grouped_gemm"}
// CHECK:       tensor.empty() : tensor<1x9x4x3x3x8xf32>
// CHECK:       tensor.expand_shape %{{.+}} output_shape [36, 9, 4, 2] : tensor<2592xf32> into tensor<36x9x4x2xf32>
// CHECK:       tensor.expand_shape %{{.+}} output_shape [9, 2, 4, 4] : tensor<288xf32> into tensor<9x2x4x4xf32>
// CHECK:       scf.forall (%{{.+}}) = (0) to (4) step (2) shared_outs
// CHECK:       scf.for %{{.+}} = %c0 to %c9 step %c1 iter_args(%{{.+}} = %{{.+}}) -> (vector<{{[0-9]+}}x4xf32>)
// CHECK:       vector.fma {{.*}} : vector<4xf32>
// CHECK:       arith.maximumf
// CHECK:       return

// CHECK-LABEL: func.func @conv2d_1(%arg0: memref<1x8x8x64xf32>, %arg1: memref<1x1x16x64xf32>, %arg2: memref<1x8x8x64xf32>) attributes {prim.op = "conv2d", prim.solver = "conv_grouped_gemm"}
// CHECK-NOT:   tensor.empty() : tensor<1x8x8x1x1x64xf32>
// CHECK:       tensor.expand_shape %{{.+}} output_shape [1, 16, 4, 16] : tensor<1024xf32> into tensor<1x16x4x16xf32>
// CHECK:       scf.forall (%{{.+}}) = (0) to (64) step (32) shared_outs
// CHECK:       tensor.expand_shape %{{.+}} output_shape [32, 1, 4, 16] : tensor<2048xf32> into tensor<32x1x4x16xf32>
// CHECK:       scf.for %{{.+}} = %c0 to %c16 step %c{{[0-9]+}} iter_args(%{{.+}} = %{{.+}}) -> (vector<{{[0-9]+}}x16xf32>)
// CHECK:       vector.fma {{.*}} : vector<16xf32>
// CHECK:       return
module {
  func.func @conv3x3(%x: tensor<1x9x7x8xf32>, %w: tensor<3x3x2x16xf32>, %b: tensor<16xf32>) -> tensor<1x9x4x16xf32> {
    %y = "prim.conv2d"(%x, %w, %b) {activation = "relu", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 4, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 2>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x9x7x8xf32>, tensor<3x3x2x16xf32>, tensor<16xf32>) -> tensor<1x9x4x16xf32>
    return %y : tensor<1x9x4x16xf32>
  }
  func.func @conv1x1(%x: tensor<1x8x8x64xf32>, %w: tensor<1x1x16x64xf32>) -> tensor<1x8x8x64xf32> {
    %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 4, layout = "NHWC", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x8x8x64xf32>, tensor<1x1x16x64xf32>) -> tensor<1x8x8x64xf32>
    return %y : tensor<1x8x8x64xf32>
  }
}

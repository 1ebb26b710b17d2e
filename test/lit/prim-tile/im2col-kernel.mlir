// conv_im2col_gemm (forced): the input is padded and copied into im2col rows [N*OH*OW, R*S*C]
// = [16, 18], the filter collapsed to [R*S*C, K] = [18, 8], then the GEMM schedule: threads over the
// 16 rows, a reduction loop over the 18, outer-product FMAs along K.
// RUN: openprim-opt %s -p 'prim-select{solver=conv_im2col_gemm},prim-tile' | filecheck %s

// CHECK-LABEL: func.func @conv2d_0(%arg0: memref<1x4x4x2xf32>, %arg1: memref<3x3x2x8xf32>, %arg2: memref<1x4x4x8xf32>) attributes {prim.op = "conv2d", prim.solver = "conv_im2col_gemm"}
// CHECK:       tensor.empty() : tensor<1x4x4x3x3x2xf32>
// CHECK:       tensor.collapse_shape %{{.+}} {{\[\[}}0, 1, 2], [3]] : tensor<3x3x2x8xf32> into tensor<18x8xf32>
// CHECK:       scf.forall (%{{.+}}) = (0) to (16) step ({{[0-9]+}}) shared_outs
// CHECK:       scf.for %{{.+}} = %c0 to %c18 step %c{{[0-9]+}} iter_args
// CHECK:       vector.fma {{.*}} : vector<{{[0-9]+}}xf32>
// CHECK:       return
func.func @conv(%x: tensor<1x4x4x2xf32>, %w: tensor<3x3x2x8xf32>) -> tensor<1x4x4x8xf32> {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 1, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x4x2xf32>, tensor<3x3x2x8xf32>) -> tensor<1x4x4x8xf32>
  return %y : tensor<1x4x4x8xf32>
}

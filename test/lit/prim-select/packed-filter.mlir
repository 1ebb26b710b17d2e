// prim-select packs the constant filter of a CPU implicit-GEMM convolution in blocks of FT output channels,
// "KRSC<FT>k" = [K/FT, R, S, C, FT] (base/ops.py): the kernel then streams one contiguous block per channel
// tile. The KRSC filter w[k, 0, 0, c] = 100k + c becomes RSCK, then blocks of 16: block 1 starts with
// w[16, 0, 0, 0] = 1600, w[17, 0, 0, 0] = 1700, ...; a filter that is not a constant gets the same blocks
// from a transpose kernel (its K split by a reshape first; runtime-filter-blocks.mlir).
// RUN: openprim-opt %s -p 'prim-select{target=cpu:x86-64-v3}' | filecheck %s

// CHECK-LABEL: func.func @packed
// CHECK:       "prim.constant"() {value = dense<{{\[+}}0.000000e+00, 1.000000e+02, {{.*}}, 1.500000e+03], {{\[}}1.000000e+00, 1.010000e+02, {{.*}}, 1.501000e+03{{\]+}}, {{\[+}}1.600000e+03, 1.700000e+03, {{.*}}> : tensor<2x1x1x2x16xf32>
// CHECK:       "prim.conv2d"
// CHECK-SAME:  filter_layout = "KRSC16k"
// CHECK-SAME:  prim.params = {ft = 16 : i64, wt = {{[0-9]+}} : i64}
// CHECK-SAME:  prim.problem = "conv2d-1x2x8x8-k32-1x1-s1x1-p0x0x0x0-d1x1-g1-NHWC-KRSC-f32-none"
// CHECK-SAME:  prim.solver = "conv_implicit_gemm"
// CHECK-SAME:  (tensor<1x8x8x2xf32>, tensor<2x1x1x2x16xf32>) -> tensor<1x8x8x32xf32>
func.func @packed(%x: tensor<1x8x8x2xf32>) -> tensor<1x8x8x32xf32> {
  %w = "prim.constant"() {value = dense<[[[[0.0, 1.0]]], [[[100.0, 101.0]]], [[[200.0, 201.0]]], [[[300.0, 301.0]]], [[[400.0, 401.0]]], [[[500.0, 501.0]]], [[[600.0, 601.0]]], [[[700.0, 701.0]]], [[[800.0, 801.0]]], [[[900.0, 901.0]]], [[[1000.0, 1001.0]]], [[[1100.0, 1101.0]]], [[[1200.0, 1201.0]]], [[[1300.0, 1301.0]]], [[[1400.0, 1401.0]]], [[[1500.0, 1501.0]]], [[[1600.0, 1601.0]]], [[[1700.0, 1701.0]]], [[[1800.0, 1801.0]]], [[[1900.0, 1901.0]]], [[[2000.0, 2001.0]]], [[[2100.0, 2101.0]]], [[[2200.0, 2201.0]]], [[[2300.0, 2301.0]]], [[[2400.0, 2401.0]]], [[[2500.0, 2501.0]]], [[[2600.0, 2601.0]]], [[[2700.0, 2701.0]]], [[[2800.0, 2801.0]]], [[[2900.0, 2901.0]]], [[[3000.0, 3001.0]]], [[[3100.0, 3101.0]]]]> : tensor<32x1x1x2xf32>} : () -> tensor<32x1x1x2xf32>
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 1, layout = "NHWC", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x8x8x2xf32>, tensor<32x1x1x2xf32>) -> tensor<1x8x8x32xf32>
  return %y : tensor<1x8x8x32xf32>
}

// CHECK-LABEL: func.func @not_constant
// CHECK:       %[[S:.+]] = "prim.reshape"(%arg1) : (tensor<1x1x2x32xf32>) -> tensor<1x1x2x2x16xf32>
// CHECK-NEXT:  %[[P:.+]] = "prim.transpose"(%[[S]]) {perm = array<i64: 3, 0, 1, 2, 4>} : (tensor<1x1x2x2x16xf32>) -> tensor<2x1x1x2x16xf32>
// CHECK-NEXT:  "prim.conv2d"(%arg0, %[[P]])
// CHECK-SAME:  filter_layout = "KRSC16k"
// CHECK-SAME:  prim.solver = "conv_implicit_gemm"
func.func @not_constant(%x: tensor<1x8x8x2xf32>, %w: tensor<1x1x2x32xf32>) -> tensor<1x8x8x32xf32> {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 1, layout = "NHWC", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x8x8x2xf32>, tensor<1x1x2x32xf32>) -> tensor<1x8x8x32xf32>
  return %y : tensor<1x8x8x32xf32>
}

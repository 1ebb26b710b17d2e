// A filter that is a run-time value (a training graph's input: not a constant, not a stored parameter) gets
// the CPU implicit GEMM's blocked layout KRSC<16>k by one transpose from its own layout, its K split first by a
// reshape (a view): KCRS [32, 24, 3, 3] -> [2, 16, 24, 3, 3] -> [2, 3, 3, 24, 16]. A constant filter is packed
// at compile time instead; the plain RSCK transpose it replaces costs the same.
// RUN: openprim-opt %s -p 'prim-select{target=cpu:x86-64-v3 solver=conv_implicit_gemm}' | filecheck %s

// CHECK-LABEL: func.func @main
// CHECK:       %[[S:.+]] = "prim.reshape"(%arg1) : (tensor<32x24x3x3xf32>) -> tensor<2x16x24x3x3xf32>
// CHECK-NEXT:  %[[P:.+]] = "prim.transpose"(%[[S]]) {perm = array<i64: 0, 3, 4, 2, 1>} : (tensor<2x16x24x3x3xf32>) -> tensor<2x3x3x24x16xf32>
// CHECK-NEXT:  "prim.conv2d"(%arg0, %[[P]])
// CHECK-SAME:  filter_layout = "KRSC16k"
// CHECK-SAME:  prim.solver = "conv_implicit_gemm"
// CHECK-NOT:   prim.transpose
func.func @main(%x: tensor<2x9x9x24xf32>, %w: tensor<32x24x3x3xf32>) -> tensor<2x9x9x32xf32> {
  %0 = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, layout = "NHWC", filter_layout = "KCRS", activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x9x9x24xf32>, tensor<32x24x3x3xf32>) -> tensor<2x9x9x32xf32>
  return %0 : tensor<2x9x9x32xf32>
}

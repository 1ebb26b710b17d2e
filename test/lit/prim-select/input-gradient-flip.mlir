// A stride-1 input gradient's filter (a forward convolution's, its K and C swapped and its taps reversed):
// the swap and the blocked layout are one transpose of the KCRS filter as it came, and the taps are reversed
// after it, a gather of whole 1024-element rows along R S (no transpose after the flip).
// RUN: openprim-opt %s -p 'prim-select{target=cpu:x86-64-v3}' | filecheck %s

// CHECK-LABEL: func.func @input_gradient
// CHECK:       %[[S:.+]] = "prim.reshape"(%arg1) : (tensor<64x48x3x3xf32>) -> tensor<64x3x16x3x3xf32>
// CHECK-NEXT:  %[[P:.+]] = "prim.transpose"(%[[S]]) {perm = array<i64: 1, 3, 4, 0, 2>} : (tensor<64x3x16x3x3xf32>) -> tensor<3x3x3x64x16xf32>
// CHECK-NEXT:  %[[R:.+]] = "prim.reshape"(%[[P]]) : (tensor<3x3x3x64x16xf32>) -> tensor<3x9x1024xf32>
// CHECK-NEXT:  %[[REV:.+]] = "prim.constant"() {value = dense<[8, 7, 6, 5, 4, 3, 2, 1, 0]> : tensor<9xi64>}
// CHECK-NEXT:  %[[F:.+]] = "prim.gather"(%[[R]], %[[REV]]) {axis = 1 : i64}
// CHECK-NEXT:  %[[W:.+]] = "prim.reshape"(%[[F]]) : (tensor<3x9x1024xf32>) -> tensor<3x3x3x64x16xf32>
// CHECK-NEXT:  "prim.conv2d"(%arg0, %[[W]])
// CHECK-SAME:  filter_layout = "KRSC16k"
// CHECK-SAME:  prim.solver = "conv_implicit_gemm"
// CHECK-NOT:   prim.transpose
func.func @input_gradient(%dy: tensor<8x7x7x64xf32>, %w: tensor<64x48x3x3xf32>) -> tensor<8x7x7x48xf32> {
  %0 = "prim.conv2d_backward_data"(%dy, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KCRS", input_size = array<i64: 7, 7>} : (tensor<8x7x7x64xf32>, tensor<64x48x3x3xf32>) -> tensor<8x7x7x48xf32>
  return %0 : tensor<8x7x7x48xf32>
}

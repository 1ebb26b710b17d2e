// A 1x1 stride-1 input gradient on a GPU: the forward convolution it becomes reads the KCRS filter as RSCK
// [1, 1, K, C], which for one tap is the same memory: the moves that make it (transpose, reshape, no taps
// to reverse) collapse to reshapes, not to a gather of whole rows that copies the filter (view_chains'
// collapse_moves takes an identity permutation as a reshape, whether or not a GPU transpose would fit it).
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90}' | filecheck %s

// CHECK-LABEL: func.func @input_gradient_1x1
// CHECK-NOT:   prim.gather
// CHECK-NOT:   prim.transpose
// CHECK:       %[[W:.+]] = "prim.reshape"(%arg1) : (tensor<256x64x1x1xf16>) -> tensor<1x1x256x64xf16>
// CHECK-NEXT:  "prim.conv2d"(%arg0, %[[W]])
// CHECK-SAME:  filter_layout = "RSCK"
func.func @input_gradient_1x1(%dy: tensor<8x14x14x256xf16>, %w: tensor<256x64x1x1xf16>) -> tensor<8x14x14x64xf16> {
  %0 = "prim.conv2d_backward_data"(%dy, %w) {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1, layout = "NHWC", filter_layout = "KCRS", input_size = array<i64: 14, 14>} : (tensor<8x14x14x256xf16>, tensor<256x64x1x1xf16>) -> tensor<8x14x14x64xf16>
  return %0 : tensor<8x14x14x64xf16>
}

// A filter gradient with fewer than 8 input channels (an RGB stem) on any target
// (passes/backward_weights_gemms.py): the padded input's 49 strided tap slices [N, OH, OW, 3] are stacked
// along the channels by one concat chain into patches [N, OH, OW, 147] (an im2col), and one GEMM dy^T [K, M] @
// patches [M, 147] gives the KRSC gradient; on sm_90 the input is padded to 8 channels before its taps are cut
// (16-byte rows, which the concat moves as vectors: patches [M, 392] for the matrix cores, the gradient then
// the first 3 channels of each tap), on the CPU not (a pass over them all). The CPU's
// register-tiled filter-gradient solver filled 3 lanes of a channel tile per tap (and as a 1x1 gradient over
// the 147 stacked channels it was slower still); a GPU, whose only filter-gradient solver is the reference,
// gets one GEMM instead of 49.
// RUN: openprim-opt %s -p "prim-select" | filecheck %s --check-prefix=CPU
// RUN: openprim-opt %s -p "prim-select{target=nvvm:sm_90}" | filecheck %s --check-prefix=SM90

// CPU:         %[[DYT:.+]] = "prim.transpose"({{.*}}) {perm = array<i64: 1, 0>} : (tensor<128x16xf32>) -> tensor<16x128xf32>
// CPU:         %[[XP:.+]] = "prim.pad"(%arg0) {{.*}} -> tensor<2x22x22x3xf32>
// CPU-COUNT-49: "prim.slice"(%[[XP]]) {{.*}} -> tensor<2x8x8x3xf32>
// CPU-COUNT-48: "prim.concat"
// CPU-NOT:     "prim.pad"
// CPU:         %[[ROWS:.+]] = "prim.reshape"({{.*}}) : (tensor<2x8x8x147xf32>) -> tensor<128x147xf32>
// CPU-NEXT:    "prim.matmul"(%[[DYT]], %[[ROWS]]) {{.*}}prim.problem = "gemm-b1-m16-n147-k128-nn-f32-none", prim.solver = "gemm_packed"
// CPU-NOT:     prim.conv2d_backward_weights

// SM90-NOT:    prim.conv2d_backward_weights
// SM90:        "prim.pad"(%arg0) {{.*}} -> tensor<2x22x22x8xf32>
// SM90-COUNT-49: "prim.slice"({{.*}} -> tensor<2x8x8x8xf32>
// SM90:        "prim.matmul"({{.*}}prim.problem = "gemm-b1-m16-n392-k128-nn-f32-none"
// SM90-NOT:    "prim.matmul"
// SM90:        "prim.slice"({{.*}}) {{.*}} : (tensor<16x7x7x8xf32>) -> tensor<16x7x7x3xf32>
func.func @main(%x: tensor<2x16x16x3xf32>, %dy: tensor<2x8x8x16xf32>) -> tensor<16x3x7x7xf32> {
  %0 = "prim.conv2d_backward_weights"(%x, %dy) {strides = array<i64: 2, 2>, padding = array<i64: 3, 3, 3, 3>, dilations = array<i64: 1, 1>, groups = 1 : i64, layout = "NHWC", filter_layout = "KCRS", filter_size = array<i64: 7, 7>} : (tensor<2x16x16x3xf32>, tensor<2x8x8x16xf32>) -> tensor<16x3x7x7xf32>
  return %0 : tensor<16x3x7x7xf32>
}

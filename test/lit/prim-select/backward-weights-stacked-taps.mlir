// A filter gradient with fewer than 8 input channels (an RGB stem) on a GPU, whose only filter-gradient
// solver is the reference (passes/backward_weights_gemms.py): the input is padded to 8 channels and its 49
// strided tap slices [N, OH, OW, 8] (16-byte rows, which the concat moves as vectors) are stacked along the
// channels by one concat chain into patches [M, 392] (an im2col), and one GEMM dy^T [K, M] @ patches on the
// matrix cores gives the KRSC gradient, then the first 3 channels of each tap: one GEMM instead of 49. The
// CPU keeps the op for its filter-gradient kernel, which reads x in place (a 3-channel x 16-filter tile per
// tap; the stacked path was 2.5x slower there: transpose, pad, slices, concat, GEMM).
// RUN: openprim-opt %s -p "prim-select" | filecheck %s --check-prefix=CPU
// RUN: openprim-opt %s -p "prim-select{target=nvvm:sm_90}" | filecheck %s --check-prefix=SM90

// CPU:         "prim.conv2d_backward_weights"(%arg0, %arg1)
// CPU-SAME:    prim.params = {mt = 3 : i64, nt = 16 : i64}
// CPU-SAME:    prim.solver = "conv_bwd_weights_gemm"
// CPU-NOT:     "prim.matmul"

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

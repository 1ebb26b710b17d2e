// GEMM solver choice: a 2-d, non-transposed rhs -> gemm (with its MT x NT register tile and KT);
// a batched rhs -> gemm_reference (gemm needs a 2-d rhs). The descriptor records the shape.
// RUN: openprim-opt %s -p prim-select | filecheck %s

// CHECK-LABEL: func.func @gemm
// CHECK:       "prim.matmul"(%arg0, %arg1, %arg2)
// CHECK-SAME:  prim.params = {kt = {{[0-9]+}} : i64, mt = {{[0-9]+}} : i64, nt = {{[0-9]+}} : i64}
// CHECK-SAME:  prim.problem = "gemm-b1-m16-n32-k64-nn-f32-bias+relu"
// CHECK-SAME:  prim.solver = "gemm"
// CHECK-SAME:  transpose_rhs = 0 : i64
func.func @gemm(%a: tensor<16x64xf32>, %b: tensor<64x32xf32>, %c: tensor<32xf32>) -> tensor<16x32xf32> {
  %y = "prim.matmul"(%a, %b, %c) {activation = "relu", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<16x64xf32>, tensor<64x32xf32>, tensor<32xf32>) -> tensor<16x32xf32>
  return %y : tensor<16x32xf32>
}

// CHECK-LABEL: func.func @batched
// CHECK:       "prim.matmul"(%arg0, %arg1)
// CHECK-SAME:  prim.params = {}
// CHECK-SAME:  prim.problem = "gemm-b2-m2-n2-k3-nn-batched-f32-none"
// CHECK-SAME:  prim.solver = "gemm_reference"
func.func @batched(%x: tensor<2x2x3xf32>, %w: tensor<2x3x2xf32>) -> tensor<2x2x2xf32> {
  %y = "prim.matmul"(%x, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x2x3xf32>, tensor<2x3x2xf32>) -> tensor<2x2x2xf32>
  return %y : tensor<2x2x2xf32>
}

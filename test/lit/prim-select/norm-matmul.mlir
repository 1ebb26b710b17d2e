// A layer_norm or rms_norm that only matmuls read (as their lhs, directly or through a reshape keeping the last
// dim) becomes part of each of them on NVIDIA where a GEMV takes the rows: prim.norm_matmul, one launch that
// normalizes the rows as it reads them (norm_gemv_gpu for a row or a few, norm_gemv_mma up to 16). GPT-2's
// ln_1 feeds the q, k and v projections (split by matmul_views): each gets the norm, each reads the norm's
// input through its own reshape, and the norm is gone. A norm whose output is also returned stays, as it does
// on the CPU, which has no norm_matmul solver.
// RUN: openprim-opt %s -p "prim-select{target=nvvm:sm_90}" | filecheck %s
// RUN: openprim-opt %s -p "prim-select{target=cpu}" | filecheck %s --check-prefix=CPU

// CHECK-LABEL: func.func @qkv
// CHECK-NOT:   prim.layer_norm
// CHECK-COUNT-3: "prim.norm_matmul"({{.*}}) {{{.*}}norm = "layer_norm"{{.*}}prim.problem = "norm_gemm-layer_norm-b1-m16-n768-k768-nn-f16-bias", prim.solver = "norm_gemv_mma"
// CHECK-NOT:   prim.layer_norm
// CHECK:       return
// CHECK-LABEL: func.func @one_row
// CHECK:       "prim.norm_matmul"({{.*}}) {{{.*}}norm = "rms_norm"{{.*}}prim.problem = "norm_gemm-rms_norm-b1-m1-n3072-k768-nn-f16-none", prim.solver = "norm_gemv_gpu"
// CHECK-LABEL: func.func @returned
// CHECK:       prim.layer_norm
// CHECK:       "prim.matmul"

// CPU-NOT:     prim.norm_matmul

func.func @qkv(%x: tensor<16x1x768xf16>, %s: tensor<768xf16>, %t: tensor<768xf16>, %wq: tensor<768x768xf16>, %wk: tensor<768x768xf16>, %wv: tensor<768x768xf16>, %b: tensor<768xf16>) -> (tensor<16x768xf16>, tensor<16x768xf16>, tensor<16x768xf16>) {
  %h = "prim.layer_norm"(%x, %s, %t) {epsilon = 1.0e-05 : f64, normalized_ndim = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<16x1x768xf16>, tensor<768xf16>, tensor<768xf16>) -> tensor<16x1x768xf16>
  %r = "prim.reshape"(%h) : (tensor<16x1x768xf16>) -> tensor<16x768xf16>
  %q = "prim.matmul"(%r, %wq, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<16x768xf16>, tensor<768x768xf16>, tensor<768xf16>) -> tensor<16x768xf16>
  %k = "prim.matmul"(%r, %wk, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<16x768xf16>, tensor<768x768xf16>, tensor<768xf16>) -> tensor<16x768xf16>
  %v = "prim.matmul"(%r, %wv, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<16x768xf16>, tensor<768x768xf16>, tensor<768xf16>) -> tensor<16x768xf16>
  return %q, %k, %v : tensor<16x768xf16>, tensor<16x768xf16>, tensor<16x768xf16>
}

func.func @one_row(%x: tensor<1x768xf16>, %s: tensor<768xf16>, %w: tensor<768x3072xf16>) -> tensor<1x3072xf16> {
  %h = "prim.rms_norm"(%x, %s) {epsilon = 1.0e-06 : f64, normalized_ndim = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<1x768xf16>, tensor<768xf16>) -> tensor<1x768xf16>
  %y = "prim.matmul"(%h, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x768xf16>, tensor<768x3072xf16>) -> tensor<1x3072xf16>
  return %y : tensor<1x3072xf16>
}

func.func @returned(%x: tensor<1x768xf16>, %w: tensor<768x768xf16>) -> (tensor<1x768xf16>, tensor<1x768xf16>) {
  %h = "prim.layer_norm"(%x) {epsilon = 1.0e-05 : f64, normalized_ndim = 1 : i64, operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (tensor<1x768xf16>) -> tensor<1x768xf16>
  %y = "prim.matmul"(%h, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x768xf16>, tensor<768x768xf16>) -> tensor<1x768xf16>
  return %y, %h : tensor<1x768xf16>, tensor<1x768xf16>
}

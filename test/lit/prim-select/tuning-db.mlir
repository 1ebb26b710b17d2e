// Immediate mode reads the tuning database first: a record made in the RUN line (the user database at
// %t.sqlite, this machine's CPU) makes conv_im2col_gemm, with the record's parameters, win over the
// heuristic; the op says where the choice came from and the measured time.
// RUN: rm -f %t.sqlite
// RUN: env OPENPRIM_USER_DB_PATH=%t.sqlite openprim db add conv2d-1x2x4x4-k2-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-KRSC-f32-none cpu conv_im2col_gemm '{"kt": 1, "mt": 4, "nt": 16}' 2.5e-6
// RUN: env OPENPRIM_USER_DB_PATH=%t.sqlite openprim-opt %s -p 'prim-select{mode=immediate}' | filecheck %s
// Without the record: the heuristic.
// RUN: env OPENPRIM_USER_DB_PATH=%t.missing.sqlite openprim-opt %s -p 'prim-select{mode=immediate}' | filecheck %s --check-prefix=HEURISTIC

// CHECK-LABEL: func.func @conv
// CHECK:       "prim.conv2d"
// CHECK-SAME:  prim.choice = "db"
// CHECK-SAME:  prim.measured_us = 2.5{{0*}}e+00 : f64
// CHECK-SAME:  prim.params = {kt = 1 : i64, mt = 4 : i64, nt = 16 : i64}
// CHECK-SAME:  prim.problem = "conv2d-1x2x4x4-k2-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-KRSC-f32-none"
// CHECK-SAME:  prim.solver = "conv_im2col_gemm"
// HEURISTIC:   prim.choice = "heuristic"
// HEURISTIC-NOT: prim.measured_us
// HEURISTIC-SAME: prim.solver = "{{[a-z0-9_]+}}"
func.func @conv(%x: tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x3x3x2xf32>} : () -> tensor<2x3x3x2xf32>
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 1, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x4x2xf32>, tensor<2x3x3x2xf32>) -> tensor<1x4x4x2xf32>
  return %y : tensor<1x4x4x2xf32>
}

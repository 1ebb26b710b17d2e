// Attention on the heads where the projections leave them (passes/attention_layout.py): the head
// transposes [B,S,H,D] <-> [B,H,S,D] around a prim.attention are absorbed into its layout BSHD when that
// removes more transposes than it adds.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// Multi-head attention as torch.export writes it: q, k, v transposed to [B,H,S,D], the result back.
// All four transposes go; the attention reads and writes [B,S,H,D].
// CHECK-LABEL: func.func @mha
// CHECK-NOT:  prim.transpose
// CHECK:      %[[O:.+]] = "prim.attention"(%arg0, %arg1, %arg2, %arg3) {causal = 1 : i64, layout = "BSHD", operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 1.250000e-01 : f64} : (tensor<2x7x3x64xf16>, tensor<2x9x3x64xf16>, tensor<2x9x3x64xf16>, tensor<7x9xf16>) -> tensor<2x7x3x64xf16>
// CHECK-NOT:  prim.transpose
// CHECK:      return %[[O]]
func.func @mha(%q: tensor<2x7x3x64xf16>, %k: tensor<2x9x3x64xf16>, %v: tensor<2x9x3x64xf16>, %m: tensor<7x9xf16>) -> tensor<2x7x3x64xf16> {
  %qt = "prim.transpose"(%q) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x7x3x64xf16>) -> tensor<2x3x7x64xf16>
  %kt = "prim.transpose"(%k) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x9x3x64xf16>) -> tensor<2x3x9x64xf16>
  %vt = "prim.transpose"(%v) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x9x3x64xf16>) -> tensor<2x3x9x64xf16>
  %a = "prim.attention"(%qt, %kt, %vt, %m) {scale = 0.125 : f64, causal = 1 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (tensor<2x3x7x64xf16>, tensor<2x3x9x64xf16>, tensor<2x3x9x64xf16>, tensor<7x9xf16>) -> tensor<2x3x7x64xf16>
  %o = "prim.transpose"(%a) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x3x7x64xf16>) -> tensor<2x7x3x64xf16>
  return %o : tensor<2x7x3x64xf16>
}

// k transposed once and used as k and v, q already [B,H,S,D] (one transpose to BSHD added), the result
// also returned untransposed (one transpose back added): 2 removed (k's and the result's), 2 added: the
// op is left as it is.
// CHECK-LABEL: func.func @not_worth_it
// CHECK:      "prim.attention"(%arg0, %{{.+}}, %{{.+}}) {{.+}} layout = "BHSD"
func.func @not_worth_it(%q: tensor<1x2x5x64xf16>, %k: tensor<1x6x2x64xf16>) -> (tensor<1x2x5x64xf16>, tensor<1x5x2x64xf16>) {
  %kt = "prim.transpose"(%k) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x6x2x64xf16>) -> tensor<1x2x6x64xf16>
  %a = "prim.attention"(%q, %kt, %kt) {scale = 0.125 : f64, causal = 0 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x2x5x64xf16>, tensor<1x2x6x64xf16>, tensor<1x2x6x64xf16>) -> tensor<1x2x5x64xf16>
  %o = "prim.transpose"(%a) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x5x64xf16>) -> tensor<1x5x2x64xf16>
  return %a, %o : tensor<1x2x5x64xf16>, tensor<1x5x2x64xf16>
}

// A transpose with another user stays, but the attention still reads its source: q's and k's
// transposes go, v's stays for its other use; the result's transpose goes.
// CHECK-LABEL: func.func @shared_transpose
// CHECK:      %[[VT:.+]] = "prim.transpose"(%arg2) {perm = array<i64: 0, 2, 1, 3>}
// CHECK:      %[[O:.+]] = "prim.attention"(%arg0, %arg1, %arg2) {{.+}} layout = "BSHD"
// CHECK-NOT:  prim.transpose
// CHECK:      return %[[O]], %[[VT]]
func.func @shared_transpose(%q: tensor<1x5x2x64xbf16>, %k: tensor<1x6x2x64xbf16>, %v: tensor<1x6x2x64xbf16>) -> (tensor<1x5x2x64xbf16>, tensor<1x2x6x64xbf16>) {
  %qt = "prim.transpose"(%q) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x64xbf16>) -> tensor<1x2x5x64xbf16>
  %kt = "prim.transpose"(%k) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x6x2x64xbf16>) -> tensor<1x2x6x64xbf16>
  %vt = "prim.transpose"(%v) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x6x2x64xbf16>) -> tensor<1x2x6x64xbf16>
  %a = "prim.attention"(%qt, %kt, %vt) {scale = 0.125 : f64, causal = 0 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x2x5x64xbf16>, tensor<1x2x6x64xbf16>, tensor<1x2x6x64xbf16>) -> tensor<1x2x5x64xbf16>
  %o = "prim.transpose"(%a) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x5x64xbf16>) -> tensor<1x5x2x64xbf16>
  return %o, %vt : tensor<1x5x2x64xbf16>, tensor<1x2x6x64xbf16>
}

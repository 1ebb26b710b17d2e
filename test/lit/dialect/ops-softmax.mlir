// softmax and log_softmax, with a positive and a negative axis.
// RUN: openprim-opt %s --verify-only | filecheck %s

// CHECK-LABEL: func.func @softmax
// CHECK:      %[[S:.+]] = "prim.softmax"(%arg0) {axis = 1 : i64} : (tensor<2x5xbf16>) -> tensor<2x5xbf16>
// CHECK-NEXT: %[[L:.+]] = "prim.log_softmax"(%[[S]]) {axis = -1 : i64} : (tensor<2x5xbf16>) -> tensor<2x5xbf16>
// CHECK-NEXT: return %[[L]]
func.func @softmax(%x: tensor<2x5xbf16>) -> tensor<2x5xbf16> {
  %0 = "prim.softmax"(%x) {axis = 1} : (tensor<2x5xbf16>) -> tensor<2x5xbf16>
  %1 = "prim.log_softmax"(%0) {axis = -1} : (tensor<2x5xbf16>) -> tensor<2x5xbf16>
  return %1 : tensor<2x5xbf16>
}

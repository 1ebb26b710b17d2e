// The elementwise math ops: exp, log, sqrt, abs, erf (no attributes) and the broadcasting binaries
// maximum, minimum, pow (numpy rules, as add).
// RUN: openprim-opt %s --verify-only | filecheck %s

// CHECK-LABEL: func.func @unary
// CHECK:      %[[A:.+]] = "prim.exp"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %[[B:.+]] = "prim.log"(%[[A]]) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %[[C:.+]] = "prim.sqrt"(%[[B]]) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %[[D:.+]] = "prim.abs"(%[[C]]) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %[[E:.+]] = "prim.erf"(%[[D]]) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: return %[[E]] : tensor<2x3xf32>
func.func @unary(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "prim.exp"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "prim.log"(%0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "prim.sqrt"(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = "prim.abs"(%2) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = "prim.erf"(%3) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %4 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @binary
// CHECK:      "prim.maximum"(%arg0, %arg1) : (tensor<2x1xbf16>, tensor<1x3xbf16>) -> tensor<2x3xbf16>
// CHECK-NEXT: "prim.minimum"
// CHECK-SAME: (tensor<2x3xbf16>, tensor<3xbf16>) -> tensor<2x3xbf16>
// CHECK-NEXT: "prim.pow"
// CHECK-SAME: (tensor<2x3xbf16>, tensor<bf16>) -> tensor<2x3xbf16>
func.func @binary(%a: tensor<2x1xbf16>, %b: tensor<1x3xbf16>, %c: tensor<3xbf16>, %s: tensor<bf16>) -> tensor<2x3xbf16> {
  %0 = "prim.maximum"(%a, %b) : (tensor<2x1xbf16>, tensor<1x3xbf16>) -> tensor<2x3xbf16>
  %1 = "prim.minimum"(%0, %c) : (tensor<2x3xbf16>, tensor<3xbf16>) -> tensor<2x3xbf16>
  %2 = "prim.pow"(%1, %s) : (tensor<2x3xbf16>, tensor<bf16>) -> tensor<2x3xbf16>
  return %2 : tensor<2x3xbf16>
}

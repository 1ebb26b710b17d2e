// A training batch norm's affine step: scale * inv_std is a [C] product that the map's elementwise tree
// reads through a reshape to [C, 1, 1]. The reshape only adds unit dims, so it moves onto the product's
// operands and the product joins the tree: one fused function (one kernel) computes it per element, where
// it was a launch of its own. A product used twice, or a large one, keeps its kernel.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// CHECK-LABEL: func.func private @fused_0
// CHECK:         "prim.mul"({{.*}}) : (tensor<16x1x1xf32>, tensor<16x1x1xf32>) -> tensor<16x1x1xf32>
// CHECK:         "prim.sub"
// CHECK:         "prim.mul"({{.*}}) : (tensor<2x16x5x5xf32>, tensor<16x1x1xf32>) -> tensor<2x16x5x5xf32>
// CHECK-LABEL: func.func @affine
// CHECK-DAG:     "prim.reshape"(%arg2) : (tensor<16xf32>) -> tensor<16x1x1xf32>
// CHECK-DAG:     "prim.reshape"(%arg3) : (tensor<16xf32>) -> tensor<16x1x1xf32>
// CHECK:         %[[Y:.+]] = call @fused_0(
// CHECK-NEXT:    return %[[Y]]
func.func @affine(%x: tensor<2x16x5x5xf32>, %mean: tensor<16x1x1xf32>, %scale: tensor<16xf32>, %inv: tensor<16xf32>) -> tensor<2x16x5x5xf32> {
  %k = "prim.mul"(%scale, %inv) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %kv = "prim.reshape"(%k) : (tensor<16xf32>) -> tensor<16x1x1xf32>
  %c = "prim.sub"(%x, %mean) : (tensor<2x16x5x5xf32>, tensor<16x1x1xf32>) -> tensor<2x16x5x5xf32>
  %y = "prim.mul"(%c, %kv) : (tensor<2x16x5x5xf32>, tensor<16x1x1xf32>) -> tensor<2x16x5x5xf32>
  return %y : tensor<2x16x5x5xf32>
}

// An op with attributes keeps them when it moves.
// CHECK-LABEL: func.func private @fused_1
// CHECK:         "prim.clamp"({{.*}}) {max = 6.000000e+00 : f64, min = 0.000000e+00 : f64} : (tensor<16x1x1xf32>) -> tensor<16x1x1xf32>
// CHECK:         "prim.add"
// CHECK-LABEL: func.func @clamped
// CHECK:         call @fused_1(
func.func @clamped(%x: tensor<2x16x5x5xf32>, %s: tensor<16xf32>) -> tensor<2x16x5x5xf32> {
  %k = "prim.clamp"(%s) {min = 0.0 : f64, max = 6.0 : f64} : (tensor<16xf32>) -> tensor<16xf32>
  %kv = "prim.reshape"(%k) : (tensor<16xf32>) -> tensor<16x1x1xf32>
  %y = "prim.add"(%x, %kv) : (tensor<2x16x5x5xf32>, tensor<16x1x1xf32>) -> tensor<2x16x5x5xf32>
  return %y : tensor<2x16x5x5xf32>
}

// CHECK-LABEL: func.func @used_twice
// CHECK:         %[[K:.+]] = "prim.mul"(%arg2, %arg3) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
// CHECK:         "prim.reshape"(%[[K]])
func.func @used_twice(%x: tensor<2x16x5x5xf32>, %mean: tensor<16x1x1xf32>, %scale: tensor<16xf32>, %inv: tensor<16xf32>) -> (tensor<2x16x5x5xf32>, tensor<16xf32>) {
  %k = "prim.mul"(%scale, %inv) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %kv = "prim.reshape"(%k) : (tensor<16xf32>) -> tensor<16x1x1xf32>
  %c = "prim.sub"(%x, %mean) : (tensor<2x16x5x5xf32>, tensor<16x1x1xf32>) -> tensor<2x16x5x5xf32>
  %y = "prim.mul"(%c, %kv) : (tensor<2x16x5x5xf32>, tensor<16x1x1xf32>) -> tensor<2x16x5x5xf32>
  return %y, %k : tensor<2x16x5x5xf32>, tensor<16xf32>
}

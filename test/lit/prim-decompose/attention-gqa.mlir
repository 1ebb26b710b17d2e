// prim-decompose: grouped-query attention (4 query heads over 2 key/value heads) whose keys and values are
// repeats of k0, v0 (transformers' repeat_kv: reshape, expand imported as an add of zeros or a broadcast,
// reshape) reads k0 and v0 directly: the 2 query heads of a group are 2 rows of one batched matmul, and the
// repeats (which would copy the KV cache twice) are gone. A repeat that something else reads stays.
// RUN: openprim-opt %s -p 'prim-decompose{target=cpu}' | filecheck %s

// CHECK-LABEL: func.func @gqa
// CHECK-NOT:  prim.broadcast
// CHECK:      %[[Q:.+]] = "prim.mul"(%arg0
// CHECK-NEXT: %[[QG:.+]] = "prim.reshape"(%[[Q]]) : (tensor<1x4x1x8xf32>) -> tensor<1x2x2x8xf32>
// CHECK-NEXT: %[[S:.+]] = "prim.matmul"(%[[QG]], %arg1)
// CHECK-SAME: transpose_rhs = 1
// CHECK-SAME: (tensor<1x2x2x8xf32>, tensor<1x2x16x8xf32>) -> tensor<1x2x2x16xf32>
// CHECK-NEXT: %[[SH:.+]] = "prim.reshape"(%[[S]]) : (tensor<1x2x2x16xf32>) -> tensor<1x4x1x16xf32>
// CHECK-NEXT: %[[M:.+]] = "prim.add"(%[[SH]], %arg3)
// CHECK-NEXT: %[[P:.+]] = "prim.softmax"(%[[M]])
// CHECK-NEXT: %[[PG:.+]] = "prim.reshape"(%[[P]]) : (tensor<1x4x1x16xf32>) -> tensor<1x2x2x16xf32>
// CHECK-NEXT: %[[O:.+]] = "prim.matmul"(%[[PG]], %arg2)
// CHECK-SAME: (tensor<1x2x2x16xf32>, tensor<1x2x16x8xf32>) -> tensor<1x2x2x8xf32>
// CHECK-NEXT: %[[OH:.+]] = "prim.reshape"(%[[O]]) : (tensor<1x2x2x8xf32>) -> tensor<1x4x1x8xf32>
// CHECK-NEXT: return %[[OH]]

// The repeated keys are also an output: their repeat stays for it, while the products still read k0 and v0.
// CHECK-LABEL: func.func @keys_read_elsewhere
// CHECK:      %[[K2:.+]] = "prim.add"(%{{.+}}, %{{.+}}) : (tensor<1x2x1x16x8xf32>, tensor<1x2x2x16x8xf32>)
// CHECK-NEXT: %[[K:.+]] = "prim.reshape"(%[[K2]]) : (tensor<1x2x2x16x8xf32>) -> tensor<1x4x16x8xf32>
// CHECK-NOT:  prim.broadcast
// CHECK:      "prim.matmul"(%{{.+}}, %arg1)
// CHECK-SAME: (tensor<1x2x2x8xf32>, tensor<1x2x16x8xf32>) -> tensor<1x2x2x16xf32>
// CHECK:      "prim.matmul"(%{{.+}}, %arg2)
// CHECK:      return %{{.+}}, %[[K]]
func.func @gqa(%q: tensor<1x4x1x8xf32>, %k0: tensor<1x2x16x8xf32>, %v0: tensor<1x2x16x8xf32>, %m: tensor<1x1x1x16xf32>) -> tensor<1x4x1x8xf32> {
  %z = "prim.constant"() {value = dense<0.0> : tensor<1x2x2x16x8xf32>} : () -> tensor<1x2x2x16x8xf32>
  %k1 = "prim.reshape"(%k0) : (tensor<1x2x16x8xf32>) -> tensor<1x2x1x16x8xf32>
  %k2 = "prim.add"(%k1, %z) : (tensor<1x2x1x16x8xf32>, tensor<1x2x2x16x8xf32>) -> tensor<1x2x2x16x8xf32>
  %k = "prim.reshape"(%k2) : (tensor<1x2x2x16x8xf32>) -> tensor<1x4x16x8xf32>
  %v1 = "prim.reshape"(%v0) : (tensor<1x2x16x8xf32>) -> tensor<1x2x1x16x8xf32>
  %v2 = "prim.broadcast"(%v1) : (tensor<1x2x1x16x8xf32>) -> tensor<1x2x2x16x8xf32>
  %v = "prim.reshape"(%v2) : (tensor<1x2x2x16x8xf32>) -> tensor<1x4x16x8xf32>
  %o = "prim.attention"(%q, %k, %v, %m) {scale = 0.35355339059327373 : f64, causal = 0 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (tensor<1x4x1x8xf32>, tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>, tensor<1x1x1x16xf32>) -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}
func.func @keys_read_elsewhere(%q: tensor<1x4x1x8xf32>, %k0: tensor<1x2x16x8xf32>, %v0: tensor<1x2x16x8xf32>) -> (tensor<1x4x1x8xf32>, tensor<1x4x16x8xf32>) {
  %z = "prim.constant"() {value = dense<0.0> : tensor<1x2x2x16x8xf32>} : () -> tensor<1x2x2x16x8xf32>
  %k1 = "prim.reshape"(%k0) : (tensor<1x2x16x8xf32>) -> tensor<1x2x1x16x8xf32>
  %k2 = "prim.add"(%k1, %z) : (tensor<1x2x1x16x8xf32>, tensor<1x2x2x16x8xf32>) -> tensor<1x2x2x16x8xf32>
  %k = "prim.reshape"(%k2) : (tensor<1x2x2x16x8xf32>) -> tensor<1x4x16x8xf32>
  %v1 = "prim.reshape"(%v0) : (tensor<1x2x16x8xf32>) -> tensor<1x2x1x16x8xf32>
  %v2 = "prim.broadcast"(%v1) : (tensor<1x2x1x16x8xf32>) -> tensor<1x2x2x16x8xf32>
  %v = "prim.reshape"(%v2) : (tensor<1x2x2x16x8xf32>) -> tensor<1x4x16x8xf32>
  %o = "prim.attention"(%q, %k, %v) {scale = 0.35355339059327373 : f64, causal = 0 : i64, layout = "BHSD", operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x4x1x8xf32>, tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>) -> tensor<1x4x1x8xf32>
  return %o, %k : tensor<1x4x1x8xf32>, tensor<1x4x16x8xf32>
}

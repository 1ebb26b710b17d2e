// A constant may hold its data in a dense_resource blob (what large weights use), per the verifier's
// own message ("value must be a dense or dense_resource elements attribute").
// RUN: openprim-opt %s --verify-only | filecheck %s

// CHECK-LABEL: func.func @weights
// CHECK:      "prim.constant"() {value = dense_resource<blob1> : tensor<2xf32>} : () -> tensor<2xf32>
// CHECK:      dialect_resources
// CHECK:      blob1: "0x040000000000803F00000040"
func.func @weights() -> tensor<2xf32> {
  %0 = "prim.constant"() {value = dense_resource<blob1> : tensor<2xf32>} : () -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

{-#
  dialect_resources: {
    builtin: {
      blob1: "0x040000000000803F00000040"
    }
  }
#-}

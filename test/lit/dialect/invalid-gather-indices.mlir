// gather's indices are integers: float indices are rejected.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-gather-indices.mlir:[[# @LINE + 3]]:8: error: 'prim.gather' op indices must be integers (i64, i32), got f32{{$}}
// CHECK-NOT: {{.}}
func.func @f(%t: tensor<7x4xf32>, %i: tensor<3xf32>) -> tensor<3x4xf32> {
  %y = "prim.gather"(%t, %i) {axis = 0 : i64} : (tensor<7x4xf32>, tensor<3xf32>) -> tensor<3x4xf32>
  return %y : tensor<3x4xf32>
}

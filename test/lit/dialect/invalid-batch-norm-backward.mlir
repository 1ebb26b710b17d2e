// batch_norm_backward: the saved statistics have one value per channel (3 here).
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-batch-norm-backward.mlir:[[# @LINE + 3]]:9: error: 'prim.batch_norm_backward' op saved_mean must have shape 3, got 4{{$}}
// CHECK-NOT: {{.}}
func.func @f(%dy: tensor<2x3x4x4xf32>, %x: tensor<2x3x4x4xf32>, %s: tensor<3xf32>, %m: tensor<4xf32>, %i: tensor<3xf32>) -> tensor<2x3x4x4xf32> {
  %dx = "prim.batch_norm_backward"(%dy, %x, %s, %m, %i) {layout = "NCHW"} : (tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<4xf32>, tensor<3xf32>) -> tensor<2x3x4x4xf32>
  return %dx : tensor<2x3x4x4xf32>
}

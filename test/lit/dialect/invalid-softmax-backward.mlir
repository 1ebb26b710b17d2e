// softmax_backward: grad_output and the forward's output have one shape.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-softmax-backward.mlir:[[# @LINE + 3]]:9: error: 'prim.softmax_backward' op output 4x9 must have the shape of grad_output 4x8{{$}}
// CHECK-NOT: {{.}}
func.func @f(%dy: tensor<4x8xf32>, %y: tensor<4x9xf32>) -> tensor<4x8xf32> {
  %dx = "prim.softmax_backward"(%dy, %y) {axis = -1} : (tensor<4x8xf32>, tensor<4x9xf32>) -> tensor<4x8xf32>
  return %dx : tensor<4x8xf32>
}

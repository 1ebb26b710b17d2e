// activation_backward: grad_output has the input's shape (no broadcasting).
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-activation-backward.mlir:[[# @LINE + 3]]:9: error: 'prim.activation_backward' op input 1x7 must have the shape of grad_output 5x7{{$}}
// CHECK-NOT: {{.}}
func.func @f(%dy: tensor<5x7xf32>, %x: tensor<1x7xf32>) -> tensor<5x7xf32> {
  %dx = "prim.activation_backward"(%dy, %x) {activation = "silu", activation_params = array<f64>} : (tensor<5x7xf32>, tensor<1x7xf32>) -> tensor<5x7xf32>
  return %dx : tensor<5x7xf32>
}

// An epilogue activation must be one the kernels implement.
// The diagnostic is exactly one line, file:line:col of the op, naming the op; exit status 1.
// RUN: not openprim-opt %s --verify-only 2>&1 | filecheck %s
// CHECK: {{^(.*/)?}}invalid-activation.mlir:[[# @LINE + 3]]:8: error: 'prim.conv2d' op unknown activation 'swish'; expected one of ['clamp', 'elu', 'gelu', 'gelu_tanh', 'hardsigmoid', 'hardswish', 'leaky_relu', 'none', 'relu', 'sigmoid', 'silu', 'tanh']{{$}}
// CHECK-NOT: {{.}}
func.func @f(%x: tensor<1x4x4x4xf32>, %w: tensor<6x4x1x1xf32>) -> tensor<1x6x4x4xf32> {
  %y = "prim.conv2d"(%x, %w) {activation = "swish", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x4x4xf32>, tensor<6x4x1x1xf32>) -> tensor<1x6x4x4xf32>
  return %y : tensor<1x6x4x4xf32>
}

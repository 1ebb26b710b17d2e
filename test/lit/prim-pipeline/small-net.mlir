// prim-pipeline{target=cpu} = prim-fuse, prim-select, prim-tile, prim-lower on a small NCHW net
// (conv + batch_norm + relu, max_pool, flatten, linear + bias, softmax). The result is the launch
// plan: a main of constants, reshapes (views, no kernel) and calls; every kernel an llvm.func with
// bare pointers in `module @kernels`; no prim compute op and no func.func body left anywhere else.
// RUN: openprim-opt %s -p 'prim-pipeline{target=cpu}' | filecheck %s

// CHECK:       func.func private @transpose_0(tensor<1x2x4x4xf32>) -> tensor<1x4x4x2xf32> attributes {prim.kernel}
// CHECK-NEXT:  func.func private @conv2d_1(tensor<1x4x4x2xf32>, tensor<3x3x2x2xf32>, tensor<2xf32>) -> tensor<1x4x4x2xf32> attributes {prim.kernel}
// CHECK-NEXT:  func.func private @max_pool2d_2(tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32> attributes {prim.kernel}
// CHECK-NEXT:  func.func private @transpose_3(tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32> attributes {prim.kernel}
// CHECK-NEXT:  func.func private @matmul_4(tensor<1x8xf32>, tensor<1x8x4xf32>, tensor<4xf32>) -> tensor<1x4xf32> attributes {prim.kernel}
// CHECK-NEXT:  func.func private @softmax_5(tensor<1x4xf32>) -> tensor<1x4xf32> attributes {prim.kernel}

// Batch norm folded (s = scale / sqrt(var) = [1, 1]; b' = -mean * s + shift = [-0.5, 0.5]), relu fused;
// the linear weights re-laid out to [K, N] = 8x4 and packed in one 4-column panel (1x8x4) at compile time, the bias fused.
// CHECK-LABEL: func.func @main(%arg0: tensor<1x2x4x4xf32>) -> tensor<1x4xf32> {
// CHECK-NOT:   "prim.{{(conv2d|batch_norm|relu|max_pool2d|transpose|matmul|add|softmax)}}"
// CHECK-DAG:   %[[B:.+]] = "prim.constant"() {value = dense<[-5.000000e-01, 5.000000e-01]> : tensor<2xf32>}
// CHECK-DAG:   %[[X:.+]] = call @transpose_0(%arg0)
// CHECK-DAG:   %[[W:.+]] = "prim.constant"() {value = dense<5.000000e-01> : tensor<3x3x2x2xf32>}
// CHECK:       %[[C:.+]] = call @conv2d_1(%[[X]], %[[W]], %[[B]])
// CHECK-NEXT:  %[[P:.+]] = call @max_pool2d_2(%[[C]])
// CHECK-NEXT:  %[[T:.+]] = call @transpose_3(%[[P]])
// CHECK-NEXT:  %[[F:.+]] = "prim.reshape"(%[[T]]) : (tensor<1x2x2x2xf32>) -> tensor<1x8xf32>
// CHECK-NEXT:  %[[FB:.+]] = "prim.constant"() {value = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32>}
// CHECK-NEXT:  %[[FW:.+]] = "prim.constant"() {value = dense<2.500000e-01> : tensor<1x8x4xf32>}
// CHECK-NEXT:  %[[L:.+]] = call @matmul_4(%[[F]], %[[FW]], %[[FB]])
// CHECK-NEXT:  %[[S:.+]] = call @softmax_5(%[[L]])
// CHECK-NEXT:  return %[[S]] : tensor<1x4xf32>
// CHECK-NEXT:  }

// CHECK-NEXT:  module @kernels attributes {{[{].*}}prim.target = "cpu"} {
// CHECK-NOT:   func.func
// CHECK:       llvm.func @transpose_0(%arg0: !llvm.ptr, %arg1: !llvm.ptr) attributes {prim.op = "transpose"}
// CHECK-NOT:   func.func
// CHECK:       llvm.func @conv2d_1(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr, %arg3: !llvm.ptr) attributes {prim.op = "conv2d", prim.solver = "conv_direct"}
// CHECK:       omp.parallel
// CHECK:       llvm.intr.fmuladd
// CHECK-NOT:   func.func
// CHECK:       llvm.func @max_pool2d_2(%arg0: !llvm.ptr, %arg1: !llvm.ptr) attributes {prim.op = "max_pool2d"}
// CHECK-NOT:   func.func
// CHECK:       llvm.func @transpose_3(%arg0: !llvm.ptr, %arg1: !llvm.ptr) attributes {prim.op = "transpose"}
// CHECK-NOT:   func.func
// CHECK:       llvm.func @matmul_4(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr, %arg3: !llvm.ptr) attributes {prim.op = "matmul", prim.solver = "gemm_packed"
// CHECK-NOT:   func.func
// CHECK:       llvm.func @softmax_5(%arg0: !llvm.ptr, %arg1: !llvm.ptr) attributes {prim.op = "softmax"}
// CHECK-NOT:   func.func
// CHECK-NOT:   "prim.
func.func @main(%x: tensor<1x2x4x4xf32>) -> tensor<1x4xf32> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<2x2x3x3xf32>} : () -> tensor<2x2x3x3xf32>
  %scale = "prim.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %shift = "prim.constant"() {value = dense<[0.0, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "prim.constant"() {value = dense<[0.5, 0.5]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "prim.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %fc = "prim.constant"() {value = dense<0.25> : tensor<4x8xf32>} : () -> tensor<4x8xf32>
  %fcb = "prim.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> tensor<4xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32>
  %bn = "prim.batch_norm"(%c, %scale, %shift, %mean, %var) {epsilon = 0.0, layout = "NCHW"} : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %r = "prim.relu"(%bn) : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = "prim.max_pool2d"(%r) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0, layout = "NCHW"} : (tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32>
  %f = "prim.reshape"(%p) : (tensor<1x2x2x2xf32>) -> tensor<1x8xf32>
  %l = "prim.matmul"(%f, %fc) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x8xf32>, tensor<4x8xf32>) -> tensor<1x4xf32>
  %a = "prim.add"(%l, %fcb) : (tensor<1x4xf32>, tensor<4xf32>) -> tensor<1x4xf32>
  %s = "prim.softmax"(%a) {axis = 1} : (tensor<1x4xf32>) -> tensor<1x4xf32>
  return %s : tensor<1x4xf32>
}

// prim-fuse,prim-select,prim-tile on a small NCHW net: sigmoid(x) * relu(conv(x) + b).
// Every compute op becomes a kernel: a private declaration {prim.kernel} at the top level, a call in
// the graph, and a destination-passing function over memrefs in `module @kernels`, tiled, threaded
// (scf.forall) and vectorized (vector.fma in the conv, vector transfers in the elementwise kernel).
// RUN: openprim-opt %s -p prim-fuse,prim-select,prim-tile | filecheck %s

// CHECK:       func.func private @transpose_0(tensor<1x2x4x4xf32>) -> tensor<1x4x4x2xf32> attributes {prim.kernel}
// CHECK-NEXT:  func.func private @conv2d_1(tensor<1x4x4x2xf32>, tensor<3x3x2x2xf32>, tensor<2xf32>) -> tensor<1x4x4x2xf32> attributes {prim.kernel}
// CHECK-NEXT:  func.func private @transpose_2(tensor<1x4x4x2xf32>) -> tensor<1x2x4x4xf32> attributes {prim.kernel}
// CHECK-NEXT:  func.func private @fused_elementwise_3(tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> attributes {prim.kernel}

// The graph is now the launch plan: constants and calls, no compute op left.
// CHECK-LABEL: func.func @main(%arg0: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
// CHECK-NOT:   "prim.{{[a-z_0-9]+}}"({{.+}})
// CHECK:       %[[B:.+]] = "prim.constant"() {value = dense<[5.000000e-01, -5.000000e-01]> : tensor<2xf32>}
// CHECK-NEXT:  %[[X:.+]] = call @transpose_0(%arg0) : (tensor<1x2x4x4xf32>) -> tensor<1x4x4x2xf32>
// CHECK-NEXT:  %[[W:.+]] = "prim.constant"() {value = dense<1.000000e+00> : tensor<3x3x2x2xf32>}
// CHECK-NEXT:  %[[Y:.+]] = call @conv2d_1(%[[X]], %[[W]], %[[B]])
// CHECK-NEXT:  %[[T:.+]] = call @transpose_2(%[[Y]])
// CHECK-NEXT:  %[[R:.+]] = call @fused_elementwise_3(%arg0, %[[T]])
// CHECK-NEXT:  return %[[R]]
// CHECK-NEXT:  }
// CHECK-NEXT:  module @kernels attributes {prim.target = "cpu"} {

// CHECK-LABEL: func.func @conv2d_1(%arg0: memref<1x4x4x2xf32>, %arg1: memref<3x3x2x2xf32>, %arg2: memref<2xf32>, %arg3: memref<1x4x4x2xf32>) attributes {prim.op = "conv2d", prim.solver = "conv_direct"} {
// CHECK-NOT:   linalg.
// Threads split the 4 output rows.
// CHECK:       scf.forall (%{{.+}}) = (0) to (4) step ({{[0-9]+}}) shared_outs
// CHECK:       vector.fma %{{.+}}, %{{.+}}, %{{.+}} : vector<{{[0-9]+}}xf32>
// The epilogue: bias add and relu, vectorized.
// CHECK:       arith.addf %{{.+}}, %{{.+}} : vector<{{[0-9x]+}}xf32>
// CHECK-NEXT:  arith.maximumf %{{.+}}, %{{.+}} : vector<{{[0-9x]+}}xf32>
// CHECK:       scf.forall.in_parallel
// CHECK:       bufferization.materialize_in_destination %{{.+}} in restrict writable %arg3
// CHECK-NEXT:  return

// CHECK-LABEL: func.func @fused_elementwise_3(%arg0: memref<1x2x4x4xf32>, %arg1: memref<1x2x4x4xf32>, %arg2: memref<1x2x4x4xf32>) attributes {prim.in_place = [0, 1], prim.op = "fused_elementwise"} {
// CHECK-NOT:   linalg.
// CHECK:       %[[A:.+]] = vector.transfer_read %{{.+}} : tensor<1x2x4x4xf32>, vector<4xf32>
// CHECK-NEXT:  %[[C:.+]] = vector.transfer_read %{{.+}} : tensor<1x2x4x4xf32>, vector<4xf32>
// CHECK-NEXT:  arith.negf %[[A]] : vector<4xf32>
// CHECK-NEXT:  math.exp
// CHECK-NEXT:  arith.addf
// CHECK-NEXT:  %[[S:.+]] = arith.divf
// CHECK-NEXT:  %[[M:.+]] = arith.mulf %[[S]], %[[C]] : vector<4xf32>
// CHECK-NEXT:  vector.transfer_write %[[M]]
// CHECK:       bufferization.materialize_in_destination %{{.+}} in restrict writable %arg2
func.func @main(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x2x3x3xf32>} : () -> tensor<2x2x3x3xf32>
  %b = "prim.constant"() {value = dense<[[[0.5]], [[-0.5]]]> : tensor<2x1x1xf32>} : () -> tensor<2x1x1xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32>
  %a = "prim.add"(%c, %b) : (tensor<1x2x4x4xf32>, tensor<2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %r = "prim.relu"(%a) : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %s = "prim.sigmoid"(%x) : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %m = "prim.mul"(%s, %r) : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  return %m : tensor<1x2x4x4xf32>
}

// The kernel of each solver after prim-select,prim-tile: threads (scf.forall), vector FMAs, no linalg
// op left. Tile sizes and vector widths follow the solver's prim.params (the heuristic's choice),
// so they are not pinned here. The matmul is forced to the gemm solver (its transform schedule; the
// heuristic's gemm_packed is a hand-written kernel: cpu-gemm-packed.mlir).
// RUN: openprim-opt %s -p 'prim-select{solver=gemm},prim-tile' | filecheck %s

// CHECK-LABEL: func.func @gemm(
// CHECK-NEXT:  call @matmul_0(%arg0, %arg1, %arg2)
// CHECK-LABEL: func.func @conv(
// CHECK-NEXT:  call @conv2d_1(%arg0, %arg1)
// CHECK-LABEL: func.func @depthwise(
// CHECK-NEXT:  call @conv2d_2(%arg0, %arg1)
// CHECK:       module @kernels

// CHECK-LABEL: func.func @matmul_0(%arg0: memref<16x8xf32>, %arg1: memref<8x32xf32>, %arg2: memref<32xf32>, %arg3: memref<16x32xf32>) attributes {prim.op = "matmul", prim.solver = "gemm"}
// CHECK:       scf.forall (%{{.+}}) = (0) to (16) step ({{[0-9]+}}) shared_outs
// CHECK:       vector.fma {{.*}} : vector<{{[0-9]+}}xf32>
// CHECK-NOT:   linalg.
// CHECK:       return

// conv_direct.
// CHECK-LABEL: func.func @conv2d_1(%arg0: memref<1x4x4x2xf32>, %arg1: memref<3x3x2x8xf32>, %arg2: memref<1x4x4x8xf32>) attributes {prim.op = "conv2d", prim.solver = "conv_direct"}
// CHECK:       scf.forall (%{{.+}}) = (0) to (4) step ({{[0-9]+}}) shared_outs
// CHECK:       vector.fma {{.*}} : vector<{{[0-9]+}}xf32>
// CHECK-NOT:   linalg.
// CHECK:       return

// conv_depthwise: its hand-written kernel, vectorized along the channels (cpu-depthwise.mlir).
// CHECK-LABEL: func.func @conv2d_2(%arg0: memref<1x4x4x8xf32>, %arg1: memref<3x3x1x8xf32>, %arg2: memref<1x4x4x8xf32>) attributes {prim.op = "conv2d", prim.solver = "conv_depthwise"}
// CHECK:       scf.forall (%{{.+}}) in (4)
// CHECK:       vector.fma {{.*}} : vector<8xf32>
// CHECK-NOT:   linalg.
// CHECK:       return

func.func @gemm(%a: tensor<16x8xf32>, %b: tensor<8x32xf32>, %c: tensor<32xf32>) -> tensor<16x32xf32> {
  %y = "prim.matmul"(%a, %b, %c) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<16x8xf32>, tensor<8x32xf32>, tensor<32xf32>) -> tensor<16x32xf32>
  return %y : tensor<16x32xf32>
}
func.func @conv(%x: tensor<1x4x4x2xf32>, %w: tensor<3x3x2x8xf32>) -> tensor<1x4x4x8xf32> {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 1, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x4x2xf32>, tensor<3x3x2x8xf32>) -> tensor<1x4x4x8xf32>
  return %y : tensor<1x4x4x8xf32>
}
func.func @depthwise(%x: tensor<1x4x4x8xf32>, %w: tensor<3x3x1x8xf32>) -> tensor<1x4x4x8xf32> {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 8, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x4x8xf32>, tensor<3x3x1x8xf32>) -> tensor<1x4x4x8xf32>
  return %y : tensor<1x4x4x8xf32>
}

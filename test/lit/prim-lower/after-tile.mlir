// prim-lower keeps the kernels prim-tile made (name, solver; the call carries the layer's choice, which the
// plan records per step) and lowers them: the scf.forall of the
// threads becomes an OpenMP parallel loop, the vector FMAs llvm.intr.fmuladd on vectors.
// With threads=false the forall is a plain loop (no OpenMP). prim-lower alone makes the untiled
// reference kernel instead (no solver, no OpenMP, no vectors).
// RUN: openprim-opt %s -p prim-select,prim-tile,prim-lower | filecheck %s
// RUN: openprim-opt %s -p 'prim-select,prim-tile,prim-lower{threads=false}' | filecheck %s --check-prefix=SERIAL
// RUN: openprim-opt %s -p prim-lower | filecheck %s --check-prefix=REF

// CHECK-LABEL: func.func @main(
// CHECK-NEXT:  call @conv2d_0(%arg0, %arg1) {prim.params = {{[{].*[}]}}, prim.problem = "conv2d-1x2x4x4-k8-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none", prim.solver = "conv_direct"} : (tensor<1x4x4x2xf32>, tensor<3x3x2x8xf32>) -> tensor<1x4x4x8xf32>
// CHECK:       module @kernels
// CHECK-NOT:   func.func
// CHECK:       llvm.func @conv2d_0(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr) attributes {prim.op = "conv2d", prim.solver = "conv_direct"}
// CHECK:       omp.parallel
// CHECK-NEXT:  omp.wsloop
// CHECK:       llvm.intr.fmuladd({{.*}}) : (vector<[[W:[0-9]+]]xf32>, vector<[[W]]xf32>, vector<[[W]]xf32>) -> vector<[[W]]xf32>
// CHECK:       llvm.return

// SERIAL:      llvm.func @conv2d_0(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr) attributes {prim.op = "conv2d", prim.solver = "conv_direct"}
// SERIAL-NOT:  omp.
// SERIAL:      llvm.intr.fmuladd({{.*}}) : (vector<[[W:[0-9]+]]xf32>, vector<[[W]]xf32>, vector<[[W]]xf32>) -> vector<[[W]]xf32>
// SERIAL-NOT:  omp.

// REF:         llvm.func @conv2d_0(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr) attributes {prim.op = "conv2d"} {
// REF-NOT:     omp.
// REF-NOT:     vector<
func.func @main(%x: tensor<1x4x4x2xf32>, %w: tensor<3x3x2x8xf32>) -> tensor<1x4x4x8xf32> {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 1, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x4x2xf32>, tensor<3x3x2x8xf32>) -> tensor<1x4x4x8xf32>
  return %y : tensor<1x4x4x8xf32>
}

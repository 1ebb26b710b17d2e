// Residual norms: layer_norm/rms_norm(add(x, r)) with x and r of the norm's shape -> the norm with
// residual = r (its last operand), one row kernel that reads x + r. Not when the sum has another use
// (ops have one result: the sum would have to be written as well), nor for a broadcasting add, nor
// when the add is already a GEMM's residual epilogue.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// Post-LN (BERT): layer_norm(x + r) with scale and shift: every operand segment present.
// CHECK-LABEL: func.func @layer_norm_residual
// CHECK-NOT:  "prim.add"
// CHECK:      %[[Y:.+]] = "prim.layer_norm"(%arg0, %arg2, %arg3, %arg1)
// CHECK-SAME: epsilon = 1.000000e-05 : f64, normalized_ndim = 1 : i64
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 1>
// CHECK-NEXT: return %[[Y]]
func.func @layer_norm_residual(%x: tensor<2x5x37xf32>, %r: tensor<2x5x37xf32>, %s: tensor<37xf32>, %t: tensor<37xf32>) -> tensor<2x5x37xf32> {
  %h = "prim.add"(%x, %r) : (tensor<2x5x37xf32>, tensor<2x5x37xf32>) -> tensor<2x5x37xf32>
  %y = "prim.layer_norm"(%h, %s, %t) {epsilon = 1.0e-5, normalized_ndim = 1, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<2x5x37xf32>, tensor<37xf32>, tensor<37xf32>) -> tensor<2x5x37xf32>
  return %y : tensor<2x5x37xf32>
}

// rms_norm with its scale, in f16, over two trailing dims.
// CHECK-LABEL: func.func @rms_norm_residual
// CHECK-NOT:  "prim.add"
// CHECK:      %[[Y:.+]] = "prim.rms_norm"(%arg0, %arg2, %arg1)
// CHECK-SAME: normalized_ndim = 2 : i64
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1>
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm_residual(%x: tensor<3x4x9xf16>, %r: tensor<3x4x9xf16>, %s: tensor<4x9xf16>) -> tensor<3x4x9xf16> {
  %h = "prim.add"(%x, %r) : (tensor<3x4x9xf16>, tensor<3x4x9xf16>) -> tensor<3x4x9xf16>
  %y = "prim.rms_norm"(%h, %s) {epsilon = 1.0e-6, normalized_ndim = 2, operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<3x4x9xf16>, tensor<4x9xf16>) -> tensor<3x4x9xf16>
  return %y : tensor<3x4x9xf16>
}

// Without scale: segment sizes 1, 0, 1.
// CHECK-LABEL: func.func @rms_norm_plain
// CHECK:      %[[Y:.+]] = "prim.rms_norm"(%arg1, %arg0)
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 0, 1>
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm_plain(%x: tensor<6x37xf32>, %r: tensor<6x37xf32>) -> tensor<6x37xf32> {
  %h = "prim.add"(%r, %x) : (tensor<6x37xf32>, tensor<6x37xf32>) -> tensor<6x37xf32>
  %y = "prim.rms_norm"(%h) {epsilon = 1.0e-6, normalized_ndim = 1, operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<6x37xf32>) -> tensor<6x37xf32>
  return %y : tensor<6x37xf32>
}

// Pre-LN: the sum is also returned (the next block's residual): the add stays, the norm reads it.
// CHECK-LABEL: func.func @sum_has_other_use
// CHECK:      %[[H:.+]] = "prim.add"(%arg0, %arg1)
// CHECK-NEXT: %[[Y:.+]] = "prim.rms_norm"(%[[H]])
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 0, 0>
// CHECK-NEXT: return %[[Y]], %[[H]]
func.func @sum_has_other_use(%x: tensor<6x37xf32>, %r: tensor<6x37xf32>) -> (tensor<6x37xf32>, tensor<6x37xf32>) {
  %h = "prim.add"(%x, %r) : (tensor<6x37xf32>, tensor<6x37xf32>) -> tensor<6x37xf32>
  %y = "prim.rms_norm"(%h) {epsilon = 1.0e-6, normalized_ndim = 1, operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<6x37xf32>) -> tensor<6x37xf32>
  return %y, %h : tensor<6x37xf32>, tensor<6x37xf32>
}

// A broadcasting add (a per-feature vector) is not a residual.
// CHECK-LABEL: func.func @broadcast_add_stays
// CHECK:      %[[H:.+]] = "prim.add"(%arg0, %arg1)
// CHECK-NEXT: %[[Y:.+]] = "prim.layer_norm"(%[[H]])
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 0, 0, 0>
func.func @broadcast_add_stays(%x: tensor<6x37xf32>, %b: tensor<37xf32>) -> tensor<6x37xf32> {
  %h = "prim.add"(%x, %b) : (tensor<6x37xf32>, tensor<37xf32>) -> tensor<6x37xf32>
  %y = "prim.layer_norm"(%h) {epsilon = 1.0e-5, normalized_ndim = 1, operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (tensor<6x37xf32>) -> tensor<6x37xf32>
  return %y : tensor<6x37xf32>
}

// add(matmul, z) becomes the matmul's residual epilogue first (program order); the norm then reads the
// matmul: two kernels either way.
// CHECK-LABEL: func.func @gemm_epilogue_first
// CHECK:      %[[M:.+]] = "prim.matmul"(%arg0, %arg1, %arg2)
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 0, 1>
// CHECK-NEXT: %[[Y:.+]] = "prim.layer_norm"(%[[M]])
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 0, 0, 0>
func.func @gemm_epilogue_first(%a: tensor<6x8xf32>, %w: tensor<8x37xf32>, %z: tensor<6x37xf32>) -> tensor<6x37xf32> {
  %m = "prim.matmul"(%a, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<6x8xf32>, tensor<8x37xf32>) -> tensor<6x37xf32>
  %h = "prim.add"(%m, %z) : (tensor<6x37xf32>, tensor<6x37xf32>) -> tensor<6x37xf32>
  %y = "prim.layer_norm"(%h) {epsilon = 1.0e-5, normalized_ndim = 1, operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (tensor<6x37xf32>) -> tensor<6x37xf32>
  return %y : tensor<6x37xf32>
}

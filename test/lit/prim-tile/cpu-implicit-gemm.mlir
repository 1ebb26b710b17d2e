// conv_implicit_gemm on the CPU: prim-tile takes the solver's whole kernel (kernels/cpu/implicit_gemm.py), a
// vector-dialect loop nest on memrefs: threads over the (n, oh, group) rows (scf.forall), register tiles
// of vector.fma with the input read in place (no im2col buffer, no padded copy, no linalg), the epilogue
// on the accumulators, one vector store per accumulator. layout=keep: the NCHW convolution is not
// wrapped in transposes; its tile runs along the output columns (stride 2: the input span is shuffled).
// RUN: openprim-opt %s -p 'prim-select{target=cpu:x86-64-v3 solver=conv_implicit_gemm layout=keep},prim-tile{target=cpu:x86-64-v3}' | filecheck %s

// CHECK-LABEL: func.func @grouped(
// CHECK:       %[[W:.+]] = call @transpose_0(
// CHECK-NEXT:  call @conv2d_1(%arg0, %[[W]], %arg2)
// CHECK-LABEL: func.func @nchw(
// CHECK-NEXT:  call @conv2d_2(%arg0, %arg1, %arg2)
// CHECK:       module @kernels

// NHWC, 4 groups of 2 -> 3 channels: 24 rows (n, oh, group); lanes = the group's 3 output channels. The
// filter, a run-time value, comes in blocks of the tile's 3 channels (KRSC3k, transposed by transpose_0).
// CHECK-LABEL: func.func @conv2d_1(%arg0: memref<1x6x7x8xf32>, %arg1: memref<4x3x3x2x3xf32>, %arg2: memref<12xf32>, %arg3: memref<1x6x7x12xf32>) attributes {prim.op = "conv2d", prim.solver = "conv_implicit_gemm"}
// CHECK-NOT:   linalg.
// CHECK:       scf.forall (%{{.+}}) in (24)
// CHECK:       scf.for {{.*}} -> (vector<3xf32>, vector<3xf32>
// CHECK:       vector.load {{.*}} : memref<216xf32>, vector<3xf32>
// CHECK:       memref.load {{.*}} : memref<336xf32>
// CHECK-NEXT:  vector.broadcast {{.*}} : f32 to vector<3xf32>
// CHECK-NEXT:  vector.fma {{.*}} : vector<3xf32>
// CHECK:       arith.maximumf {{.*}} : vector<3xf32>
// CHECK:       vector.store {{.*}} : memref<504xf32>, vector<3xf32>
// CHECK-NOT:   {{linalg\.|memref\.alloc|tensor\.}}
// CHECK:       return

// NCHW, f16, stride 2, residual: lanes = 8 output columns (then a tail of 2), f32 accumulation,
// rounded to f16 at the store.
// CHECK-LABEL: func.func @conv2d_2(%arg0: memref<1x4x9x20xf16>, %arg1: memref<3x3x4x6xf16>, %arg2: memref<1x6x5x10xf16>, %arg3: memref<1x6x5x10xf16>) attributes {prim.in_place = 2 : i64, prim.op = "conv2d", prim.solver = "conv_implicit_gemm"}
// CHECK-NOT:   linalg.
// CHECK:       scf.forall (%{{.+}}) in (5)
// CHECK:       vector.load {{.*}} : memref<720xf16>, vector<{{[0-9]+}}xf16>
// CHECK:       vector.shuffle
// CHECK:       vector.fma {{.*}} : vector<8xf32>
// CHECK:       arith.truncf {{.*}} : vector<8xf32> to vector<8xf16>
// CHECK-NEXT:  vector.store {{.*}} : memref<300xf16>, vector<8xf16>
// CHECK:       vector.store {{.*}} : memref<300xf16>, vector<2xf16>
// CHECK-NOT:   {{linalg\.|memref\.alloc|tensor\.}}
// CHECK:       return

func.func @grouped(%x: tensor<1x6x7x8xf32>, %w: tensor<3x3x2x12xf32>, %b: tensor<12xf32>) -> tensor<1x6x7x12xf32> {
  %y = "prim.conv2d"(%x, %w, %b) {activation = "relu", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 4, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x6x7x8xf32>, tensor<3x3x2x12xf32>, tensor<12xf32>) -> tensor<1x6x7x12xf32>
  return %y : tensor<1x6x7x12xf32>
}
func.func @nchw(%x: tensor<1x4x9x20xf16>, %w: tensor<3x3x4x6xf16>, %r: tensor<1x6x5x10xf16>) -> tensor<1x6x5x10xf16> {
  %y = "prim.conv2d"(%x, %w, %r) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0, 1>} : (tensor<1x4x9x20xf16>, tensor<3x3x4x6xf16>, tensor<1x6x5x10xf16>) -> tensor<1x6x5x10xf16>
  return %y : tensor<1x6x5x10xf16>
}

// gemm_packed on the CPU: prim-tile takes the solver's whole kernel (kernels/cpu/gemm.py), a vector-dialect
// loop nest on memrefs. Threads over (column part, batch, row chunk) items (scf.forall); per item a stack
// buffer (memref.alloca in an alloca_scope) holds one packed column panel of B at a time; register tiles
// of MT rows x NT columns as vector<8xf32> accumulators (a narrower one for the N % 8 tail), the k loop
// unrolled 4 times; the epilogue on the accumulators, one vector store per accumulator.
// On an AVX-512 CPU (x86-64-v4) the accumulators are vector<16xf32> in tiles of 8 x 32 (16 of the 32 registers).
// RUN: openprim-opt %s -p 'prim-select{target=cpu:x86-64-v3},prim-tile{target=cpu:x86-64-v3}' | filecheck %s
// RUN: openprim-opt %s -p 'prim-select{target=cpu:x86-64-v4},prim-tile{target=cpu:x86-64-v4}' | filecheck %s --check-prefix=V4

// CHECK-LABEL: func.func @attention(
// CHECK-NEXT:  call @matmul_0(%arg0, %arg1)
// CHECK-LABEL: func.func @linear(
// CHECK-NEXT:  call @matmul_1(%arg0, %arg1, %arg2)
// CHECK-LABEL: func.func @ffn(
// CHECK-NEXT:  call @matmul_2(%arg0, %arg1, %arg2)
// CHECK:       module @kernels

// Q K^T, batched and transposed: 2 batches of 5 rows (fewer than MT = 6: the tail tile only) -> 2 items;
// the transposed rhs is gathered row by row into the packed panel (16 columns, then the 3 of the tail).
// CHECK-LABEL: func.func @matmul_0(%arg0: memref<2x5x16xf32>, %arg1: memref<2x19x16xf32>, %arg2: memref<2x5x19xf32>) attributes {prim.op = "matmul", prim.solver = "gemm_packed"}
// CHECK-NOT:   linalg.
// CHECK:       scf.forall (%{{.+}}) in (2)
// CHECK:       memref.alloca_scope
// CHECK-NEXT:  memref.alloca() {alignment = 64 : i64} : memref<256xf32>
// CHECK:       vector.from_elements {{.*}} : vector<16xf32>
// CHECK:       scf.for {{.*}} -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
// CHECK:       vector.load %alloca[{{.*}}] : memref<256xf32>, vector<8xf32>
// CHECK:       vector.fma {{.*}} : vector<8xf32>
// CHECK:       vector.store {{.*}} : memref<190xf32>, vector<8xf32>
// CHECK:       vector.from_elements {{.*}} : vector<3xf32>
// CHECK:       vector.fma {{.*}} : vector<3xf32>
// CHECK:       vector.store {{.*}} : memref<190xf32>, vector<3xf32>
// CHECK-NOT:   {{linalg\.|memref\.alloc\(|tensor\.}}
// CHECK:       return

// f16 linear layer (weights given at run time) + bias + relu: 13 rows = 2 tiles of 6 + a tail row, in
// one chunk, so the 2 column panels are split between the 2 threads (2 items); f16 widened at the
// packing and the A loads, the result rounded to f16 at the store.
// CHECK-LABEL: func.func @matmul_1(%arg0: memref<13x7xf16>, %arg1: memref<7x32xf16>, %arg2: memref<32xf16>, %arg3: memref<13x32xf16>) attributes {prim.op = "matmul", prim.solver = "gemm_packed"}
// CHECK:       scf.forall (%{{.+}}) in (2)
// CHECK:       memref.alloca() {alignment = 64 : i64} : memref<112xf32>
// CHECK:       arith.extf {{.*}} : vector<16xf16> to vector<16xf32>
// CHECK:       arith.extf {{.*}} : f16 to f32
// CHECK:       vector.fma {{.*}} : vector<8xf32>
// CHECK:       arith.maximumf {{.*}} : vector<8xf32>
// CHECK-NEXT:  arith.truncf {{.*}} : vector<8xf32> to vector<8xf16>
// CHECK-NEXT:  vector.store {{.*}} : memref<416xf16>, vector<8xf16>
// CHECK:       return

// A GELU epilogue: erf as a rational polynomial in vector FMAs (not math.erf: scalar libm calls).
// CHECK-LABEL: func.func @matmul_2(
// CHECK:       vector.fma {{.*}} : vector<8xf32>
// CHECK:       arith.maximumf {{.*}} : vector<8xf32>
// CHECK-NEXT:  arith.minimumf {{.*}} : vector<8xf32>
// CHECK:       math.fma {{.*}} : vector<8xf32>
// CHECK:       arith.divf {{.*}} : vector<8xf32>
// CHECK-NOT:   math.erf
// CHECK:       return

// The f16 linear layer on AVX-512: one 32-column panel, 13 rows = one tile of 8 and a tail of 5; 8 x 2
// accumulators of 16 lanes.
// V4-LABEL: func.func @matmul_1(
// V4:       scf.forall (%{{.+}}) in (1)
// V4:       memref.alloca() {alignment = 64 : i64} : memref<224xf32>
// V4:       scf.for {{.*}} -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// V4:       vector.fma {{.*}} : vector<16xf32>
// V4:       arith.truncf {{.*}} : vector<16xf32> to vector<16xf16>
// V4:       return

func.func @attention(%q: tensor<2x5x16xf32>, %k: tensor<2x19x16xf32>) -> tensor<2x5x19xf32> {
  %y = "prim.matmul"(%q, %k) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x5x16xf32>, tensor<2x19x16xf32>) -> tensor<2x5x19xf32>
  return %y : tensor<2x5x19xf32>
}

func.func @linear(%x: tensor<13x7xf16>, %w: tensor<7x32xf16>, %c: tensor<32xf16>) -> tensor<13x32xf16> {
  %y = "prim.matmul"(%x, %w, %c) {activation = "relu", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<13x7xf16>, tensor<7x32xf16>, tensor<32xf16>) -> tensor<13x32xf16>
  return %y : tensor<13x32xf16>
}

func.func @ffn(%x: tensor<13x7xf32>, %w: tensor<7x32xf32>, %c: tensor<32xf32>) -> tensor<13x32xf32> {
  %y = "prim.matmul"(%x, %w, %c) {activation = "gelu", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<13x7xf32>, tensor<7x32xf32>, tensor<32xf32>) -> tensor<13x32xf32>
  return %y : tensor<13x32xf32>
}

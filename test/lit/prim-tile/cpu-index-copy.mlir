// index_copy on the CPU (kernels/cpu/index_copy.py): a KV cache step writes its S rows only. The kernel
// names its input in prim.in_place (the memory plan may give the output the cache's buffer: a state
// carried between calls, driver/plan.py), compares the two pointers and copies the whole input only when
// they differ; then, per (outer block, update row), the wrapped index, a range check (an index out of range
// writes nothing: the plan's bounds_check reports it) and vector<8> copies of the row, a scalar tail after.
// RUN: openprim-opt %s -p prim-tile | filecheck %s

// CHECK-LABEL: func.func @step(
// CHECK-NEXT:  %[[R:.+]] = call @index_copy_0(%arg0, %arg1, %arg2)
// CHECK-NEXT:  return %[[R]]
// CHECK:       module @kernels

// B*H = 6 blocks of 16 rows of 8: one row written per block, one vector each.
// CHECK-LABEL: func.func @index_copy_0(%arg0: memref<2x3x16x8xf32>, %arg1: memref<1xi64>, %arg2: memref<2x3x1x8xf32>, %arg3: memref<2x3x16x8xf32>) attributes {prim.in_place = 0 : i64, prim.op = "index_copy"}
// CHECK:       %[[P0:.+]] = memref.extract_aligned_pointer_as_index %arg0
// CHECK-NEXT:  %[[P1:.+]] = memref.extract_aligned_pointer_as_index %arg3
// CHECK-NEXT:  %[[SAME:.+]] = arith.cmpi eq, %[[P0]], %[[P1]] : index
// CHECK-NEXT:  scf.if %[[SAME]] {
// CHECK-NEXT:  } else {
// CHECK-NEXT:    memref.copy %arg0, %arg3
// CHECK:       scf.for %[[O:.+]] = %c0 to %c6 step %c1 {
// CHECK:         memref.load %arg1[%c0] : memref<1xi64>
// CHECK:         arith.cmpi slt, %{{.+}}, %c16 : index
// CHECK:         scf.if
// CHECK:           vector.load {{.*}} : memref<48xf32>, vector<8xf32>
// CHECK:           vector.store {{.*}} : memref<768xf32>, vector<8xf32>
// CHECK-NOT:   memref.copy

// Three update rows of 5 (f16) into 9 rows along axis 0 of [9, 5]: a scalar tail only; threads would split
// the (block, row) pairs of a larger update.
// CHECK-LABEL: func.func @index_copy_1(
// CHECK:       scf.for %[[J:.+]] = %c0 to %c3 step %c1 {
// CHECK:         memref.load %arg1[%[[J]]] : memref<3xi32>
// CHECK-NOT:     vector.load
// CHECK:         memref.load {{.*}} : memref<15xf16>
// CHECK:         memref.store {{.*}} : memref<45xf16>

func.func @step(%cache: tensor<2x3x16x8xf32>, %pos: tensor<1xi64>, %k: tensor<2x3x1x8xf32>) -> tensor<2x3x16x8xf32> {
  %0 = "prim.index_copy"(%cache, %pos, %k) {axis = 2 : i64} : (tensor<2x3x16x8xf32>, tensor<1xi64>, tensor<2x3x1x8xf32>) -> tensor<2x3x16x8xf32>
  return %0 : tensor<2x3x16x8xf32>
}
func.func @rows(%x: tensor<9x5xf16>, %i: tensor<3xi32>, %u: tensor<3x5xf16>) -> tensor<9x5xf16> {
  %0 = "prim.index_copy"(%x, %i, %u) {axis = 0 : i64} : (tensor<9x5xf16>, tensor<3xi32>, tensor<3x5xf16>) -> tensor<9x5xf16>
  return %0 : tensor<9x5xf16>
}

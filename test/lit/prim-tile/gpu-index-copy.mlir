// index_copy on GPUs (kernels/gpu/index_copy.py): two launches. The first copies the input to the output
// (grid-stride, 16-byte vectors) only where their pointers differ: where the memory plan gave the output
// the input's buffer (prim.in_place: a KV cache carried as state) its threads exit at once, and
// prim.copy_launch names that launch, which the runtime then leaves out. The second
// writes the update rows, one vector a thread: the index wrapped from the end and range-checked (an index
// out of range writes nothing; the plan's bounds_check reports it).
// RUN: openprim-opt %s -p 'prim-tile{target=nvvm:sm_90}' | filecheck %s

// CHECK-LABEL: func.func @index_copy_0(%arg0: memref<2x3x16x8xf32>, %arg1: memref<1xi64>, %arg2: memref<2x3x1x8xf32>, %arg3: memref<2x3x16x8xf32>) attributes {prim.copy_launch = 0 : i64, prim.in_place = 0 : i64, prim.op = "index_copy"}
// CHECK:       gpu.launch
// CHECK:         %[[P0:.+]] = memref.extract_aligned_pointer_as_index %arg0
// CHECK-NEXT:    %[[P1:.+]] = memref.extract_aligned_pointer_as_index %arg3
// CHECK-NEXT:    %[[DIFF:.+]] = arith.cmpi ne, %[[P0]], %[[P1]] : index
// CHECK-NEXT:    scf.if %[[DIFF]] {
// 768 elements: 192 vectors of 4, strided by the grid's 256 threads
// CHECK:           scf.for %{{.+}} = %{{.+}} to %c192 step %c256 {
// CHECK:             vector.load {{.*}} {alignment = 16 : i64} : memref<768xf32>, vector<4xf32>
// CHECK-NEXT:        vector.store {{.*}} {alignment = 16 : i64} : memref<768xf32>, vector<4xf32>
// CHECK:         gpu.terminator
// 6 blocks x 1 row x 2 vectors = 12 threads of the rows' launch
// CHECK:       gpu.launch
// CHECK:         arith.cmpi ult, %{{.+}}, %c12 : index
// CHECK:         memref.load %arg1[%{{.+}}] : memref<1xi64>
// CHECK:         arith.cmpi slt, %{{.+}}, %c16 : index
// CHECK:         scf.if
// CHECK:           vector.load {{.*}} : memref<48xf32>, vector<4xf32>
// CHECK:           vector.store {{.*}} : memref<768xf32>, vector<4xf32>
// CHECK:         gpu.terminator

func.func @step(%cache: tensor<2x3x16x8xf32>, %pos: tensor<1xi64>, %k: tensor<2x3x1x8xf32>) -> tensor<2x3x16x8xf32> {
  %0 = "prim.index_copy"(%cache, %pos, %k) {axis = 2 : i64} : (tensor<2x3x16x8xf32>, tensor<1xi64>, tensor<2x3x1x8xf32>) -> tensor<2x3x16x8xf32>
  return %0 : tensor<2x3x16x8xf32>
}

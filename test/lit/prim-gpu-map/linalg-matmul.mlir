// A linalg op on memrefs, as prim-lower hands it over: convert-linalg-to-parallel-loops makes an
// scf.parallel over the output (i, j) with the reduction as an scf.for inside; prim-gpu-map maps the
// 4 x 6 = 24 outputs to one block of 32 threads, j = lin mod 6 (fastest), i = lin / 6, and keeps the
// k loop serial in each thread.
// RUN: openprim-opt %s -p 'func.func(convert-linalg-to-parallel-loops),prim-gpu-map' | filecheck %s

// CHECK-LABEL: func.func @mm(
// CHECK-NOT:   linalg.
// CHECK:       scf.parallel (%{{.+}}, %{{.+}}) = (%{{.+}}, %{{.+}}) to (%[[NB:.+]], %[[NT:.+]]) step
// CHECK:       %[[LIN:.+]] = arith.addi
// CHECK-NEXT:  %[[N:.+]] = arith.constant 24 : index
// CHECK-NEXT:  %[[IN:.+]] = arith.cmpi ult, %[[LIN]], %[[N]] : index
// CHECK-NEXT:  scf.if %[[IN]] {
// CHECK-NEXT:  %[[C6:.+]] = arith.constant 6 : index
// CHECK-NEXT:  %[[J:.+]] = arith.remui %[[LIN]], %[[C6]] : index
// CHECK-NEXT:  %[[C6B:.+]] = arith.constant 6 : index
// CHECK-NEXT:  %[[I:.+]] = arith.divui %[[LIN]], %[[C6B]] : index
// CHECK-NEXT:  scf.for %[[K:.+]] = %{{.+}} to %{{.+}} step %{{.+}} {
// CHECK-NEXT:  memref.load %arg0[%[[I]], %[[K]]] : memref<4x8xf32>
// CHECK-NEXT:  memref.load %arg1[%[[K]], %[[J]]] : memref<8x6xf32>
// CHECK-NEXT:  memref.load %arg2[%[[I]], %[[J]]] : memref<4x6xf32>
// CHECK:       memref.store %{{.+}}, %arg2[%[[I]], %[[J]]] : memref<4x6xf32>
// CHECK:       mapping = [#gpu.loop_dim_map<processor = block_x, {{.*}}>, #gpu.loop_dim_map<processor = thread_x, {{.*}}>]
// CHECK-NOT:   scf.parallel
func.func @mm(%a: memref<4x8xf32>, %b: memref<8x6xf32>, %c: memref<4x6xf32>) {
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x6xf32>) outs(%c : memref<4x6xf32>)
  return
}

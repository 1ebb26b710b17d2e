// prim-gpu-map leaves only buffers and launches on the host: serial top-level code (here a reduction
// loop and the store of its result) runs in a one-thread launch, behind the guard `lin < 1`; the
// buffer's alloc/dealloc stay outside. A gpu.launch already written is left alone, as is an
// scf.parallel that already has a mapping.
// RUN: openprim-opt %s -p prim-gpu-map | filecheck %s

// CHECK-LABEL: func.func @sum(
// CHECK:       %[[TMP:.+]] = memref.alloc() : memref<f32>
// CHECK-NOT:   scf.for
// CHECK:       scf.parallel (%[[B:.+]], %[[T:.+]]) = (%{{.+}}, %{{.+}}) to (%[[ONE:.+]], %[[C32:.+]]) step
// CHECK:       %[[LIN:.+]] = arith.addi %{{.+}}, %[[T]] : index
// CHECK-NEXT:  %[[N:.+]] = arith.constant 1 : index
// CHECK-NEXT:  %[[IN:.+]] = arith.cmpi ult, %[[LIN]], %[[N]] : index
// CHECK-NEXT:  scf.if %[[IN]] {
// CHECK-NEXT:  %[[S:.+]] = scf.for
// CHECK:       memref.store %[[S]], %[[TMP]][] : memref<f32>
// CHECK-NEXT:  }
// CHECK-NEXT:  scf.reduce
// CHECK-NEXT:  } {mapping = [#gpu.loop_dim_map<processor = block_x, {{.*}}>, #gpu.loop_dim_map<processor = thread_x, {{.*}}>]}
// CHECK-NEXT:  gpu.launch blocks(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %c1, %{{.+}} = %c1, %{{.+}} = %c1) threads(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %c1, %{{.+}} = %c1, %{{.+}} = %c1) {
// CHECK-NEXT:  %[[V:.+]] = memref.load %[[TMP]][] : memref<f32>
// CHECK-NEXT:  memref.store %[[V]], %arg1[] : memref<f32>
// CHECK-NEXT:  gpu.terminator
// CHECK-NEXT:  }
// CHECK-NEXT:  memref.dealloc %[[TMP]] : memref<f32>
// CHECK-NEXT:  return

// CHECK-LABEL: func.func @mapped(
// CHECK-NOT:   scf.if
// CHECK:       scf.parallel (%[[I:.+]]) = (%{{.+}}) to (%{{.+}}) step (%{{.+}}) {
// CHECK-NEXT:  memref.store %{{.+}}, %arg0[%[[I]]] : memref<8xf32>
// CHECK-NEXT:  scf.reduce
// CHECK-NEXT:  } {mapping = [#gpu.loop_dim_map<processor = thread_x, {{.*}}>]}
// CHECK-NEXT:  return
func.func @sum(%a: memref<16xf32>, %out: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %zero = arith.constant 0.0 : f32
  %tmp = memref.alloc() : memref<f32>
  %s = scf.for %i = %c0 to %c16 step %c1 iter_args(%acc = %zero) -> f32 {
    %x = memref.load %a[%i] : memref<16xf32>
    %n = arith.addf %acc, %x : f32
    scf.yield %n : f32
  }
  memref.store %s, %tmp[] : memref<f32>
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) {
    %v = memref.load %tmp[] : memref<f32>
    memref.store %v, %out[] : memref<f32>
    gpu.terminator
  }
  memref.dealloc %tmp : memref<f32>
  return
}

func.func @mapped(%a: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %one = arith.constant 1.0 : f32
  scf.parallel (%i) = (%c0) to (%c8) step (%c1) {
    memref.store %one, %a[%i] : memref<8xf32>
    scf.reduce
  } {mapping = [#gpu.loop_dim_map<processor = thread_x, map = (d0) -> (d0), bound = (d0) -> (d0)>]}
  return
}

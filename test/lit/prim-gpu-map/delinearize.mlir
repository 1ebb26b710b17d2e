// prim-gpu-map: a top-level scf.parallel nest of any rank becomes one 2-d scf.parallel mapped to
// (block_x, thread_x): ceil(total / T) blocks of T threads (T: a multiple of 32, at most threads=),
// lin = block * T + thread, a guard `lin < total`, and the loop indices delinearized from lin with the
// innermost dimension fastest (consecutive threads, consecutive addresses). Lower bounds and steps
// are applied after delinearizing. convert-parallel-loops-to-gpu then makes one gpu.launch of it (2 x 256).
// A loop-free nest whose innermost count divides by 16 bytes of its narrowest element gives each thread a
// run of that many consecutive innermost iterations instead, delinearized once (@strided, @runs); a nest
// with a loop of its own keeps a thread per output (@row_sums). test_gpu_map_semantics.py runs these forms.
// RUN: openprim-opt %s -p prim-gpu-map | filecheck %s
// RUN: openprim-opt %s -p 'prim-gpu-map{threads=64}' | filecheck %s --check-prefix=T64
// RUN: openprim-opt %s -p prim-gpu-map,convert-parallel-loops-to-gpu,canonicalize | filecheck %s --check-prefix=LAUNCH

// 4 x 10 x 10 = 400 iterations: 2 blocks of 256 threads.
// CHECK-LABEL: func.func @add(
// CHECK-DAG:   %[[C2:.+]] = arith.constant 2 : index
// CHECK-DAG:   %[[C256:.+]] = arith.constant 256 : index
// CHECK:       scf.parallel (%[[B:.+]], %[[T:.+]]) = (%{{.+}}, %{{.+}}) to (%[[C2]], %[[C256]]) step
// CHECK:       %[[BT:.+]] = arith.muli %[[B]], %{{.+}} : index
// CHECK-NEXT:  %[[LIN:.+]] = arith.addi %[[BT]], %[[T]] : index
// CHECK-NEXT:  %[[N:.+]] = arith.constant 400 : index
// CHECK-NEXT:  %[[IN:.+]] = arith.cmpi ult, %[[LIN]], %[[N]] : index
// CHECK-NEXT:  scf.if %[[IN]] {
// CHECK-NEXT:  %[[C10A:.+]] = arith.constant 10 : index
// CHECK-NEXT:  %[[K:.+]] = arith.remui %[[LIN]], %[[C10A]] : index
// CHECK-NEXT:  %[[C10B:.+]] = arith.constant 10 : index
// CHECK-NEXT:  %[[R:.+]] = arith.divui %[[LIN]], %[[C10B]] : index
// CHECK-NEXT:  %[[C10C:.+]] = arith.constant 10 : index
// CHECK-NEXT:  %[[J:.+]] = arith.remui %[[R]], %[[C10C]] : index
// CHECK-NEXT:  %[[C10D:.+]] = arith.constant 10 : index
// CHECK-NEXT:  %[[I:.+]] = arith.divui %[[R]], %[[C10D]] : index
// CHECK-NEXT:  memref.load %arg0[%[[I]], %[[J]], %[[K]]] : memref<4x10x10xf32>
// CHECK-NEXT:  memref.load %arg1[%[[I]], %[[J]], %[[K]]] : memref<4x10x10xf32>
// CHECK-NEXT:  arith.addf
// CHECK-NEXT:  memref.store %{{.+}}, %arg2[%[[I]], %[[J]], %[[K]]] : memref<4x10x10xf32>
// CHECK-NEXT:  }
// CHECK-NEXT:  scf.reduce
// CHECK-NEXT:  } {mapping = [#gpu.loop_dim_map<processor = block_x, map = (d0) -> (d0), bound = (d0) -> (d0)>, #gpu.loop_dim_map<processor = thread_x, map = (d0) -> (d0), bound = (d0) -> (d0)>]}
// CHECK-NOT:   scf.parallel

// (1 to 9 step 2) = 4 iterations, a multiple of the 4 f32 a thread takes: one run of 4 (an scf.for) by
// one thread; i = (lin * 4 + f) * 2 + 1.
// CHECK-LABEL: func.func @strided(
// CHECK:       scf.parallel (%{{.+}}, %{{.+}}) = (%{{.+}}, %{{.+}}) to (%[[ONE:.+]], %[[C32:.+]]) step
// CHECK:       %[[N1:.+]] = arith.constant 1 : index
// CHECK-NEXT:  %[[IN1:.+]] = arith.cmpi ult, %[[LIN1:.+]], %[[N1]] : index
// CHECK-NEXT:  scf.if %[[IN1]] {
// CHECK-NEXT:  %[[R4:.+]] = arith.constant 4 : index
// CHECK-NEXT:  %[[FIRST:.+]] = arith.muli %[[LIN1]], %[[R4]] : index
// CHECK:       scf.for %[[F:.+]] = %{{.+}} to %{{.+}} step
// CHECK-NEXT:  %[[E:.+]] = arith.addi %[[FIRST]], %[[F]] : index
// CHECK-NEXT:  %[[S:.+]] = arith.constant 2 : index
// CHECK-NEXT:  %[[I2:.+]] = arith.muli %[[E]], %[[S]] : index
// CHECK-NEXT:  %[[O:.+]] = arith.constant 1 : index
// CHECK-NEXT:  %[[I3:.+]] = arith.addi %[[I2]], %[[O]] : index
// CHECK-NEXT:  memref.store %{{.+}}, %arg0[%[[I3]]] : memref<9xf32>

// An f16 map [2, 6, 5, 16] (an NHWC add): its 16 channels divide by the 8 f16 (16 bytes) a thread takes,
// so each of 2 x 6 x 5 x 2 = 120 threads (one block of 128) adds a run of 8 consecutive channels; the
// outer indices are delinearized once per run (lin over [2, 6, 5, 2]), the channel is 8 * (lin mod 2) + f.
// CHECK-LABEL: func.func @runs(
// CHECK:       scf.parallel (%{{.+}}, %{{.+}}) = (%{{.+}}, %{{.+}}) to (%{{.+}}, %[[C128:.+]]) step
// CHECK:       %[[N120:.+]] = arith.constant 120 : index
// CHECK-NEXT:  %[[IN:.+]] = arith.cmpi ult, %[[LIN:.+]], %[[N120]] : index
// CHECK-NEXT:  scf.if %[[IN]] {
// CHECK-NEXT:  %[[C2:.+]] = arith.constant 2 : index
// CHECK-NEXT:  %[[CHUNK:.+]] = arith.remui %[[LIN]], %[[C2]] : index
// CHECK:       %[[C8:.+]] = arith.constant 8 : index
// CHECK-NEXT:  %[[FIRST8:.+]] = arith.muli %[[CHUNK]], %[[C8]] : index
// CHECK:       scf.for %[[G:.+]] = %{{.+}} to %{{.+}} step
// CHECK-NEXT:  %[[CH:.+]] = arith.addi %[[FIRST8]], %[[G]] : index
// CHECK-NEXT:  memref.load %arg0[%{{.+}}, %{{.+}}, %{{.+}}, %[[CH]]] : memref<2x6x5x16xf16>
// CHECK-NEXT:  memref.load %arg1
// CHECK-NEXT:  arith.addf
// CHECK-NEXT:  memref.store

// A nest with a loop of its own (a sum per output) keeps a thread per output: 16 outputs, not 2 runs of 8.
// CHECK-LABEL: func.func @row_sums(
// CHECK:       scf.parallel (%{{.+}}, %{{.+}}) = (%{{.+}}, %{{.+}}) to (%{{.+}}, %{{.+}}) step
// CHECK:       %[[N16:.+]] = arith.constant 16 : index
// CHECK-NEXT:  arith.cmpi ult, %{{.+}}, %[[N16]] : index
// CHECK:       scf.for
// CHECK-NOT:   scf.for

// T64:         func.func @add(
// T64-DAG:     %[[C7:.+]] = arith.constant 7 : index
// T64-DAG:     %[[C64:.+]] = arith.constant 64 : index
// T64:         scf.parallel (%{{.+}}, %{{.+}}) = (%{{.+}}, %{{.+}}) to (%[[C7]], %[[C64]])

// LAUNCH-LABEL: func.func @add(
// LAUNCH-DAG:   %[[ONE:.+]] = arith.constant 1 : index
// LAUNCH-DAG:   %[[TWO:.+]] = arith.constant 2 : index
// LAUNCH-DAG:   %[[T256:.+]] = arith.constant 256 : index
// LAUNCH:       gpu.launch blocks(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %[[TWO]], %{{.+}} = %[[ONE]], %{{.+}} = %[[ONE]]) threads(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %[[T256]], %{{.+}} = %[[ONE]], %{{.+}} = %[[ONE]])
// LAUNCH-NOT:   scf.parallel
func.func @add(%a: memref<4x10x10xf32>, %b: memref<4x10x10xf32>, %c: memref<4x10x10xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c10 = arith.constant 10 : index
  scf.parallel (%i, %j, %k) = (%c0, %c0, %c0) to (%c4, %c10, %c10) step (%c1, %c1, %c1) {
    %x = memref.load %a[%i, %j, %k] : memref<4x10x10xf32>
    %y = memref.load %b[%i, %j, %k] : memref<4x10x10xf32>
    %s = arith.addf %x, %y : f32
    memref.store %s, %c[%i, %j, %k] : memref<4x10x10xf32>
    scf.reduce
  }
  return
}

func.func @strided(%a: memref<9xf32>) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c9 = arith.constant 9 : index
  %one = arith.constant 1.0 : f32
  scf.parallel (%i) = (%c1) to (%c9) step (%c2) {
    memref.store %one, %a[%i] : memref<9xf32>
    scf.reduce
  }
  return
}

func.func @runs(%a: memref<2x6x5x16xf16>, %b: memref<2x6x5x16xf16>, %c: memref<2x6x5x16xf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c5 = arith.constant 5 : index
  %c6 = arith.constant 6 : index
  %c16 = arith.constant 16 : index
  scf.parallel (%n, %h, %w, %ch) = (%c0, %c0, %c0, %c0) to (%c2, %c6, %c5, %c16) step (%c1, %c1, %c1, %c1) {
    %x = memref.load %a[%n, %h, %w, %ch] : memref<2x6x5x16xf16>
    %y = memref.load %b[%n, %h, %w, %ch] : memref<2x6x5x16xf16>
    %s = arith.addf %x, %y : f16
    memref.store %s, %c[%n, %h, %w, %ch] : memref<2x6x5x16xf16>
    scf.reduce
  }
  return
}

func.func @row_sums(%a: memref<16x100xf16>, %out: memref<16xf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c100 = arith.constant 100 : index
  %zero = arith.constant 0.0 : f16
  scf.parallel (%i) = (%c0) to (%c16) step (%c1) {
    %sum = scf.for %k = %c0 to %c100 step %c1 iter_args(%acc = %zero) -> (f16) {
      %x = memref.load %a[%i, %k] : memref<16x100xf16>
      %y = arith.addf %acc, %x : f16
      scf.yield %y : f16
    }
    memref.store %sum, %out[%i] : memref<16xf16>
    scf.reduce
  }
  return
}

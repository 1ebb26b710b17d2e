// CPU elementwise kernels name in prim.in_place every operand of the result's type: each is read at the
// index the kernel then writes, so the memory plan may give the result any one of their buffers (a fused
// optimizer's state updated in place). A broadcast operand (the row of %s) is not named; the GPU's are not
// marked. An odd row count (4097) is split unevenly between the threads (2049 + 2048 rows): the innermost
// dim stays whole for the vectors.
// RUN: openprim-opt %s -p prim-fuse,prim-select,prim-tile | filecheck %s
// RUN: openprim-opt %s -p 'prim-fuse,prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s --check-prefix=GPU

// CHECK:       func.func @fused_elementwise_0(%arg0: memref<4097x256xf32>, %arg1: memref<1x256xf32>, %arg2: memref<4097x256xf32>, %arg3: memref<4097x256xf32>) attributes {prim.in_place = [0, 2], prim.op = "fused_elementwise"}
// CHECK:         scf.forall (%{{.*}}) = (0) to (4097) step (2049)
// CHECK:           vector.transfer_read {{.*}} vector<64xf32>
// GPU:       func.func @fused_elementwise_0(
// GPU-NOT:   prim.in_place
// GPU-SAME:  prim.op = "fused_elementwise"
func.func @main(%w: tensor<4097x256xf32>, %s: tensor<1x256xf32>, %g: tensor<4097x256xf32>) -> tensor<4097x256xf32> {
  %0 = "prim.mul"(%w, %s) : (tensor<4097x256xf32>, tensor<1x256xf32>) -> tensor<4097x256xf32>
  %1 = "prim.add"(%0, %g) : (tensor<4097x256xf32>, tensor<4097x256xf32>) -> tensor<4097x256xf32>
  return %1 : tensor<4097x256xf32>
}

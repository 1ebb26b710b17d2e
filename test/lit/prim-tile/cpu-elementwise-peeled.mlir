// An elementwise kernel whose innermost dim has no divisor from 8 to 64 (199, a prime count of tokens or
// samples: HuBERT's [1, 128, 199] GELU) is tiled by 16 with the partial last tile peeled off: the main loop
// runs whole vector<16xf32> tiles, the remainder is one static vector<7xf32> tile (12 x 16 + 7), not 199
// one-lane iterations (5.6x slower on the AVX-512 machine). A dim with a divisor from 8 (200: tiles of 50)
// needs no peeling.
// RUN: openprim-opt %s -p prim-fuse,prim-select,prim-tile | filecheck %s

// CHECK-LABEL: func.func @gelu_0(%arg0: memref<1x128x199xf32>, %arg1: memref<1x128x199xf32>)
// CHECK:         scf.for %{{.*}} = %c0 to %c192 step %c16
// CHECK:           vector.transfer_read {{.*}} vector<16xf32>
// CHECK:           vector.transfer_write {{.*}} vector<16xf32>
// CHECK:         vector.transfer_read {{.*}} vector<7xf32>
// CHECK:         vector.transfer_write {{.*}} vector<7xf32>
// CHECK-LABEL: func.func @gelu_1(%arg0: memref<1x128x200xf32>, %arg1: memref<1x128x200xf32>)
// CHECK:         scf.for %{{.*}} = %c0 to %c200 step %c50
// CHECK:           vector.transfer_read {{.*}} vector<50xf32>
// CHECK-NOT:     vector<7xf32>
// CHECK:         return
func.func @main(%x: tensor<1x128x199xf32>, %y: tensor<1x128x200xf32>) -> (tensor<1x128x199xf32>, tensor<1x128x200xf32>) {
  %0 = "prim.gelu"(%x) {approximate = "none"} : (tensor<1x128x199xf32>) -> tensor<1x128x199xf32>
  %1 = "prim.gelu"(%y) {approximate = "none"} : (tensor<1x128x200xf32>) -> tensor<1x128x200xf32>
  return %0, %1 : tensor<1x128x199xf32>, tensor<1x128x200xf32>
}

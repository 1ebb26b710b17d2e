// A bounds check counts the indices outside [-size, size) in two loops (kernels/semantics.py): the 1024
// token ids as [32, 32], a count per row (the parallel loop: a GPU thread per row), then the rows' sum. One
// loop over all of them was a single GPU thread walking the ids (25 us of BERT's 1.2 ms forward on the H200).
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s

// CHECK-LABEL: func.func @bounds_check_0(%arg0: memref<8x128xi64>, %arg1: memref<1xi32>)
// CHECK:         tensor.expand_shape {{.*}} output_shape [32, 32] : tensor<1024xi64> into tensor<32x32xi64>
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} ins(%{{.*}} : tensor<32x32xi64>) outs(%{{.*}} : tensor<32xi32>)
// CHECK:           arith.cmpi slt
// CHECK:           arith.cmpi sge
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} ins(%{{.*}} : tensor<32xi32>) outs(%{{.*}} : tensor<1xi32>)
// CHECK:           arith.addi
func.func @main(%ids: tensor<8x128xi64>) -> tensor<1xi32> {
  %n = "prim.bounds_check"(%ids) {size = 30522 : i64} : (tensor<8x128xi64>) -> tensor<1xi32>
  return %n : tensor<1xi32>
}

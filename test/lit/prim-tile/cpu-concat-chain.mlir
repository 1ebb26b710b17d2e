// A chain of binary concats along one axis (the frontends' n-input concat) becomes ONE kernel on the CPU
// (prim_fuse.outline_concat_chains, run by prim-tile; kernels/cpu/concat.py): each input copied once into
// its columns of every row, vector<8> copies then a scalar tail (outputs this small on one thread). A
// concat whose result is also used elsewhere ends the chain (its result is a kernel output). A batch_norm
// on the concat axis and a relu after the chain join its kernel: per-channel s, t on the thread's stack,
// then relu(x * s + t) stored.
// RUN: openprim-opt %s -p prim-tile | filecheck %s

// CHECK-LABEL: func.func @dense(
// CHECK-NEXT:  %[[Y:.+]] = call @concat_0(%arg0, %arg1, %arg2) : (tensor<1x4x4x8xf32>, tensor<1x4x4x3xf32>, tensor<1x4x4x5xf32>) -> tensor<1x4x4x16xf32>
// CHECK-NEXT:  return %[[Y]]
// CHECK-LABEL: func.func @shared(
// CHECK-NEXT:  %[[AB:.+]] = call @concat_1(%arg0, %arg1)
// CHECK-NEXT:  %[[ABA:.+]] = call @concat_2(%[[AB]], %arg0)
// CHECK-NEXT:  return %[[AB]], %[[ABA]]
// CHECK-LABEL: func.func @pre_activation(
// CHECK-NEXT:  %[[R:.+]] = call @concat_3(%arg0, %arg1, %arg2, %arg3, %arg4, %arg5) : (tensor<1x4x4x8xf32>, tensor<1x4x4x3xf32>, tensor<11xf32>, tensor<11xf32>, tensor<11xf32>, tensor<11xf32>) -> tensor<1x4x4x11xf32>
// CHECK-NEXT:  return %[[R]]
// CHECK:       module @kernels

// 16 rows (n, h, w) of 16 channels: 8 from %arg0 (one vector), 3 and 5 (scalar tails) at 8 and 11.
// CHECK-LABEL: func.func @concat_0(%arg0: memref<1x4x4x8xf32>, %arg1: memref<1x4x4x3xf32>, %arg2: memref<1x4x4x5xf32>, %arg3: memref<1x4x4x16xf32>) attributes {prim.op = "concat"}
// CHECK:       scf.forall (%{{.+}}) in (1)
// CHECK:       vector.load {{.*}} : memref<128xf32>, vector<8xf32>
// CHECK-NEXT:  arith.addi
// CHECK-NEXT:  vector.store {{.*}} : memref<256xf32>, vector<8xf32>
// CHECK:       memref.load {{.*}} : memref<48xf32>
// CHECK:       memref.store {{.*}} : memref<256xf32>
// CHECK:       memref.load {{.*}} : memref<80xf32>
// CHECK:       memref.store {{.*}} : memref<256xf32>
// CHECK-NOT:   {{linalg\.|tensor\.}}
// CHECK:       return

// CHECK-LABEL: func.func @concat_3(
// CHECK:       memref.alloca_scope
// CHECK-NEXT:  memref.alloca() {alignment = 64 : i64} : memref<11xf32>
// CHECK:       math.rsqrt
// CHECK:       vector.load {{.*}} : memref<128xf32>, vector<8xf32>
// CHECK-NEXT:  vector.load {{.*}} : memref<11xf32>, vector<8xf32>
// CHECK-NEXT:  vector.load {{.*}} : memref<11xf32>, vector<8xf32>
// CHECK-NEXT:  math.fma {{.*}} : vector<8xf32>
// CHECK-NEXT:  arith.maximumf {{.*}} : vector<8xf32>
// CHECK:       vector.store {{.*}} : memref<176xf32>, vector<8xf32>
// CHECK:       math.fma {{.*}} : f32
// CHECK-NEXT:  arith.maximumf {{.*}} : f32
// CHECK-NEXT:  arith.addi
// CHECK-NEXT:  memref.store {{.*}} : memref<176xf32>
// CHECK:       return
func.func @dense(%a: tensor<1x4x4x8xf32>, %b: tensor<1x4x4x3xf32>, %c: tensor<1x4x4x5xf32>) -> tensor<1x4x4x16xf32> {
  %ab = "prim.concat"(%a, %b) {axis = 3} : (tensor<1x4x4x8xf32>, tensor<1x4x4x3xf32>) -> tensor<1x4x4x11xf32>
  %abc = "prim.concat"(%ab, %c) {axis = 3} : (tensor<1x4x4x11xf32>, tensor<1x4x4x5xf32>) -> tensor<1x4x4x16xf32>
  return %abc : tensor<1x4x4x16xf32>
}
func.func @shared(%a: tensor<6x2xf16>, %b: tensor<6x3xf16>) -> (tensor<6x5xf16>, tensor<6x7xf16>) {
  %ab = "prim.concat"(%a, %b) {axis = 1} : (tensor<6x2xf16>, tensor<6x3xf16>) -> tensor<6x5xf16>
  %abb = "prim.concat"(%ab, %a) {axis = 1} : (tensor<6x5xf16>, tensor<6x2xf16>) -> tensor<6x7xf16>
  return %ab, %abb : tensor<6x5xf16>, tensor<6x7xf16>
}
func.func @pre_activation(%a: tensor<1x4x4x8xf32>, %b: tensor<1x4x4x3xf32>, %s: tensor<11xf32>, %t: tensor<11xf32>, %m: tensor<11xf32>, %v: tensor<11xf32>) -> tensor<1x4x4x11xf32> {
  %ab = "prim.concat"(%a, %b) {axis = 3} : (tensor<1x4x4x8xf32>, tensor<1x4x4x3xf32>) -> tensor<1x4x4x11xf32>
  %n = "prim.batch_norm"(%ab, %s, %t, %m, %v) {epsilon = 1.0e-05 : f64, layout = "NHWC"} : (tensor<1x4x4x11xf32>, tensor<11xf32>, tensor<11xf32>, tensor<11xf32>, tensor<11xf32>) -> tensor<1x4x4x11xf32>
  %r = "prim.relu"(%n) : (tensor<1x4x4x11xf32>) -> tensor<1x4x4x11xf32>
  return %r : tensor<1x4x4x11xf32>
}

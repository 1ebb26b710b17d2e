// prim-select, prim-tile and prim-lower for nvvm:sm_90 of a DenseNet-style concat chain with the batch norm and ReLU after it (one
// kernel, kernels/gpu/concat.py): every input is read and the output written 16 bytes at a time
// (ld.global.nc.v4.b32 / st.global.v4.b32 for 8 f16 lanes). The kernel's flat views are reinterpret_casts
// of its buffers: a collapse_shape is folded into the vector accesses by fold-memref-alias-ops, which
// drops their alignment, and NVPTX then moves the 8 lanes one 2-byte element at a time (at these sizes, a
// DenseNet block at batch 32; at tiny ones LLVM proves the alignment from the index math itself).
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90},prim-lower{target=nvvm:sm_90}' | filecheck %s
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90},prim-lower{target=nvvm:sm_90}' | filecheck %s --check-prefix=SCALAR

// CHECK:       gpu.binary @device
// CHECK-SAME:  .entry concat_0_kernel
// CHECK-SAME:  ld.global.nc.v4.b32
// CHECK-SAME:  st.global.v4.b32
// SCALAR-NOT:  st.global.b16
// SCALAR-NOT:  ld.global.nc.b16

func.func @main(%x0: tensor<32x56x56x64xf16>, %x1: tensor<32x56x56x32xf16>, %x2: tensor<32x56x56x32xf16>,
                %scale: tensor<128xf16>, %shift: tensor<128xf16>, %mean: tensor<128xf16>, %var: tensor<128xf16>)
    -> tensor<32x56x56x128xf16> {
  %0 = "prim.concat"(%x0, %x1) {axis = 3 : i64} : (tensor<32x56x56x64xf16>, tensor<32x56x56x32xf16>) -> tensor<32x56x56x96xf16>
  %1 = "prim.concat"(%0, %x2) {axis = 3 : i64} : (tensor<32x56x56x96xf16>, tensor<32x56x56x32xf16>) -> tensor<32x56x56x128xf16>
  %2 = "prim.batch_norm"(%1, %scale, %shift, %mean, %var) {epsilon = 1.000000e-05 : f64, layout = "NHWC"}
      : (tensor<32x56x56x128xf16>, tensor<128xf16>, tensor<128xf16>, tensor<128xf16>, tensor<128xf16>) -> tensor<32x56x56x128xf16>
  %3 = "prim.relu"(%2) : (tensor<32x56x56x128xf16>) -> tensor<32x56x56x128xf16>
  return %3 : tensor<32x56x56x128xf16>
}

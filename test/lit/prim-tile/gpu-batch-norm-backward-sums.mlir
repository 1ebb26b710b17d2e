// A batch norm's scale and shift gradients on a GPU (kernels/gpu/channel_sums.py backward_sums_kernel): the
// 6272 rows of the NHWC map split over 49 blocks, 8 lanes of 8 channels each, both terms per row (dy, and
// dy (x - mean)) summed in one pass into f32 partials [49, 2, 64]; a second launch of 2 blocks (8 lanes of 4
// f32 channels each) adds the partials and stores the two totals as rows 0 and 1 of the [2, C] result, in
// its dtype.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s

// CHECK-LABEL: func.func @batch_norm_backward_sums_0(%arg0: memref<8x28x28x64xf16>, %arg1: memref<8x28x28x64xf16>, %arg2: memref<64xf16>, %arg3: memref<2x64xf16>)
// CHECK:         memref.alloc() {alignment = 64 : i64} : memref<49x2x64xf32>
// CHECK:         gpu.launch blocks({{.*}}) in ({{.*}} = %c1, {{.*}} = %c49, {{.*}} = %c1) threads({{.*}}) in ({{.*}} = %c8, {{.*}} = %c32, {{.*}} = %c1) workgroup(%{{.*}} : memref<2x32x64xf32, #gpu.address_space<workgroup>>)
// CHECK:           arith.subf {{.*}} : vector<8xf32>
// CHECK-NEXT:      arith.mulf {{.*}} : vector<8xf32>
// CHECK:         gpu.launch blocks({{.*}}) in ({{.*}} = %c2, {{.*}} = %c1, {{.*}} = %c1) threads({{.*}}) in ({{.*}} = %c8, {{.*}} = %c32, {{.*}} = %c1)
// CHECK:           vector.store %{{.*}}, %arg3[%c0, %{{.*}}] {{.*}} : memref<2x64xf16>, vector<4xf16>
// CHECK:           vector.store %{{.*}}, %arg3[%c1, %{{.*}}] {{.*}} : memref<2x64xf16>, vector<4xf16>
func.func @main(%x: tensor<8x28x28x64xf16>, %dy: tensor<8x28x28x64xf16>, %mean: tensor<64xf16>) -> tensor<2x64xf16> {
  %sums = "prim.batch_norm_backward_sums"(%dy, %x, %mean) {layout = "NHWC"} : (tensor<8x28x28x64xf16>, tensor<8x28x28x64xf16>, tensor<64xf16>) -> tensor<2x64xf16>
  return %sums : tensor<2x64xf16>
}

// Depthwise convolutions on GPUs (conv_depthwise_gpu, kernels/gpu/depthwise.py): one thread per 8 channels
// (one 16-byte f16 vector) of 4 output pixels along W. Per filter row (unrolled up to 5x5): the row's
// 3 taps, then the 6 input columns the 4 outputs share (stride 1: 6 loads for 12 FMAs), loaded at
// clamped indices with no branch and zeroed outside the image by a select; f32 accumulators; bias,
// residual and the activation (ReLU6 here) applied to the vectors, which are stored as f16. C = 12
// narrows the f16 vector to 4 channels (8 bytes); 7 output columns take 7 pixels a thread; a stride 2
// (8 columns, 4 per thread) reads 9 input columns; a 7x7 window loops over its rows (scf.for).
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s

// CHECK-LABEL: func.func @conv2d_0(
// CHECK-SAME:  prim.solver = "conv_depthwise_gpu"
// CHECK:       gpu.launch
// CHECK-SAME:  threads(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %c128
// CHECK:       memref.collapse_shape %{{.+}} {{\[\[}}0, 1, 2], [3]] : memref<3x3x1x16xf16> into memref<9x16xf16>
// CHECK-NOT:   scf.for
// CHECK-COUNT-3: vector.load {{.*}} {alignment = 16 : i64} : memref<9x16xf16>, vector<8xf16>
// CHECK-NOT:   vector.fma
// CHECK-COUNT-6: vector.load {{.*}} {alignment = 16 : i64} : memref<2x9x11x16xf16>, vector<8xf16>
// CHECK:       arith.select {{.*}} : vector<8xf32>
// CHECK-NOT:   vector.load
// CHECK-COUNT-12: vector.fma {{.*}} : vector<8xf32>
// CHECK-COUNT-24: vector.fma {{.*}} : vector<8xf32>
// CHECK-NOT:   vector.fma
// CHECK:       vector.load %{{.+}}[%{{.+}}] {alignment = 16 : i64} : memref<16xf16>, vector<8xf16>
// CHECK:       vector.load {{.*}} : memref<2x9x11x16xf16>, vector<8xf16>
// CHECK:       arith.maximumf
// CHECK:       arith.minimumf
// CHECK:       arith.truncf {{.*}} : vector<8xf32> to vector<8xf16>
// CHECK:       vector.store {{.*}} {alignment = 16 : i64} : memref<2x9x11x16xf16>, vector<8xf16>
// CHECK:       scf.if
// CHECK:       vector.store

// CHECK-LABEL: func.func @conv2d_1(
// CHECK-SAME:  prim.solver = "conv_depthwise_gpu"
// CHECK-COUNT-3: vector.load {{.*}} {alignment = 8 : i64} : memref<9x12xf16>, vector<4xf16>
// CHECK-COUNT-9: vector.load {{.*}} : memref<1x7x7x12xf16>, vector<4xf16>
// CHECK-NOT:   vector.load
// CHECK-COUNT-21: vector.fma {{.*}} : vector<4xf32>
// CHECK-NOT:   scf.if

// CHECK-LABEL: func.func @conv2d_2(
// CHECK-SAME:  prim.solver = "conv_depthwise_gpu"
// CHECK-COUNT-3: vector.load {{.*}} : memref<9x16xf16>, vector<8xf16>
// CHECK-COUNT-9: vector.load {{.*}} : memref<1x16x16x16xf16>, vector<8xf16>
// CHECK-NOT:   vector.load
// CHECK:       vector.fma

// CHECK-LABEL: func.func @conv2d_3(
// CHECK-SAME:  prim.solver = "conv_depthwise_gpu"
// CHECK:       scf.for {{.*}} -> (vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>)
// CHECK-COUNT-7: vector.load {{.*}} : memref<49x8xf32>, vector<4xf32>
// CHECK-COUNT-13: vector.load {{.*}} : memref<1x7x7x8xf32>, vector<4xf32>
// CHECK-NOT:   vector.load
// CHECK-COUNT-49: vector.fma {{.*}} : vector<4xf32>
// CHECK:       scf.yield

module {
  func.func @f16(%x: tensor<2x9x11x16xf16>, %r: tensor<2x9x11x16xf16>) -> tensor<2x9x11x16xf16> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<16x3x3x1xf16>} : () -> tensor<16x3x3x1xf16>
    %b = "prim.constant"() {value = dense<0.25> : tensor<16xf16>} : () -> tensor<16xf16>
    %y = "prim.conv2d"(%x, %w, %b, %r) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 16, layout = "NHWC", filter_layout = "KRSC", activation = "clamp", activation_params = array<f64: 0.0, 6.0>, operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (tensor<2x9x11x16xf16>, tensor<16x3x3x1xf16>, tensor<16xf16>, tensor<2x9x11x16xf16>) -> tensor<2x9x11x16xf16>
    return %y : tensor<2x9x11x16xf16>
  }
  func.func @f16_c12(%x: tensor<1x7x7x12xf16>) -> tensor<1x7x7x12xf16> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<12x3x3x1xf16>} : () -> tensor<12x3x3x1xf16>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 12, layout = "NHWC", filter_layout = "KRSC", activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x7x7x12xf16>, tensor<12x3x3x1xf16>) -> tensor<1x7x7x12xf16>
    return %y : tensor<1x7x7x12xf16>
  }
  func.func @stride2(%x: tensor<1x16x16x16xf16>) -> tensor<1x8x8x16xf16> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<16x3x3x1xf16>} : () -> tensor<16x3x3x1xf16>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 16, layout = "NHWC", filter_layout = "KRSC", activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x16x16x16xf16>, tensor<16x3x3x1xf16>) -> tensor<1x8x8x16xf16>
    return %y : tensor<1x8x8x16xf16>
  }
  func.func @k7(%x: tensor<1x7x7x8xf32>) -> tensor<1x7x7x8xf32> {
    %w = "prim.constant"() {value = dense<0.5> : tensor<8x7x7x1xf32>} : () -> tensor<8x7x7x1xf32>
    %y = "prim.conv2d"(%x, %w) {strides = array<i64: 1, 1>, padding = array<i64: 3, 3, 3, 3>, dilations = array<i64: 1, 1>, groups = 8, layout = "NHWC", filter_layout = "KRSC", activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x7x7x8xf32>, tensor<8x7x7x1xf32>) -> tensor<1x7x7x8xf32>
    return %y : tensor<1x7x7x8xf32>
  }
}

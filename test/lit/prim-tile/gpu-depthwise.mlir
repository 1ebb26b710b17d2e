// Depthwise convolutions on GPUs (conv_depthwise_gpu, kernels/gpu/depthwise.py). By default a thread owns
// 2 channels (one 4-byte f16 vector) of a 4 x 4 tile of output pixels (HT = 4 rows, WT = 4 along W) of
// a 3x3 window. The tile reads HT + 2 = 6 input rows; each is loaded once (6 columns at clamped indices,
// zeroed outside the image by a select) and feeds every output row whose window holds it: 1, 2, 3, 3, 2
// and 1 output rows, 12 FMAs each. A filter row's 3 taps are loaded when first needed and kept. Then
// f32 bias, residual and the activation (ReLU6 here), stores as f16, guarded at the ragged bottom and
// right edges. Rows 7 wide (C = 12) take 2 x 7 pixels of 4 channels a thread: 9 columns, 21 FMAs for
// the first input row, 42 for the second; a stride 2 (8 columns, 4 per thread) reads 9 input columns of
// 9 rows; a 7x7 window loops over its rows (scf.for) with one output row per thread, 16-byte
// vectors and, 7 output columns wide, 7 pixels a thread (13 input columns).
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s

// CHECK-LABEL: func.func @conv2d_0(
// CHECK-SAME:  prim.solver = "conv_depthwise_gpu"
// CHECK:       gpu.launch
// CHECK-SAME:  threads(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %c128
// CHECK:       memref.collapse_shape %{{.+}} {{\[\[}}0, 1, 2], [3]] : memref<3x3x1x16xf16> into memref<9x16xf16>
// CHECK-NOT:   scf.for
// CHECK-COUNT-3: vector.load {{.*}} {alignment = 4 : i64} : memref<9x16xf16>, vector<2xf16>
// CHECK-NOT:   vector.fma
// CHECK-COUNT-6: vector.load {{.*}} {alignment = 4 : i64} : memref<2x9x11x16xf16>, vector<2xf16>
// CHECK:       arith.select {{.*}} : vector<2xf32>
// CHECK-NOT:   vector.load
// CHECK-COUNT-12: vector.fma {{.*}} : vector<2xf32>
// CHECK-NOT:   vector.fma
// CHECK-COUNT-3: vector.load {{.*}} : memref<9x16xf16>, vector<2xf16>
// CHECK-COUNT-6: vector.load {{.*}} : memref<2x9x11x16xf16>, vector<2xf16>
// CHECK-NOT:   vector.load
// CHECK-COUNT-24: vector.fma {{.*}} : vector<2xf32>
// CHECK-NOT:   vector.fma
// CHECK-COUNT-3: vector.load {{.*}} : memref<9x16xf16>, vector<2xf16>
// CHECK-COUNT-6: vector.load {{.*}} : memref<2x9x11x16xf16>, vector<2xf16>
// CHECK-NOT:   vector.load
// CHECK-COUNT-36: vector.fma {{.*}} : vector<2xf32>
// CHECK-NOT:   memref<9x16xf16>, vector<2xf16>
// CHECK-COUNT-6: vector.load {{.*}} : memref<2x9x11x16xf16>, vector<2xf16>
// CHECK-COUNT-36: vector.fma {{.*}} : vector<2xf32>
// CHECK-COUNT-6: vector.load {{.*}} : memref<2x9x11x16xf16>, vector<2xf16>
// CHECK-COUNT-24: vector.fma {{.*}} : vector<2xf32>
// CHECK-COUNT-6: vector.load {{.*}} : memref<2x9x11x16xf16>, vector<2xf16>
// CHECK-COUNT-12: vector.fma {{.*}} : vector<2xf32>
// CHECK-NOT:   vector.fma
// CHECK:       vector.load %{{.+}}[%{{.+}}] {alignment = 4 : i64} : memref<16xf16>, vector<2xf16>
// CHECK:       vector.load {{.*}} : memref<2x9x11x16xf16>, vector<2xf16>
// CHECK:       arith.maximumf
// CHECK:       arith.minimumf
// CHECK:       arith.truncf {{.*}} : vector<2xf32> to vector<2xf16>
// CHECK:       vector.store {{.*}} {alignment = 4 : i64} : memref<2x9x11x16xf16>, vector<2xf16>
// CHECK:       scf.if
// CHECK:       vector.store
// CHECK-COUNT-14: vector.store {{.*}} : memref<2x9x11x16xf16>, vector<2xf16>
// CHECK-NOT:   vector.store

// CHECK-LABEL: func.func @conv2d_1(
// CHECK-SAME:  prim.solver = "conv_depthwise_gpu"
// CHECK-COUNT-3: vector.load {{.*}} {alignment = 8 : i64} : memref<9x12xf16>, vector<4xf16>
// CHECK-COUNT-9: vector.load {{.*}} : memref<1x7x7x12xf16>, vector<4xf16>
// CHECK-NOT:   vector.load
// CHECK-COUNT-21: vector.fma {{.*}} : vector<4xf32>
// CHECK-NOT:   vector.fma
// CHECK-COUNT-3: vector.load {{.*}} : memref<9x12xf16>, vector<4xf16>
// CHECK-COUNT-9: vector.load {{.*}} : memref<1x7x7x12xf16>, vector<4xf16>
// CHECK-COUNT-42: vector.fma {{.*}} : vector<4xf32>

// CHECK-LABEL: func.func @conv2d_2(
// CHECK-SAME:  prim.solver = "conv_depthwise_gpu"
// CHECK-COUNT-3: vector.load {{.*}} : memref<9x16xf16>, vector<2xf16>
// CHECK-COUNT-9: vector.load {{.*}} : memref<1x16x16x16xf16>, vector<2xf16>
// CHECK-NOT:   vector.load
// CHECK-COUNT-12: vector.fma
// CHECK-COUNT-72: vector.load {{.*}} : memref<1x16x16x16xf16>, vector<2xf16>
// CHECK-NOT:   memref<1x16x16x16xf16>, vector<2xf16>
// CHECK-COUNT-16: vector.store {{.*}} : memref<1x8x8x16xf16>, vector<2xf16>
// CHECK-NOT:   scf.if

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

// conv_depthwise on the CPU: prim-tile takes the solver's whole kernel (kernels/cpu/depthwise.py), a
// vector-dialect loop nest on 1-d views of the memrefs: threads over the output rows (scf.forall), the
// filter taps of a channel vector loaded once per row or per column tile (params order; zeroed by one
// select for a window row that may fall outside the image), register tiles of WT = 4 output columns x 8 channels started at the bias, one
// vector.fma per tap and column, the epilogue on the accumulators, one vector store per column. The
// channel tail (C % 8) is a block of the exact smaller width.
// RUN: openprim-opt %s -p 'prim-select{target=cpu:x86-64-v3 solver=conv_depthwise},prim-tile{target=cpu:x86-64-v3}' | filecheck %s

// CHECK-LABEL: func.func @dw3x3(
// CHECK-NEXT:  call @conv2d_0(%arg0, %arg1, %arg2)
// CHECK-LABEL: func.func @dw5x5(
// CHECK-NEXT:  call @conv2d_1(%arg0, %arg1, %arg2)
// CHECK:       module @kernels

// 3x3, stride 1, padding 1, bias + relu6, 12 channels (order 1: few channels at stride 1, so the column
// tiles are outer and each tile sweeps the 8-channel block, then the 4-channel tail). 7 rows; window rows
// 0 and 2 are clamped into the image and their taps selected to zero where they fall outside.
// CHECK-LABEL: func.func @conv2d_0(%arg0: memref<1x7x9x12xf32>, %arg1: memref<3x3x1x12xf32>, %arg2: memref<12xf32>, %arg3: memref<1x7x9x12xf32>) attributes {prim.op = "conv2d", prim.solver = "conv_depthwise"}
// CHECK-NOT:   linalg.
// CHECK:       scf.forall (%{{.+}}) in (7)
// CHECK:       arith.cmpi sge
// CHECK:       arith.cmpi slt
// CHECK:       %[[IN0:.+]] = arith.andi
// CHECK:       %[[TAP:.+]] = vector.load %{{.+}}[%{{.+}}] : memref<108xf32>, vector<8xf32>
// CHECK-NEXT:  arith.select %[[IN0]], %[[TAP]], %{{.+}} : vector<8xf32>
// CHECK:       %[[BIAS:.+]] = vector.load %arg2[%{{.+}}] : memref<12xf32>, vector<8xf32>
//              the first (border) tile: its column 0 skips the tap left of the image
// CHECK:       %[[X:.+]] = vector.load %{{.+}}[%{{.+}}] : memref<756xf32>, vector<8xf32>
// CHECK-NEXT:  vector.fma %[[X]], %{{.+}}, %[[BIAS]] : vector<8xf32>
// CHECK:       arith.maximumf {{.*}} : vector<8xf32>
// CHECK-NEXT:  arith.minimumf {{.*}} : vector<8xf32>
// CHECK-NEXT:  vector.store {{.*}} : memref<756xf32>, vector<8xf32>
//              the same tile's channel tail: 4 lanes
// CHECK:       vector.load %arg2[%{{.+}}] : memref<12xf32>, vector<4xf32>
// CHECK:       vector.fma {{.*}} : vector<4xf32>
// CHECK:       vector.store {{.*}} : memref<756xf32>, vector<4xf32>
//              the interior tiles: a loop without checks, 9 taps x 4 columns = 36 FMAs per channel block
// CHECK:       scf.for
// CHECK:       vector.load %arg2[%{{.+}}] : memref<12xf32>, vector<8xf32>
// CHECK-COUNT-36: vector.fma {{.*}} : vector<8xf32>
// CHECK-NOT:   vector.fma
// CHECK-COUNT-4: vector.store {{.*}} : memref<756xf32>, vector<8xf32>
// CHECK:       vector.load %arg2[%{{.+}}] : memref<12xf32>, vector<4xf32>
// CHECK-COUNT-36: vector.fma {{.*}} : vector<4xf32>
// CHECK-NOT:   vector.fma
// CHECK-COUNT-4: vector.store {{.*}} : memref<756xf32>, vector<4xf32>
// CHECK-NEXT:  }
// CHECK-NOT:   {{linalg\.|memref\.alloc|tensor\.}}
// CHECK:       return

// 5x5, stride 2, f16, residual (order 0: a channel block's 25 taps loaded once per row, then every column
// tile of the row); batch 1 with 7 rows: the two threads split each row's channel blocks (14 items, the
// part slowest), the 4-channel tail in the last part; f16 widened on load, rounded at the store.
// CHECK-LABEL: func.func @conv2d_1(%arg0: memref<1x13x11x20xf16>, %arg1: memref<5x5x1x20xf16>, %arg2: memref<1x7x6x20xf16>, %arg3: memref<1x7x6x20xf16>) attributes {prim.in_place = 2 : i64, prim.op = "conv2d", prim.solver = "conv_depthwise"}
// CHECK-NOT:   linalg.
// CHECK:       scf.forall (%{{.+}}) in (14)
// CHECK:       scf.for
// CHECK:       vector.load {{.*}} : memref<500xf16>, vector<8xf16>
// CHECK-NEXT:  arith.extf {{.*}} : vector<8xf16> to vector<8xf32>
// CHECK:       vector.fma {{.*}} : vector<8xf32>
// CHECK:       vector.load %{{.+}}[%{{.+}}] : memref<840xf16>, vector<8xf16>
// CHECK:       arith.addf {{.*}} : vector<8xf32>
// CHECK-NEXT:  arith.truncf {{.*}} : vector<8xf32> to vector<8xf16>
// CHECK-NEXT:  vector.store {{.*}} : memref<840xf16>, vector<8xf16>
// CHECK:       scf.if
// CHECK:       vector.fma {{.*}} : vector<4xf32>
// CHECK:       vector.store {{.*}} : memref<840xf16>, vector<4xf16>
// CHECK-NOT:   {{linalg\.|memref\.alloc|tensor\.}}
// CHECK:       return

func.func @dw3x3(%x: tensor<1x7x9x12xf32>, %w: tensor<3x3x1x12xf32>, %b: tensor<12xf32>) -> tensor<1x7x9x12xf32> {
  %y = "prim.conv2d"(%x, %w, %b) {activation = "clamp", activation_params = array<f64: 0.0, 6.0>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 12, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x7x9x12xf32>, tensor<3x3x1x12xf32>, tensor<12xf32>) -> tensor<1x7x9x12xf32>
  return %y : tensor<1x7x9x12xf32>
}
func.func @dw5x5(%x: tensor<1x13x11x20xf16>, %w: tensor<5x5x1x20xf16>, %r: tensor<1x7x6x20xf16>) -> tensor<1x7x6x20xf16> {
  %y = "prim.conv2d"(%x, %w, %r) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 20, layout = "NHWC", padding = array<i64: 2, 2, 2, 2>, strides = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0, 1>} : (tensor<1x13x11x20xf16>, tensor<5x5x1x20xf16>, tensor<1x7x6x20xf16>) -> tensor<1x7x6x20xf16>
  return %y : tensor<1x7x6x20xf16>
}

// prim-batch-chunks (passes/batch_chunks.py): a memory-bound network whose ops keep the samples apart is
// compiled for a part of its batch. Here one sample's largest op (the convolution) reads and writes
// 2304 bytes, so a budget of 4700 bytes fits 2 of the 4 samples: every batched value gets dim 0 = 2, the
// slice's end on dim 0 with it, the function type follows and prim.batch_chunks = 2 says how many times
// the plan runs. Constants keep their shapes. Ops that mix samples or move the batch leave the function
// as it is, and so does a compute-bound network (max-intensity below its multiply-adds per byte).
// RUN: openprim-opt %s -p 'prim-batch-chunks{budget=4700}' | filecheck %s
// RUN: openprim-opt %s -p 'prim-batch-chunks{budget=4700 max-intensity=1.0}' | filecheck %s --check-prefix=BOUND
// RUN: openprim-opt %s -p 'prim-batch-chunks' | filecheck %s --check-prefix=FITS

// CHECK-LABEL: func.func @net(%arg0: tensor<2x8x6x6xf32>) -> tensor<2x3xf32>
// CHECK-SAME:  prim.batch_chunks = 2 : i64
// CHECK:       "prim.constant"() {{.*}} -> tensor<8x8x3x3xf32>
// CHECK:       "prim.conv2d"(%arg0, %{{.+}}, %{{.+}}) {{.*}} : (tensor<2x8x6x6xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>) -> tensor<2x8x6x6xf32>
// CHECK:       "prim.relu"({{.*}}) : (tensor<2x8x6x6xf32>) -> tensor<2x8x6x6xf32>
// CHECK:       "prim.slice"({{.*}}) {ends = array<i64: 2, 6, 6, 6>, starts = array<i64: 0, 2, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : (tensor<2x8x6x6xf32>) -> tensor<2x4x6x6xf32>
// CHECK:       "prim.global_avg_pool"({{.*}}) {{.*}} -> tensor<2x4x1x1xf32>
// CHECK:       "prim.reshape"({{.*}}) : (tensor<2x4x1x1xf32>) -> tensor<2x4xf32>
// CHECK:       "prim.matmul"({{.*}}) {{.*}} : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
// CHECK:       "prim.softmax"({{.*}}) {{.*}} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK:       return {{.*}} : tensor<2x3xf32>
// BOUND-LABEL: func.func @net(%arg0: tensor<4x8x6x6xf32>) -> tensor<4x3xf32>
// BOUND-NOT:   prim.batch_chunks
// BOUND-LABEL: func.func @rows_control
// The default budget (20 MiB) fits the whole batch:
// FITS-LABEL:  func.func @net(%arg0: tensor<4x8x6x6xf32>) -> tensor<4x3xf32>
// FITS-NOT:    prim.batch_chunks
func.func @net(%x: tensor<4x8x6x6xf32>) -> tensor<4x3xf32> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<8x8x3x3xf32>} : () -> tensor<8x8x3x3xf32>
  %b = "prim.constant"() {value = dense<0.25> : tensor<8xf32>} : () -> tensor<8xf32>
  %c = "prim.conv2d"(%x, %w, %b) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1 : i64, layout = "NCHW", operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<4x8x6x6xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>) -> tensor<4x8x6x6xf32>
  %r = "prim.relu"(%c) : (tensor<4x8x6x6xf32>) -> tensor<4x8x6x6xf32>
  %s = "prim.slice"(%r) {ends = array<i64: 4, 6, 6, 6>, starts = array<i64: 0, 2, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : (tensor<4x8x6x6xf32>) -> tensor<4x4x6x6xf32>
  %p = "prim.global_avg_pool"(%s) {layout = "NCHW"} : (tensor<4x4x6x6xf32>) -> tensor<4x4x1x1xf32>
  %f = "prim.reshape"(%p) : (tensor<4x4x1x1xf32>) -> tensor<4x4xf32>
  %m = "prim.constant"() {value = dense<0.125> : tensor<4x3xf32>} : () -> tensor<4x3xf32>
  %o = "prim.matmul"(%f, %m) {activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>, transpose_rhs = 0 : i64} : (tensor<4x4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %y = "prim.softmax"(%o) {axis = -1 : i64} : (tensor<4x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}

// The same small row network, chunked (a softmax reads and writes 2 KB a sample: 2 samples fit), and
// then with one op that mixes samples or moves the batch after it: a softmax over the batch, a reshape
// that folds the batch into rows, a constant with a row per sample, a transpose that moves the batch.
// Each of those keeps its batch of 4.
// CHECK-LABEL: func.func @rows_control(%arg0: tensor<2x256xf32>) -> tensor<2x256xf32>
// CHECK-SAME:  prim.batch_chunks = 2 : i64
func.func @rows_control(%x: tensor<4x256xf32>) -> tensor<4x256xf32> {
  %s = "prim.softmax"(%x) {axis = -1 : i64} : (tensor<4x256xf32>) -> tensor<4x256xf32>
  return %s : tensor<4x256xf32>
}
// CHECK-LABEL: func.func @softmax_over_batch(%arg0: tensor<4x256xf32>)
// CHECK-NOT:   prim.batch_chunks
func.func @softmax_over_batch(%x: tensor<4x256xf32>) -> tensor<4x256xf32> {
  %s = "prim.softmax"(%x) {axis = -1 : i64} : (tensor<4x256xf32>) -> tensor<4x256xf32>
  %y = "prim.softmax"(%s) {axis = 0 : i64} : (tensor<4x256xf32>) -> tensor<4x256xf32>
  return %y : tensor<4x256xf32>
}
// CHECK-LABEL: func.func @rows(%arg0: tensor<4x256xf32>)
// CHECK-NOT:   prim.batch_chunks
func.func @rows(%x: tensor<4x256xf32>) -> tensor<1024xf32> {
  %s = "prim.softmax"(%x) {axis = -1 : i64} : (tensor<4x256xf32>) -> tensor<4x256xf32>
  %y = "prim.reshape"(%s) : (tensor<4x256xf32>) -> tensor<1024xf32>
  return %y : tensor<1024xf32>
}
// CHECK-LABEL: func.func @per_sample_constant(%arg0: tensor<4x256xf32>)
// CHECK-NOT:   prim.batch_chunks
func.func @per_sample_constant(%x: tensor<4x256xf32>) -> tensor<4x256xf32> {
  %s = "prim.softmax"(%x) {axis = -1 : i64} : (tensor<4x256xf32>) -> tensor<4x256xf32>
  %k = "prim.constant"() {value = dense<1.0> : tensor<4x256xf32>} : () -> tensor<4x256xf32>
  %y = "prim.add"(%s, %k) : (tensor<4x256xf32>, tensor<4x256xf32>) -> tensor<4x256xf32>
  return %y : tensor<4x256xf32>
}
// CHECK-LABEL: func.func @moved_batch(%arg0: tensor<4x256xf32>)
// CHECK-NOT:   prim.batch_chunks
func.func @moved_batch(%x: tensor<4x256xf32>) -> tensor<256x4xf32> {
  %s = "prim.softmax"(%x) {axis = -1 : i64} : (tensor<4x256xf32>) -> tensor<4x256xf32>
  %y = "prim.transpose"(%s) {perm = array<i64: 1, 0>} : (tensor<4x256xf32>) -> tensor<256x4xf32>
  return %y : tensor<256x4xf32>
}

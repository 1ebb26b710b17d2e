// Reductions of an NCHW map that the layout pass turned NHWC: the transpose does not stay in front.
//  - a mean over H and W (ShuffleNet's head, x.mean([2, 3])) becomes a global average pool of the NHWC
//    map, viewed as the reduction's result (keepdims 0 and 1);
//  - a sum over H and W reduces NHWC axes 1 and 2 in place (the kept [N, C] in order: no transpose);
//  - a max over H alone keeps N, C, W, which NHWC holds as N, W, C: one transpose of the small result.
// RUN: openprim-opt %s -p prim-layout | filecheck %s

// CHECK-LABEL: func.func @heads
// CHECK:       %[[Y:.+]] = "prim.conv2d"({{.*}}layout = "NHWC"{{.*}} -> tensor<2x5x6x8xf32>
// CHECK-NOT:   "prim.transpose"
// CHECK:       %[[P:.+]] = "prim.global_avg_pool"(%[[Y]]) {layout = "NHWC"} : (tensor<2x5x6x8xf32>) -> tensor<2x1x1x8xf32>
// CHECK-NEXT:  %[[M:.+]] = "prim.reshape"(%[[P]]) : (tensor<2x1x1x8xf32>) -> tensor<2x8xf32>
// CHECK:       %[[P1:.+]] = "prim.global_avg_pool"(%[[Y]]) {layout = "NHWC"} : (tensor<2x5x6x8xf32>) -> tensor<2x1x1x8xf32>
// CHECK-NEXT:  %[[K:.+]] = "prim.reshape"(%[[P1]]) : (tensor<2x1x1x8xf32>) -> tensor<2x8x1x1xf32>
// CHECK-NEXT:  %[[S:.+]] = "prim.reduce"(%[[Y]]) {axes = array<i64: 1, 2>, keepdims = 0 : i64, kind = "sum"} : (tensor<2x5x6x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:  %[[H:.+]] = "prim.reduce"(%[[Y]]) {axes = array<i64: 1>, keepdims = 0 : i64, kind = "max"} : (tensor<2x5x6x8xf32>) -> tensor<2x6x8xf32>
// CHECK-NEXT:  %[[T:.+]] = "prim.transpose"(%[[H]]) {perm = array<i64: 0, 2, 1>} : (tensor<2x6x8xf32>) -> tensor<2x8x6xf32>
// CHECK-NEXT:  return %[[M]], %[[K]], %[[S]], %[[T]]
func.func @heads(%x: tensor<2x4x5x6xf32>) -> (tensor<2x8xf32>, tensor<2x8x1x1xf32>, tensor<2x8xf32>, tensor<2x8x6xf32>) {
  %w = "prim.constant"() {value = dense<0.5> : tensor<8x4x1x1xf32>} : () -> tensor<8x4x1x1xf32>
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x4x5x6xf32>, tensor<8x4x1x1xf32>) -> tensor<2x8x5x6xf32>
  %m = "prim.reduce"(%y) {axes = array<i64: 2, 3>, keepdims = 0 : i64, kind = "mean"} : (tensor<2x8x5x6xf32>) -> tensor<2x8xf32>
  %k = "prim.reduce"(%y) {axes = array<i64: -2, -1>, keepdims = 1 : i64, kind = "mean"} : (tensor<2x8x5x6xf32>) -> tensor<2x8x1x1xf32>
  %s = "prim.reduce"(%y) {axes = array<i64: 2, 3>, keepdims = 0 : i64, kind = "sum"} : (tensor<2x8x5x6xf32>) -> tensor<2x8xf32>
  %h = "prim.reduce"(%y) {axes = array<i64: 2>, keepdims = 0 : i64, kind = "max"} : (tensor<2x8x5x6xf32>) -> tensor<2x8x6xf32>
  return %m, %k, %s, %h : tensor<2x8xf32>, tensor<2x8x1x1xf32>, tensor<2x8xf32>, tensor<2x8x6xf32>
}

// Each rewrite of prim-fuse can be turned off: fold-batch-norm, epilogues, elementwise (booleans:
// 1/true/empty, else false). Input: relu(batch_norm(conv(x))) then tanh -> sigmoid.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s --check-prefix=ALL
// RUN: openprim-opt %s -p 'prim-fuse{fold-batch-norm=0}' | filecheck %s --check-prefix=NOBN
// RUN: openprim-opt %s -p 'prim-fuse{epilogues=false elementwise=false}' | filecheck %s --check-prefix=BNONLY

// ALL:          func.func private @fused_0(%arg0: tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32> attributes {prim.fused}
// ALL-LABEL:    func.func @main
// ALL-NOT:      "prim.batch_norm"
// ALL:          %[[C:.+]] = "prim.conv2d"({{.*}}) {activation = "relu"
// ALL-NEXT:     call @fused_0(%[[C]])

// The batch norm stays, so the conv keeps its plain output; the relu after the batch norm is then
// part of the elementwise chain with tanh and sigmoid.
// NOBN-LABEL:   func.func private @fused_0
// NOBN-NEXT:    "prim.relu"
// NOBN-NEXT:    "prim.tanh"
// NOBN-NEXT:    "prim.sigmoid"
// NOBN-LABEL:   func.func @main
// NOBN:         %[[C:.+]] = "prim.conv2d"({{.*}}) {activation = "none"
// NOBN-NEXT:    %[[B:.+]] = "prim.batch_norm"(%[[C]],
// NOBN-NEXT:    call @fused_0(%[[B]])

// BNONLY-NOT:   prim.fused
// BNONLY-LABEL: func.func @main
// BNONLY-NOT:   "prim.batch_norm"
// BNONLY:       %[[C:.+]] = "prim.conv2d"({{.*}}) {activation = "none"
// BNONLY-NEXT:  %[[R:.+]] = "prim.relu"(%[[C]])
// BNONLY-NEXT:  %[[T:.+]] = "prim.tanh"(%[[R]])
// BNONLY-NEXT:  %[[S:.+]] = "prim.sigmoid"(%[[T]])
// BNONLY-NEXT:  return %[[S]]
func.func @main(%x: tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
  %scale = "prim.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %shift = "prim.constant"() {value = dense<0.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "prim.constant"() {value = dense<0.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "prim.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x2x2xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x2x2xf32>
  %y = "prim.batch_norm"(%c, %scale, %shift, %mean, %var) {epsilon = 0.0, layout = "NCHW"} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  %r = "prim.relu"(%y) : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %t = "prim.tanh"(%r) : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %s = "prim.sigmoid"(%t) : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  return %s : tensor<1x2x2x2xf32>
}

// prim-fuse's view_chains rewrites (passes/view_chains.py): chains of moves that together are one transpose.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// Swin's attention output: BSHD -> BHSD (a transpose), a reshape out of the windows, a transpose back to
// the map's rows. Together: one transpose of a 6-d view (window row and column swapped), the heads and the
// head dim merged.
// CHECK-LABEL: func.func @attention_out_of_windows
// CHECK:      %[[R:.+]] = "prim.reshape"(%arg0) : (tensor<8x4x3x2xf32>) -> tensor<2x2x2x2x2x6xf32>
// CHECK-NEXT: %[[T:.+]] = "prim.transpose"(%[[R]]) {perm = array<i64: 0, 1, 3, 2, 4, 5>}
// CHECK-NEXT: %[[O:.+]] = "prim.reshape"(%[[T]]) : (tensor<2x2x2x2x2x6xf32>) -> tensor<2x4x4x6xf32>
// CHECK-NOT:  prim.transpose
// CHECK:      return %[[O]]
func.func @attention_out_of_windows(%a: tensor<8x4x3x2xf32>) -> tensor<2x4x4x6xf32> {
  %t = "prim.transpose"(%a) {perm = array<i64: 0, 2, 1, 3>} : (tensor<8x4x3x2xf32>) -> tensor<8x3x4x2xf32>
  %r = "prim.reshape"(%t) : (tensor<8x3x4x2xf32>) -> tensor<2x2x2x3x2x2x2xf32>
  %w = "prim.transpose"(%r) {perm = array<i64: 0, 1, 4, 2, 5, 3, 6>} : (tensor<2x2x2x3x2x2x2xf32>) -> tensor<2x2x2x2x2x3x2xf32>
  %o = "prim.reshape"(%w) : (tensor<2x2x2x2x2x3x2xf32>) -> tensor<2x4x4x6xf32>
  return %o : tensor<2x4x4x6xf32>
}

// Swin's patch merging: cat(x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], x[1::2, 1::2]) on channels, each
// strided view two slices: a space-to-depth, one transpose (w phase, then h phase, then channels).
// CHECK-LABEL: func.func @patch_merging
// CHECK-NOT:  prim.slice
// CHECK-NOT:  prim.concat
// CHECK:      %[[R:.+]] = "prim.reshape"(%arg0) : (tensor<1x4x6x3xf32>) -> tensor<2x2x3x2x3xf32>
// CHECK-NEXT: %[[T:.+]] = "prim.transpose"(%[[R]]) {perm = array<i64: 0, 2, 3, 1, 4>} : (tensor<2x2x3x2x3xf32>) -> tensor<2x3x2x2x3xf32>
// CHECK-NEXT: %[[O:.+]] = "prim.reshape"(%[[T]]) : (tensor<2x3x2x2x3xf32>) -> tensor<1x2x3x12xf32>
// CHECK:      return %[[O]]
func.func @patch_merging(%x: tensor<1x4x6x3xf32>) -> tensor<1x2x3x12xf32> {
  %h0 = "prim.slice"(%x) {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 4, 6, 3>, steps = array<i64: 1, 2, 1, 1>} : (tensor<1x4x6x3xf32>) -> tensor<1x2x6x3xf32>
  %x0 = "prim.slice"(%h0) {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 2, 6, 3>, steps = array<i64: 1, 1, 2, 1>} : (tensor<1x2x6x3xf32>) -> tensor<1x2x3x3xf32>
  %h1 = "prim.slice"(%x) {starts = array<i64: 0, 1, 0, 0>, ends = array<i64: 1, 4, 6, 3>, steps = array<i64: 1, 2, 1, 1>} : (tensor<1x4x6x3xf32>) -> tensor<1x2x6x3xf32>
  %x1 = "prim.slice"(%h1) {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 2, 6, 3>, steps = array<i64: 1, 1, 2, 1>} : (tensor<1x2x6x3xf32>) -> tensor<1x2x3x3xf32>
  %h2 = "prim.slice"(%x) {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 4, 6, 3>, steps = array<i64: 1, 2, 1, 1>} : (tensor<1x4x6x3xf32>) -> tensor<1x2x6x3xf32>
  %x2 = "prim.slice"(%h2) {starts = array<i64: 0, 0, 1, 0>, ends = array<i64: 1, 2, 6, 3>, steps = array<i64: 1, 1, 2, 1>} : (tensor<1x2x6x3xf32>) -> tensor<1x2x3x3xf32>
  %h3 = "prim.slice"(%x) {starts = array<i64: 0, 1, 0, 0>, ends = array<i64: 1, 4, 6, 3>, steps = array<i64: 1, 2, 1, 1>} : (tensor<1x4x6x3xf32>) -> tensor<1x2x6x3xf32>
  %x3 = "prim.slice"(%h3) {starts = array<i64: 0, 0, 1, 0>, ends = array<i64: 1, 2, 6, 3>, steps = array<i64: 1, 1, 2, 1>} : (tensor<1x2x6x3xf32>) -> tensor<1x2x3x3xf32>
  %c01 = "prim.concat"(%x0, %x1) {axis = 3 : i64} : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x6xf32>
  %c012 = "prim.concat"(%c01, %x2) {axis = 3 : i64} : (tensor<1x2x3x6xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x9xf32>
  %c = "prim.concat"(%c012, %x3) {axis = -1 : i64} : (tensor<1x2x3x9xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x12xf32>
  return %c : tensor<1x2x3x12xf32>
}

// Slices that leave part of the source out are no permutation of it: kept.
// CHECK-LABEL: func.func @partial_slices_kept
// CHECK-COUNT-2: prim.slice
// CHECK:      prim.concat
func.func @partial_slices_kept(%x: tensor<4x6xf32>) -> tensor<2x6xf32> {
  %a = "prim.slice"(%x) {starts = array<i64: 0, 0>, ends = array<i64: 1, 6>, steps = array<i64: 1, 1>} : (tensor<4x6xf32>) -> tensor<1x6xf32>
  %b = "prim.slice"(%x) {starts = array<i64: 2, 0>, ends = array<i64: 3, 6>, steps = array<i64: 1, 1>} : (tensor<4x6xf32>) -> tensor<1x6xf32>
  %c = "prim.concat"(%a, %b) {axis = 0 : i64} : (tensor<1x6xf32>, tensor<1x6xf32>) -> tensor<2x6xf32>
  return %c : tensor<2x6xf32>
}

// Two transposes whose product is not one transpose of a reshape are kept as they are.
// CHECK-LABEL: func.func @not_one_transpose
// CHECK-COUNT-2: prim.transpose
func.func @not_one_transpose(%x: tensor<4x6xf32>) -> tensor<3x8xf32> {
  %t = "prim.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %r = "prim.reshape"(%t) : (tensor<6x4xf32>) -> tensor<8x3xf32>
  %u = "prim.transpose"(%r) {perm = array<i64: 1, 0>} : (tensor<8x3xf32>) -> tensor<3x8xf32>
  return %u : tensor<3x8xf32>
}

// Swin's shifted windows: torch.roll by (-1, -1) (a gather per axis) then the window partition (a transpose
// of a 6-d view): three copies, one gather of whole rows (channels) per image, by the composite index.
// CHECK-LABEL: func.func @roll_and_partition
// CHECK-NOT:  prim.transpose
// CHECK:      %[[R:.+]] = "prim.reshape"(%arg0) : (tensor<2x4x4x3xf32>) -> tensor<2x16x3xf32>
// CHECK-NEXT: %[[I:.+]] = "prim.constant"() {value = dense<[5, 6, 9, 10, 7, 4, 11, 8, 13, 14, 1, 2, 15, 12, 3, 0]> : tensor<16xi64>}
// CHECK-NEXT: %[[G:.+]] = "prim.gather"(%[[R]], %[[I]]) {axis = 1 : i64} : (tensor<2x16x3xf32>, tensor<16xi64>) -> tensor<2x16x3xf32>
// CHECK-NEXT: %[[O:.+]] = "prim.reshape"(%[[G]]) : (tensor<2x16x3xf32>) -> tensor<8x4x3xf32>
// CHECK-NOT:  prim.gather
// CHECK:      return %[[O]]
func.func @roll_and_partition(%x: tensor<2x4x4x3xf32>) -> tensor<8x4x3xf32> {
  %i = "prim.constant"() {value = dense<[1, 2, 3, 0]> : tensor<4xi64>} : () -> tensor<4xi64>
  %h = "prim.gather"(%x, %i) {axis = 1 : i64} : (tensor<2x4x4x3xf32>, tensor<4xi64>) -> tensor<2x4x4x3xf32>
  %j = "prim.constant"() {value = dense<[1, 2, 3, 0]> : tensor<4xi64>} : () -> tensor<4xi64>
  %w = "prim.gather"(%h, %j) {axis = 2 : i64} : (tensor<2x4x4x3xf32>, tensor<4xi64>) -> tensor<2x4x4x3xf32>
  %v = "prim.reshape"(%w) : (tensor<2x4x4x3xf32>) -> tensor<2x2x2x2x2x3xf32>
  %t = "prim.transpose"(%v) {perm = array<i64: 0, 1, 3, 2, 4, 5>} : (tensor<2x2x2x2x2x3xf32>) -> tensor<2x2x2x2x2x3xf32>
  %o = "prim.reshape"(%t) : (tensor<2x2x2x2x2x3xf32>) -> tensor<8x4x3xf32>
  return %o : tensor<8x4x3xf32>
}

// Reshapes in a row are one reshape; a reshape back to the source's type is the source; ops nothing reads
// are dropped. torch.onnx's group norm is reshape [N, C, H, W] -> [N, G, rest] -> instance norm -> back:
// the importer normalizes the map itself, and the view it no longer reads must not stay (on an NCHW
// network each such view costs a layout transpose).
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// CHECK-LABEL: func.func @round_trip
// CHECK-NEXT:  %[[Y:.+]] = "prim.relu"(%arg0)
// CHECK-NEXT:  return %[[Y]]
func.func @round_trip(%x: tensor<2x6x4x5xf32>) -> tensor<2x6x4x5xf32> {
  %a = "prim.reshape"(%x) : (tensor<2x6x4x5xf32>) -> tensor<2x3x40xf32>
  %b = "prim.reshape"(%a) : (tensor<2x3x40xf32>) -> tensor<2x6x4x5xf32>
  %y = "prim.relu"(%b) : (tensor<2x6x4x5xf32>) -> tensor<2x6x4x5xf32>
  return %y : tensor<2x6x4x5xf32>
}

// CHECK-LABEL: func.func @chain
// CHECK-NEXT:  %[[R:.+]] = "prim.reshape"(%arg0) : (tensor<2x6x4x5xf32>) -> tensor<12x20xf32>
// CHECK-NEXT:  %[[Y:.+]] = "prim.relu"(%[[R]])
// CHECK-NEXT:  return %[[Y]]
func.func @chain(%x: tensor<2x6x4x5xf32>) -> tensor<12x20xf32> {
  %a = "prim.reshape"(%x) : (tensor<2x6x4x5xf32>) -> tensor<2x3x40xf32>
  %b = "prim.reshape"(%a) : (tensor<2x3x40xf32>) -> tensor<6x40xf32>
  %c = "prim.reshape"(%b) : (tensor<6x40xf32>) -> tensor<12x20xf32>
  %y = "prim.relu"(%c) : (tensor<12x20xf32>) -> tensor<12x20xf32>
  return %y : tensor<12x20xf32>
}

// A reshape also read elsewhere stays for that reader.
// CHECK-LABEL: func.func @shared
// CHECK-NEXT:  %[[A:.+]] = "prim.reshape"(%arg0) : (tensor<2x6x4x5xf32>) -> tensor<2x3x40xf32>
// CHECK-NEXT:  %[[B:.+]] = "prim.sigmoid"(%[[A]])
// CHECK-NEXT:  %[[Y:.+]] = "prim.relu"(%arg0)
// CHECK-NEXT:  return %[[B]], %[[Y]]
func.func @shared(%x: tensor<2x6x4x5xf32>) -> (tensor<2x3x40xf32>, tensor<2x6x4x5xf32>) {
  %a = "prim.reshape"(%x) : (tensor<2x6x4x5xf32>) -> tensor<2x3x40xf32>
  %s = "prim.sigmoid"(%a) : (tensor<2x3x40xf32>) -> tensor<2x3x40xf32>
  %b = "prim.reshape"(%a) : (tensor<2x3x40xf32>) -> tensor<2x6x4x5xf32>
  %y = "prim.relu"(%b) : (tensor<2x6x4x5xf32>) -> tensor<2x6x4x5xf32>
  return %s, %y : tensor<2x3x40xf32>, tensor<2x6x4x5xf32>
}

// Dead ops go, a chain of them at once; a bounds check stays (the runtime reads its count).
// CHECK-LABEL: func.func @dead
// CHECK-NOT:   "prim.transpose"
// CHECK-NOT:   "prim.softmax"
// CHECK:       "prim.bounds_check"
// CHECK:       return
func.func @dead(%x: tensor<2x6x4x5xf32>, %i: tensor<3xi64>) -> tensor<2x6x4x5xf32> {
  %t = "prim.transpose"(%x) {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x6x4x5xf32>) -> tensor<2x4x5x6xf32>
  %s = "prim.softmax"(%t) {axis = -1 : i64} : (tensor<2x4x5x6xf32>) -> tensor<2x4x5x6xf32>
  %c = "prim.bounds_check"(%i) {size = 6 : i64} : (tensor<3xi64>) -> tensor<1xi32>
  %y = "prim.relu"(%x) : (tensor<2x6x4x5xf32>) -> tensor<2x6x4x5xf32>
  return %y : tensor<2x6x4x5xf32>
}

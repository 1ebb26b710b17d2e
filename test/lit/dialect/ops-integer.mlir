// Integer and bool tensors: token ids looked up with gather, a mask from comparisons, casts; a bool is an i8.
// The module verifies and prints back unchanged.
// RUN: openprim-opt %s | filecheck %s
// CHECK-LABEL: func.func @lookup
// CHECK: "prim.gather"(%arg1, %arg0) {axis = 0 : i64} : (tensor<11x4xf32>, tensor<2x5xi64>) -> tensor<2x5x4xf32>
// CHECK: "prim.bounds_check"(%arg0) {size = 11 : i64} : (tensor<2x5xi64>) -> tensor<1xi32>
// CHECK: "prim.compare"(%arg0, %arg2) {kind = "ne"} : (tensor<2x5xi64>, tensor<1xi64>) -> tensor<2x5xi8>
// CHECK: "prim.cast"(%{{.*}}) : (tensor<2x5xi8>) -> tensor<2x5xi64>
// CHECK: "prim.cumsum"(%{{.*}}) {axis = 1 : i64, exclusive = 0 : i64, reverse = 0 : i64} : (tensor<2x5xi64>) -> tensor<2x5xi64>
// CHECK: "prim.where"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<2x5x1xi8>, tensor<2x5x4xf32>, tensor<1xf32>) -> tensor<2x5x4xf32>
// CHECK: "prim.broadcast"(%{{.*}}) : (tensor<2x5x1xi64>) -> tensor<2x5x4xi64>
func.func @lookup(%ids: tensor<2x5xi64>, %table: tensor<11x4xf32>, %pad: tensor<1xi64>, %zero: tensor<1xf32>)
    -> (tensor<2x5x4xf32>, tensor<1xi32>, tensor<2x5x4xi64>) {
  %e = "prim.gather"(%table, %ids) {axis = 0 : i64} : (tensor<11x4xf32>, tensor<2x5xi64>) -> tensor<2x5x4xf32>
  %n = "prim.bounds_check"(%ids) {size = 11 : i64} : (tensor<2x5xi64>) -> tensor<1xi32>
  %m = "prim.compare"(%ids, %pad) {kind = "ne"} : (tensor<2x5xi64>, tensor<1xi64>) -> tensor<2x5xi8>
  %i = "prim.cast"(%m) : (tensor<2x5xi8>) -> tensor<2x5xi64>
  %p = "prim.cumsum"(%i) {axis = 1 : i64, exclusive = 0 : i64, reverse = 0 : i64} : (tensor<2x5xi64>) -> tensor<2x5xi64>
  %m3 = "prim.reshape"(%m) : (tensor<2x5xi8>) -> tensor<2x5x1xi8>
  %y = "prim.where"(%m3, %e, %zero) : (tensor<2x5x1xi8>, tensor<2x5x4xf32>, tensor<1xf32>) -> tensor<2x5x4xf32>
  %p3 = "prim.reshape"(%p) : (tensor<2x5xi64>) -> tensor<2x5x1xi64>
  %b = "prim.broadcast"(%p3) : (tensor<2x5x1xi64>) -> tensor<2x5x4xi64>
  return %y, %n, %b : tensor<2x5x4xf32>, tensor<1xi32>, tensor<2x5x4xi64>
}

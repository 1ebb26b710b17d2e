// An unknown target is one error line on stderr (nothing on stdout), exit status 1.
// RUN: not openprim-opt %s -p 'prim-pipeline{target=gpu}' 2>&1 | filecheck %s
// RUN: not openprim-opt %s -p 'prim-tile{target=gpu}' 2>&1 | filecheck %s
// CHECK:      {{^.*}}unknown target 'gpu'; targets: cpu, nvvm:<{{.*}}>, rocdl:<{{.*}}>{{$}}
// CHECK-NOT:  {{.}}
func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "prim.relu"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

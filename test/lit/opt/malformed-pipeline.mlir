// An unbalanced '{' in the pipeline must be an error, not an empty pipeline.
// RUN: not openprim-opt %s -p 'prim-fuse{' 2>&1 | filecheck %s
// RUN: not openprim-opt %s -p 'prim-fuse{elementwise=0,prim-select' 2>&1 | filecheck %s
// CHECK:     {{^.*}}malformed pass pipeline{{.*$}}
// CHECK-NOT: {{.}}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "prim.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

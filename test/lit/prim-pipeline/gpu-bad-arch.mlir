// A GPU target with an unsupported architecture is one error line naming the supported ones
// (nothing on stdout), exit status 1.
// RUN: not openprim-opt %s -p 'prim-pipeline{target=nvvm:sm_10}' 2>&1 | filecheck %s
// RUN: not openprim-opt %s -p 'prim-pipeline{target=rocdl:gfx800}' 2>&1 | filecheck %s --check-prefix=ROCDL
// CHECK:      {{^}}openprim-opt: error: target 'nvvm:sm_10': unsupported nvvm architecture 'sm_10'; supported: sm_80, sm_86, sm_89, sm_90, sm_90a{{$}}
// CHECK-NOT:  {{.}}
// ROCDL:      {{^}}openprim-opt: error: target 'rocdl:gfx800': unsupported rocdl architecture 'gfx800'; supported: gfx90a, gfx942, {{.*}}gfx1100{{.*$}}
// ROCDL-NOT:  {{.}}
func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "prim.relu"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

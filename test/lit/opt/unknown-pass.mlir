// Pipeline errors are one line on stderr (nothing on stdout), exit status 1: an unknown pass (handed
// to MLIR's parser, whose message is kept), an unknown option of one of our passes (the valid ones are
// listed), a bad option of an upstream pass, a malformed element.
// RUN: not openprim-opt %s -p prim-fuse,prim-bogus 2>&1 | filecheck %s --check-prefix=PASS
// RUN: not openprim-opt %s -p 'prim-select{bogus=1}' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not openprim-opt %s -p 'canonicalize{bogus=1}' 2>&1 | filecheck %s --check-prefix=UPSTREAM
// RUN: not openprim-opt %s -p 'prim fuse' 2>&1 | filecheck %s --check-prefix=MALFORMED

// PASS:      {{^}}openprim-opt: error: unknown pass or bad options 'prim-bogus': MLIR Textual PassPipeline Parser:1:1: error: 'prim-bogus' does not refer to a registered pass or pass pipeline{{$}}
// PASS-NOT:  {{.}}
// OPTION:    {{^}}openprim-opt: error: unknown option 'bogus' for pass 'prim-select'; options: target, solver, layout, mode, find-budget, enforce{{$}}
// OPTION-NOT: {{.}}
// UPSTREAM:  {{^}}openprim-opt: error: unknown pass or bad options 'canonicalize': <Pass-Options-Parser>: no such option bogus{{$}}
// UPSTREAM-NOT: {{.}}
// MALFORMED: {{^}}openprim-opt: error: malformed pass pipeline element 'prim fuse'{{$}}
// MALFORMED-NOT: {{.}}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "prim.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// Input and output: a file or stdin ('-', the default), -o FILE, --elide-large-elements N (dense
// constants with more than N elements print as dense_resource<__elided__>), and a missing input file
// (one line, exit status 1).
// RUN: openprim-opt %s --verify-only | filecheck %s --check-prefix=FULL
// RUN: openprim-opt < %s | filecheck %s --check-prefix=FULL
// RUN: rm -f %t && openprim-opt %s -o %t && filecheck %s --check-prefix=FULL --input-file %t
// RUN: openprim-opt %s --elide-large-elements 2 | filecheck %s --check-prefix=ELIDED
// RUN: not openprim-opt %s.does-not-exist 2>&1 | filecheck %s --check-prefix=MISSING

// FULL:        "prim.constant"() {value = dense<{{\[}}[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>}
// FULL-NEXT:   "prim.constant"() {value = dense<[5.000000e-01, 2.500000e-01]> : tensor<2xf32>}
// ELIDED:      "prim.constant"() {value = dense_resource<__elided__> : tensor<2x2xf32>}
// ELIDED-NEXT: "prim.constant"() {value = dense<[5.000000e-01, 2.500000e-01]> : tensor<2xf32>}
// MISSING:     {{^}}openprim-opt: error: cannot read '{{.*}}io.mlir.does-not-exist': No such file or directory{{$}}
// MISSING-NOT: {{.}}
func.func @main(%x: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2xf32>) {
  %0 = "prim.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %1 = "prim.constant"() {value = dense<[0.5, 0.25]> : tensor<2xf32>} : () -> tensor<2xf32>
  return %0, %1 : tensor<2x2xf32>, tensor<2xf32>
}

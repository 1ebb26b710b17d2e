// A GPU matmul whose constant rhs has N = 1001 columns (a vocabulary-like head, no multiple of 8; 2 MB of weights) gets 7
// zero columns appended to the rhs and the bias (both constants: folded), runs at N = 1008 (4 rows: a GEMV,
// whose 16-byte vectors of the rhs need N a multiple of 8; gemv_mma packs it in panels of its slabs), and its
// result is sliced back; the CPU (its own padding: Solver.padded_n) is left alone here.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90}' | filecheck %s --check-prefix=GPU
// RUN: openprim-opt %s -p 'prim-select{target=cpu}' | filecheck %s --check-prefix=CPU

// GPU-LABEL: func.func @head
// GPU-DAG:     %[[W:.+]] = "prim.constant"() {{.*}} -> tensor<{{1024x1008|[0-9]+x1024x[0-9]+}}xf16>
// GPU-DAG:     %[[B:.+]] = "prim.constant"() {{.*}} -> tensor<1008xf16>
// GPU:       %[[Y:.+]] = "prim.matmul"(%arg0, %[[W]], %[[B]])
// GPU-SAME:  prim.problem = "gemm-b1-m4-n1008-k1024-nn-f16-bias"
// GPU-SAME:  prim.solver = "{{gemv_gpu|gemv_mma}}"
// GPU-SAME:  -> tensor<4x1008xf16>
// GPU:       %[[S:.+]] = "prim.slice"(%[[Y]]) {ends = array<i64: 4, 1001>, starts = array<i64: 0, 0>, steps = array<i64: 1, 1>}
// GPU:       return %[[S]]
// CPU-LABEL: func.func @head
// CPU-NOT:   prim.slice
// CPU:       prim.problem = "gemm-b1-m4-n1001-k1024-nn-f16-bias"

// A residual epilogue would need the residual padded per call, and a small head's time is its launch:
// both left alone.
// GPU-LABEL: func.func @with_residual
// GPU-NOT:   prim.slice
// GPU:       prim.problem = "gemm-b1-m4-n1001-k1024-nn-f16-bias+residual"
// GPU-LABEL: func.func @small_head
// GPU-NOT:   prim.slice
// GPU:       prim.problem = "gemm-b1-m4-n7-k36-nn-f16-none"
func.func @head(%x: tensor<4x1024xf16>) -> tensor<4x1001xf16> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<1024x1001xf16>} : () -> tensor<1024x1001xf16>
  %b = "prim.constant"() {value = dense<0.25> : tensor<1001xf16>} : () -> tensor<1001xf16>
  %y = "prim.matmul"(%x, %w, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<4x1024xf16>, tensor<1024x1001xf16>, tensor<1001xf16>) -> tensor<4x1001xf16>
  return %y : tensor<4x1001xf16>
}

func.func @with_residual(%x: tensor<4x1024xf16>, %r: tensor<4x1001xf16>) -> tensor<4x1001xf16> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<1024x1001xf16>} : () -> tensor<1024x1001xf16>
  %b = "prim.constant"() {value = dense<0.25> : tensor<1001xf16>} : () -> tensor<1001xf16>
  %y = "prim.matmul"(%x, %w, %b, %r) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (tensor<4x1024xf16>, tensor<1024x1001xf16>, tensor<1001xf16>, tensor<4x1001xf16>) -> tensor<4x1001xf16>
  return %y : tensor<4x1001xf16>
}

func.func @small_head(%x: tensor<4x36xf16>) -> tensor<4x7xf16> {
  %w = "prim.constant"() {value = dense<0.5> : tensor<36x7xf16>} : () -> tensor<36x7xf16>
  %y = "prim.matmul"(%x, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<4x36xf16>, tensor<36x7xf16>) -> tensor<4x7xf16>
  return %y : tensor<4x7xf16>
}

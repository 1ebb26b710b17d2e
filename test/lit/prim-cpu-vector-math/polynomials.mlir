// RUN: openprim-opt %s -p prim-cpu-vector-math | filecheck %s

// prim-cpu-vector-math: tanh, erf and exp on a 1-d f32 vector become kernels/cpu/vmath.py's straight-line
// code in place (no libm call per lane); scalar and 2-d vector math is left to LLVM.

// tanh: x clamped to +-7.905 (maximumf/minimumf keep a NaN), odd rational x P(x^2) / Q(x^2), x itself
// where |x| < 4e-4.
// CHECK-LABEL: func.func @tanh
// CHECK-NOT:   math.tanh
// CHECK:       arith.maximumf %arg0, %{{.+}} : vector<8xf32>
// CHECK:       arith.minimumf
// CHECK:       math.fma {{.+}} : vector<8xf32>
// CHECK:       arith.divf {{.+}} : vector<8xf32>
// CHECK:       %[[ABS:.+]] = math.absf %arg0 : vector<8xf32>
// CHECK:       %[[TINY:.+]] = arith.cmpf olt, %[[ABS]]
// CHECK:       %[[Y:.+]] = arith.select %[[TINY]], %arg0, %{{.+}} : vector<8xi1>, vector<8xf32>
// CHECK:       return %[[Y]]
func.func @tanh(%x: vector<8xf32>) -> vector<8xf32> {
  %y = math.tanh %x : vector<8xf32>
  return %y : vector<8xf32>
}

// erf then exp on one value: both expanded, the exp's 2^n built in the exponent bits.
// CHECK-LABEL: func.func @erf_exp
// CHECK-NOT:   math.erf
// CHECK-NOT:   math.exp
// CHECK:       arith.divf {{.+}} : vector<16xf32>
// CHECK:       math.floor {{.+}} : vector<16xf32>
// CHECK:       arith.shli {{.+}} : vector<16xi32>
// CHECK:       arith.bitcast {{.+}} : vector<16xi32> to vector<16xf32>
func.func @erf_exp(%x: vector<16xf32>) -> vector<16xf32> {
  %e = math.erf %x : vector<16xf32>
  %y = math.exp %e : vector<16xf32>
  return %y : vector<16xf32>
}

// Left alone: a scalar, a 2-d vector, an f16 vector.
// CHECK-LABEL: func.func @left_alone
// CHECK:       math.tanh %arg0 : f32
// CHECK:       math.tanh %arg1 : vector<2x8xf32>
// CHECK:       math.exp %arg2 : vector<8xf16>
func.func @left_alone(%a: f32, %b: vector<2x8xf32>, %c: vector<8xf16>) -> (f32, vector<2x8xf32>, vector<8xf16>) {
  %x = math.tanh %a : f32
  %y = math.tanh %b : vector<2x8xf32>
  %z = math.exp %c : vector<8xf16>
  return %x, %y, %z : f32, vector<2x8xf32>, vector<8xf16>
}

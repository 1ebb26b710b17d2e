// global_avg_pool on GPUs (kernels/gpu/pool.py): x viewed as [N, H*W, C]; blocks over (channel chunk,
// pixel split, image), 16-byte channel vectors per thread, UNROLL = 4 loads a loop step, the pixel lanes
// reduced in shared memory (a barrier per halving), then the 1/(H*W) scale. A pool split over pixels
// writes f32 partial sums to a scratch buffer that a second launch adds up.
// RUN: openprim-opt %s -p 'prim-select{target=nvvm:sm_90},prim-tile{target=nvvm:sm_90}' | filecheck %s
// RUN: openprim-opt %s -p 'prim-select{target=rocdl:gfx942},prim-tile{target=rocdl:gfx942}' | filecheck %s

// EfficientNet-B0's first SE pool at batch 32: 25 pixel splits of 512 pixels (2 loop steps of 4 x 64
// pixel lanes), 4 lanes of 8 channels; then one thread per 8 channels of an image sums the 25 partials.
// CHECK-LABEL: func.func @global_avg_pool_0(%arg0: memref<32x112x112x32xf16>, %arg1: memref<32x1x1x32xf16>)
// CHECK:       memref.reinterpret_cast %arg0 to offset: [0], sizes: [32, 12544, 32], strides: [401408, 32, 1] : memref<32x112x112x32xf16> to memref<32x12544x32xf16>
// CHECK:       %[[PART:.+]] = memref.alloc() {{.*}} : memref<32x25x32xf32>
// CHECK:       gpu.launch blocks({{.*}}) in ({{.*}} = %c1, {{.*}} = %c25, {{.*}} = %c32) threads({{.*}}) in ({{.*}} = %c4, {{.*}} = %c64, {{.*}} = %c1)
// CHECK-SAME:  workgroup(%{{.+}} : memref<64x32xf32, #gpu.address_space<workgroup>>)
// CHECK:       scf.for {{.*}} iter_args({{.*}}) -> (vector<8xf32>)
// CHECK-COUNT-4: vector.load {{.*}} {alignment = 16 : i64} : memref<32x12544x32xf16>, vector<8xf16>
// CHECK:       scf.yield
// CHECK:       gpu.barrier
// CHECK-COUNT-6: gpu.barrier
// CHECK:       vector.store {{.*}}, %[[PART]]
// CHECK:       gpu.terminator
// CHECK:       gpu.launch
// CHECK:       scf.for {{.*}} to %c25
// CHECK:       vector.load %[[PART]]
// CHECK:       arith.constant dense<7.97193{{[0-9]+}}E-5> : vector<8xf32>
// CHECK:       arith.truncf {{.*}} : vector<8xf32> to vector<8xf16>
// CHECK:       vector.store
// CHECK-NOT:   linalg.
// CHECK:       return

// A small pool (one loop step a thread): no split, the scaled mean stored by the first launch.
// CHECK-LABEL: func.func @global_avg_pool_1(%arg0: memref<2x7x7x64xf32>, %arg1: memref<2x1x1x64xf32>)
// CHECK-NOT:   memref.alloc
// CHECK:       gpu.launch blocks({{.*}}) in ({{.*}} = %c1, {{.*}} = %c1, {{.*}} = %c2) threads({{.*}}) in ({{.*}} = %c16, {{.*}} = %c16, {{.*}} = %c1)
// CHECK:       vector.load {{.*}} : memref<2x49x64xf32>, vector<4xf32>
// CHECK:       arith.constant dense<0.020408{{[0-9]+}}> : vector<4xf32>
// CHECK:       vector.store {{.*}} : memref<2x64xf32>, vector<4xf32>
// CHECK:       gpu.terminator
// CHECK-NOT:   gpu.launch
// CHECK:       return
func.func @main(%x: tensor<32x112x112x32xf16>, %s: tensor<2x7x7x64xf32>) -> (tensor<32x1x1x32xf16>, tensor<2x1x1x64xf32>) {
  %0 = "prim.global_avg_pool"(%x) {layout = "NHWC"} : (tensor<32x112x112x32xf16>) -> tensor<32x1x1x32xf16>
  %1 = "prim.global_avg_pool"(%s) {layout = "NHWC"} : (tensor<2x7x7x64xf32>) -> tensor<2x1x1x64xf32>
  return %0, %1 : tensor<32x1x1x32xf16>, tensor<2x1x1x64xf32>
}

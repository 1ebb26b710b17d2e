"""The GPU SIMT solvers (NVIDIA and AMD): one tiled GEMM kernel (kernels/gpu/gemm.py) for implicit-GEMM
convolutions and matmuls, and the bases of the tensor-core and matrix-core solvers; a direct kernel for
depthwise convolutions (kernels/gpu/depthwise.py), which a GEMM would leave with one channel per group."""
from __future__ import annotations

from openprim.kernels.gpu import decode_attention
from openprim.kernels.gpu import depthwise as gpu_depthwise
from openprim.kernels.gpu import gemm as gpu_gemm
from openprim.kernels.gpu import gemv as gpu_gemv
from openprim.kernels.semantics import emit_conv2d, emit_matmul, emit_norm_matmul
from openprim.solvers.base import AttentionSolver, Solver, roofline


class GpuGemmSolver(Solver):
    """Base of the GPU GEMM-like solvers: one tiled SIMT kernel (kernels/gpu/gemm.py) per problem; the tile
    is the tunable, the heuristic takes the largest tile that still gives every multiprocessor work."""
    targets = ("nvvm", "rocdl")
    efficiency = 0.4

    def tunables(self, p):
        return {"tile": list(range(len(gpu_gemm.TILES)))}

    def tables(self):
        return {"tile": tuple(gpu_gemm.TILES)}

    def default_params(self, p, target):
        m, n = self.gemm_shape(p)
        tiles = list(gpu_gemm.TILES.values())
        blocks = [-(-m // t.bm) * -(-n // t.bn) for t in tiles]
        return {"tile": next((i for i, (t, b) in enumerate(zip(tiles, blocks))
                              if b >= target.chip.units and t.bn <= max(n, 32)), len(tiles) - 1)}

    def kernel(self, r):
        return gpu_gemm.gemm_kernel(r.name, r.signature, self.spec(r.problem, r.attrs),
                                    list(gpu_gemm.TILES.values())[r.params["tile"]])

    def kernel_spec(self, p):
        """The kernel's problem without an epilogue: what applicability and costs look at."""
        return self.spec(p, {"activation": "none", "activation_params": ()})

    @staticmethod
    def _epilogue(p, attrs) -> dict:
        return dict(bias="bias" in p.epilogue.split("+"), residual="residual" in p.epilogue.split("+"),
                    activation=attrs["activation"], activation_params=tuple(attrs["activation_params"]))


class ConvImplicitGemmGpu(GpuGemmSolver):
    """NHWC or NCHW convolution as an implicit GEMM (input pixels read in place, zero padding by
    predicates): M = N*OH*OW, N = K, K = R*S*C; strided, dilated and grouped (one GEMM per group:
    grid z). NCHW (prim-select's layout=keep) is read and written in place, without transposes."""
    name = "conv_implicit_gemm_gpu"

    def is_applicable(self, p, target):
        # NCHW is read by gpu_gemm's SIMT kernel only: a subclass with a kernel of its own (the
        # tensor-core solvers) reads NHWC.
        if p.layout != "NHWC" and (p.layout != "NCHW" or type(self).kernel is not GpuGemmSolver.kernel):
            return "needs NHWC activations (prim-select's default layout wraps NCHW in transposes)"
        if p.groups != 1 and p.k // p.groups < 8:
            return f"fewer than 8 output channels per group ({p.k // p.groups}; depthwise-like)"

    def filter_layout(self):
        return "RSCK"

    def cost(self, p, target):
        """The roofline, and for grouped problems the tile's columns a group leaves empty: its K/groups
        output channels fill (K/groups)/BN of them (measured on the H200: ResNeXt-50's 28x28x256 layer,
        32 groups of 8, 0.46 ms, 9x the roofline; its 56x56x128 layer of 4 per group fell to
        conv_reference at 0.80 ms)."""
        base = super().cost(p, target)
        if p.groups == 1:
            return base
        return base * max(1.0, self.tile_columns(p, target) / (p.k // p.groups))

    def tile_columns(self, p, target) -> int:
        """Columns of the block tile the heuristic picks (a grouped problem fills K/groups of them)."""
        return list(gpu_gemm.TILES.values())[self.default_params(p, target)["tile"]].bn

    def gemm_shape(self, p):
        return p.n * p.oh * p.ow, p.k

    def spec(self, p, attrs):
        pt, pl, _, _ = p.padding
        g = p.groups
        conv = (p.n, p.h, p.w, p.c, p.oh, p.ow, p.r, p.s, *p.strides, pt, pl, *p.dilations)
        return gpu_gemm.GemmSpec(p.n * p.oh * p.ow, p.k // g, p.r * p.s * p.c // g, p.dtype, conv, groups=g,
                                 layout=p.layout, **self._epilogue(p, attrs))

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_conv2d(kt, "conv2d", operands, attrs, shape, dtype)


class GemmGpu(GpuGemmSolver):
    """matmul / linear with a 2-d [K, N] right-hand side (batch dims of the lhs folded into M)."""
    name = "gemm_gpu"
    op = "matmul"

    def is_applicable(self, p, target):
        if p.batched_rhs or p.transpose_rhs:
            return "needs a 2-d, non-transposed rhs (prim-select transposes constant weights)"

    def gemm_shape(self, p):
        return p.m, p.n

    def spec(self, p, attrs):
        return gpu_gemm.GemmSpec(p.m, p.n, p.k, p.dtype, **self._epilogue(p, attrs))

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_matmul(kt, "matmul", operands, attrs, shape, dtype)


class GemvGpu(GemmGpu):
    """matmul / linear of at most 8 rows (a decode step's projections) read at memory speed
    (kernels/gpu/gemv.py): each block a slab of the weights' columns for every row, k reduced in registers,
    shuffles and one shared-memory sum, the epilogue fused; no tile rows computed in vain. Costed as its
    bytes, the multiplies at the SIMT rate. The tunable "lanes" is the column lanes of a block."""
    name = "gemv_gpu"
    efficiency = 0.5

    def is_applicable(self, p, target):
        return super().is_applicable(p, target) or gpu_gemv.applicable(p.m, p.n, p.k, p.dtype)

    def cost(self, p, target):
        """Its bytes, the multiplies at the SIMT rate; vectors of B narrower than 8 bytes (N not a multiple
        of 4 f16) issue that many more loads for the same bytes, so GPT-2's 50257-column head is worth its
        padding to 50264 (prim_select._pad_columns) and 16-byte vectors."""
        item = gpu_gemv.ITEM[p.dtype]
        narrow = max(1.0, 8 / (gpu_gemv.vector_width(p.n, p.dtype) * item))
        return roofline(p.flops, narrow * item * (p.m * p.k + p.k * p.n + 2 * p.m * p.n), target, self.efficiency)

    def tunables(self, p):
        return {"lanes": gpu_gemv.lanes_options(p.m, p.n, p.dtype)}

    def tables(self):
        return {}

    def default_params(self, p, target):
        return {"lanes": gpu_gemv.default_lanes(p.m, p.n, p.dtype, target.chip.units)}

    def kernel(self, r):
        return gpu_gemv.gemv_kernel(r.name, r.signature, self.spec(r.problem, r.attrs), r.params["lanes"])


class NormGemvSolver:
    """Mixin: a GEMV solver's kernel for prim.norm_matmul (prim-select's fusion of a layer_norm/rms_norm and the
    matmul that alone reads it): the rows' statistics computed by every block, the rows normalized as they
    are read, so the norm's output never goes through memory and its launch is gone. NVIDIA only (the
    prologue's warp sums are those of the norm's warp kernel, measured there)."""
    op = "norm_matmul"
    targets = ("nvvm",)

    def is_applicable(self, p, target):
        return super().is_applicable(p, target) or gpu_gemv.norm_applicable(p.k, p.dtype)

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_norm_matmul(kt, "norm_matmul", operands, attrs, shape, dtype)

    def kernel(self, r):
        signature, norm = gpu_gemv.RowNorm.split(r.signature, r.given, r.attrs)
        return self.gemv_kernel(r, signature, norm)


class NormGemvGpu(NormGemvSolver, GemvGpu):
    name = "norm_gemv_gpu"

    def gemv_kernel(self, r, signature, norm):
        return gpu_gemv.gemv_kernel(r.name, signature, self.spec(r.problem, r.attrs), r.params["lanes"], norm,
                                    r.signature)


class AttentionDecodeGpu(AttentionSolver):
    """prim.attention of one query row per head (a decode step over its key cache) as flash-decoding
    (kernels/gpu/decode_attention.py): the keys split across blocks as well as the heads, a key's dot
    product across the lanes that read its row, the splits' softmax states combined by a second launch;
    f16/bf16, head dims 64 and 128, an optional additive mask. Costed as its bytes, the products at the
    SIMT rate, where the flash kernels pay for a whole query tile."""
    name = "attention_decode_gpu"
    targets = ("nvvm", "rocdl")
    efficiency = 0.5

    def is_applicable(self, p, target):
        return decode_attention.applicable(p.dtype, p.sq, p.d, p.causal)

    def kernel(self, r):
        return decode_attention.decode_attention_kernel(r.name, r.signature, r.attrs["scale"], r.attrs["layout"],
                                                        units=r.target.chip.units)


class ConvDepthwiseGpu(Solver):
    """Depthwise convolution (groups = C = K, NHWC x RSCK) on GPUs: each thread a vector of channels
    (4, 8 or 16 bytes; narrower where C needs it) of an HT x WT tile of output pixels, the filter in
    registers, f32 accumulation, the epilogue fused (kernels/gpu/depthwise.py). Memory-bound: its cost
    is the bytes it moves, input, filter and output once each."""
    name = "conv_depthwise_gpu"
    targets = ("nvvm", "rocdl")
    efficiency = 0.5

    def is_applicable(self, p, target):
        if not p.depthwise:
            return "not depthwise (needs groups = C = K)"
        if p.layout != "NHWC":
            return "needs NHWC activations (prim-select's default layout wraps NCHW in transposes)"

    def filter_layout(self):
        return "RSCK"

    def cost(self, p, target):
        item = 4 if p.dtype == "f32" else 2
        extra = p.n * p.oh * p.ow * p.k * (("residual" in p.epilogue.split("+")) + 1)
        nbytes = item * (p.n * p.h * p.w * p.c + p.k * p.r * p.s + extra)
        return roofline(p.flops, nbytes, target, self.efficiency)

    def tunables(self, p):
        return {"wt": [1, 2, 4, 7, 8], "ht": [1, 2, 4] if p.r * p.s <= 25 else [1], "vbytes": [4, 8, 16]}

    def default_params(self, p, target):
        """Narrow vectors and several output rows a thread, which share their input rows: more threads in
        flight and fewer loads. At 3x3 in f16/bf16, 4 x 4 pixels of 2 channels (4-byte vectors), or 2 x 7
        pixels of 4 channels where the rows are 7 or 14 wide; in f32, 4 x 4 pixels of 2 channels. Fitted
        on MobileNetV2's ten depthwise layers on the H200, 17 combinations of WT, HT and vector bytes
        timed inside CUDA graphs (bench/gpu_depthwise.py --variants; bench/gpu_depthwise_h200_tiles.json):
        summed over the layers, within 4% of each layer's best combination (which Find mode can pick),
        and 1.24x (f16) and 1.10x (f32) as fast as 16-byte vectors of one row of 4 pixels.
        5x5 (not measured): 2 rows of 4 pixels, 8-byte vectors; 7x7 keeps one row (its filter rows loop)."""
        if p.r * p.s > 25:  # 7x7 (not refitted): 16 bytes of one row, 7 pixels where OW is 7 or 14
            return {"wt": next((w for w in (4, 7, 2) if p.ow % w == 0), min(4, p.ow)), "ht": 1, "vbytes": 16}
        if p.r * p.s > 9:
            return {"wt": min(4, p.ow), "ht": 2, "vbytes": 8}
        if p.dtype == "f32":
            return {"wt": min(4, p.ow), "ht": 4, "vbytes": 8}
        if p.ow % 7 == 0 and p.ow % 4:
            return {"wt": 7, "ht": 2, "vbytes": 8}
        return {"wt": min(4, p.ow), "ht": 4, "vbytes": 4}

    def spec(self, p, attrs, params):
        """The kernel's problem; filter rows unrolled up to 5x5 (7x7: a loop, bounding the live registers)."""
        epi = p.epilogue.split("+")
        return gpu_depthwise.DepthwiseSpec(
            p.n, p.h, p.w, p.c, p.oh, p.ow, p.r, p.s, p.strides, p.padding, p.dilations, p.dtype, params["wt"],
            params.get("ht", 1), params.get("vbytes", 16), unrolled=p.r * p.s <= 25,
            bias="bias" in epi, residual="residual" in epi, activation=attrs["activation"],
            activation_params=tuple(attrs["activation_params"]))

    def kernel(self, r):
        return gpu_depthwise.depthwise_kernel(r.name, r.signature, self.spec(r.problem, r.attrs, r.params))

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_conv2d(kt, "conv2d", operands, attrs, shape, dtype)

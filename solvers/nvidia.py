"""The NVIDIA tensor-core solvers: mma.sync (sm_80 and later) and the sm_90 warpgroup MMA (wgmma + TMA)
kernels: implicit GEMM, im2col, Winograd and space-to-depth convolutions, GEMMs, and flash attention."""
from __future__ import annotations

import math

from openprim.base.settings import ALLOW_TF32, setting
from openprim.kernels.nvidia import depthwise_pointwise, flash_attention, flash_attention_wgmma, gemv_mma
from openprim.kernels.nvidia import mma as gpu_mma
from openprim.kernels.nvidia import wgmma as gpu_wgmma
from openprim.kernels.nvidia import wgmma_backward_weights as gpu_wgmma_bwd_weights
from openprim.kernels.nvidia import wgmma_im2col, wgmma_space_to_depth, wgmma_winograd
from openprim.kernels.semantics import EMITTERS, emit_depthwise_pointwise
from openprim.solvers.base import AttentionSolver, Solver, rhs_panels, roofline
from openprim.solvers.gpu_simt import ConvImplicitGemmGpu, GemmGpu, GpuGemmSolver, NormGemvSolver
from openprim.solvers.winograd import WINOGRAD


class MmaSolver:
    """Mixin: the tensor-core kernel (kernels/nvidia/mma.py) on NVIDIA for f16/bf16 (and f32 as TF32 when
    OPENPRIM_ALLOW_TF32=1, like PyTorch's allow_tf32), where its 16-byte row loads apply; efficiency is
    relative to the fp32 SIMT peak that the roofline uses (mma.sync: several times it). The "tile"
    parameter indexes gpu_mma.CONFIGS: (block tile, shared-memory stages)."""
    targets = ("nvvm",)
    efficiency = 3.0

    def is_applicable(self, p, target):
        if p.dtype == "f32" and setting(ALLOW_TF32) != "1":
            return "f32 on tensor cores needs OPENPRIM_ALLOW_TF32=1 (TF32: 10-bit mantissa)"
        return super().is_applicable(p, target) or gpu_mma.applicable(self.kernel_spec(p))

    def tunables(self, p):
        return {"tile": [i for i, (tile, stages) in enumerate(gpu_mma.CONFIGS)
                         if gpu_mma.shared_bytes(p.dtype, tile, stages) <= gpu_mma.STATIC_SHARED_LIMIT]}

    def tables(self):
        return {"tile": tuple(f"{tile}-s{stages}" for tile, stages in gpu_mma.CONFIGS)}

    def default_params(self, p, target):
        """The 128x128 block only where it is filled (N >= 128) and still gives every multiprocessor a
        block; measured on the ResNet-50 layers (bench/RESULTS.md), N = 64 ran 1.4x faster on 64x64.
        Reductions of 1024 and more (32+ k tiles) go through the cp.async pipeline, with as many stages
        as fit (2 for 128x128, 4 for 64x64): on the H200 that made the fp16 ResNet-50 layers with
        K = R*S*C of 1024-4608 1.15-2x faster and the 8192^3 GEMM 1.07x; below that, register
        prefetch was as fast or faster (K = 64 and 576: up to 1.5x)."""
        m, n = self.gemm_shape(p)
        g = p.groups if self.op == "conv2d" else 1           # a grouped problem: one GEMM per group
        n //= g
        big = n >= 128 and -(-m // 128) * -(-n // 128) * g >= target.chip.units
        k = p.r * p.s * p.c // g if self.op == "conv2d" else p.k
        stages = (2 if big else 4) if k >= 1024 else 1
        return {"tile": gpu_mma.CONFIGS.index(("large" if big else "small", stages))}

    def tile_columns(self, p, target) -> int:
        return gpu_mma.TILES[gpu_mma.CONFIGS[self.default_params(p, target)["tile"]][0]][1]

    def kernel(self, r):
        return gpu_mma.mma_kernel(r.name, r.signature, self.spec(r.problem, r.attrs), *gpu_mma.CONFIGS[r.params["tile"]])


class ConvImplicitGemmMma(MmaSolver, ConvImplicitGemmGpu):
    """Implicit-GEMM convolution on tensor cores (mma.sync m16n8k16, f32 accumulators)."""
    name = "conv_implicit_gemm_mma"


class GemmMma(MmaSolver, GemmGpu):
    """matmul / linear on tensor cores."""
    name = "gemm_mma"


class WgmmaSolver:
    """Mixin: the sm_90 warpgroup kernel (kernels/nvidia/wgmma.py: TMA, mbarriers, wgmma) for f16/bf16 where TMA's
    boxes apply (stride 1, 16-byte strides); elsewhere mma.sync. The "tile" parameter indexes
    gpu_wgmma.CONFIGS: (BM, BN, warpgroups, stages)."""
    targets = ("nvvm",)
    efficiency = 6.0
    split_k = False     # the kernel is kernels/nvidia/wgmma.py's own GEMM, which can split its k tiles

    def is_applicable(self, p, target):
        if target.matrix_core != "wgmma":
            return f"wgmma and TMA need sm_90 ({target.arch} has {target.matrix_core} only)"
        if self.grouped(p) and type(self).kernel is not WgmmaSolver.kernel:
            return f"grouped convolution (groups={p.groups}): the implicit-GEMM kernel takes groups of 64"
        return super().is_applicable(p, target) or self.kernel_applicable(self.kernel_spec(p))

    def kernel_applicable(self, spec) -> str | None:
        return gpu_wgmma.applicable(spec)

    def cost(self, p, target):
        """A k tile is 64 channels of one filter tap (or 64 of K): fewer channels are multiplied as zeros
        (the 8-channel padded stem: 8x the work, so it stays on mma.sync, whose k runs across taps). A
        grouped problem (64 channels per group) fills its tile: the plain roofline, without the SIMT
        kernel's empty columns."""
        c = p.c // p.groups if self.op == "conv2d" else p.k
        wasted = p.flops * (-(-c // gpu_wgmma.BK) * gpu_wgmma.BK / c - 1)
        base = GpuGemmSolver.cost(self, p, target) if self.grouped(p) else super().cost(p, target)
        return base + wasted / (target.rates[0] * 1e9 * self.efficiency)

    def grouped(self, p) -> bool:
        return self.op == "conv2d" and p.groups > 1

    def tunables(self, p):
        tiles = {"tile": [i for i, cfg in enumerate(gpu_wgmma.CONFIGS) if not self.grouped(p) or cfg[1] == gpu_wgmma.BK]}
        if not self.split_k or self.grouped(p):
            return tiles
        kt = self.k_tiles(p)
        return {**tiles, "splits": [d for d in (1, 2, 3, 4, 6, 8, 9, 12, 16, 18, 24) if kt % d == 0 and kt // d >= 2]}

    def tables(self):
        return {"tile": tuple(f"{bm}x{bn}-wg{wg}-s{stages}" for bm, bn, wg, stages in gpu_wgmma.CONFIGS)}

    def splits(self, p, target, tile: int) -> int:
        """k runs for a grid that leaves most multiprocessors idle (a quarter or fewer busy) and a reduction
        of 8+ k tiles: the most that keep the grid within one wave and 4+ k tiles a run (the pipeline's
        depth). ResNet-18 at batch 1 on the H200: its 7x7 layers were 4 blocks of 128 x 128 for 72 k tiles,
        25 us each of a 0.23 ms network."""
        m, n = self.gemm_shape(p)
        bm, bn = gpu_wgmma.CONFIGS[tile][:2]
        blocks = -(-m // bm) * -(-n // bn)
        kt = self.k_tiles(p)
        if not self.split_k or self.grouped(p) or 4 * blocks > target.chip.units or kt < 8:
            return 1
        return max(d for d in range(1, kt + 1) if kt % d == 0 and d * blocks <= target.chip.units and kt // d >= 4)

    def default_params(self, p, target):
        """Measured on the H200 (bench/RESULTS.md, same runs as cuDNN): 128x128 with one warpgroup and 4
        stages is the fastest on the ResNet-50 layers with N >= 128 and 16+ k tiles (1.2-1.7x cuDNN;
        128x64 and 64x64 ran 1.3-1.5x slower there); with 12 k tiles or fewer, 2 stages (3 blocks per
        multiprocessor instead of 1, so one block's epilogue overlaps the others' k loops: the 1x1/2
        downsampling layer 0.77x -> 0.92x cuDNN; a transformer's K = 768 GEMMs 6-14% faster than with 4
        stages, bench/gpu_kernels.py's tgemm cases); 256x128 with two
        warpgroups on long reductions (the 8192^3 GEMM: 655-723 TFLOP/s); N <= 64 takes 64x64 with 4
        stages (64@56 3x3: 0.87x -> 1.12x cuDNN, against 128x64 with 6), or 128x64 with 3 when there are
        one or two k tiles (64@56 1x1: 1.32x against 1.15-1.26x on 64x64)."""
        tile = self.default_tile(p, target)
        splits = self.splits(p, target, tile)
        return {"tile": tile, **({"splits": splits} if splits > 1 else {})}

    def default_tile(self, p, target) -> int:
        m, n = self.gemm_shape(p)
        n //= p.groups if self.op == "conv2d" else 1         # a grouped problem's tile is one group: BN = 64
        k = p.r * p.s * p.c if self.op == "conv2d" else p.k
        k_tiles = self.k_tiles(p)
        blocks = lambda bm, bn: -(-m // bm) * -(-n // bn)  # noqa: E731
        if n >= 256 and k >= 2048 and blocks(256, 128) >= 2 * target.chip.units:
            return 2
        if n > 64:
            smaller = self.partial_wave_tile(blocks(128, 128), k_tiles, target)
            return smaller if smaller is not None else 7 if k_tiles <= 12 else 0
        return 5 if k_tiles <= 2 else 6

    def partial_wave_tile(self, blocks: int, k_tiles: int, target) -> int | None:
        """A smaller tile for a matmul whose 128 x 128 grid leaves multiprocessors idle in its last wave and
        is too large to split over k (splits): 64 x 64 where the grid is under one wave, 128 x 64 with
        two warpgroups where its last wave is under 80% full and the reduction short; None: the 128 x 128
        tile. Measured on the H100 (bench/RESULTS.md, 2026-12-07, BERT's and GPT-2's projections): 1024 x
        768 x 768 9.2 -> 5.4 us, 1024 x 3072 x 768 16.8 -> 14.7, 1024 x 768 x 2304 12.3 -> 11.5, 4096 x 768 x 768
        12.4 -> 11.6; a fuller last wave (4096 x 768 x 2304: 87%) and long reductions keep 128 x 128."""
        units = target.chip.units
        if self.op != "matmul" or 4 * blocks <= units:
            return None
        if blocks < units:
            return 6
        if k_tiles <= 12 and blocks / (-(-blocks // units) * units) < 0.8:
            return 5
        return None

    def k_tiles(self, p) -> int:
        """64-wide k tiles per output tile: one per filter tap and 64 channels (a matmul: of K)."""
        return p.r * p.s * -(-p.c // p.groups // gpu_wgmma.BK) if self.op == "conv2d" else -(-p.k // gpu_wgmma.BK)

    def kernel(self, r):
        return gpu_wgmma.wgmma_kernel(r.name, r.signature, self.spec(r.problem, r.attrs), r.params["tile"],
                                      r.params.get("splits", 1), smem_limit=r.target.chip.shared_per_block)


class ConvImplicitGemmWgmma(WgmmaSolver, ConvImplicitGemmGpu):
    """Implicit-GEMM convolution on sm_90 warpgroup MMA, the input read in place by TMA boxes."""
    name = "conv_implicit_gemm_wgmma"
    split_k = True


class ConvIm2colGemmWgmma(WgmmaSolver, ConvImplicitGemmGpu):
    """im2col + GEMM on sm_90 warpgroup MMA: the windows copied into a [N*OH*OW, R*S*C] scratch buffer,
    then the TMA/wgmma GEMM with the fused epilogue. The buffer's round trip makes it slower than the
    implicit GEMM, which reads the same rows in place: a find candidate."""
    name = "conv_im2col_gemm_wgmma"

    def is_applicable(self, p, target):
        return super().is_applicable(p, target) or (None if p.c % 8 == 0 else "needs channels in multiples of 8")

    def cost(self, p, target):
        col = 2 * p.n * p.oh * p.ow * p.r * p.s * p.c * 2       # the buffer, written and read (2 bytes)
        return WgmmaSolver.cost(self, p, target) + col / (target.rates[1] * 1e9)

    def kernel(self, r):
        return wgmma_im2col.im2col_gemm_kernel(r.name, r.signature, self.spec(r.problem, r.attrs), r.params["tile"],
                                               smem_limit=r.target.chip.shared_per_block)


class ConvWinogradWgmma(WgmmaSolver, ConvImplicitGemmGpu):
    """Winograd F(m x m, 3x3) on sm_90 with its (m+2)^2 GEMMs on warpgroup MMA (wgmma_winograd.winograd_kernel):
    input and filter transforms into scratch, the GEMMs batched on grid z (f32 out), the output transform
    with the fused epilogue. Fewer multiplies than the implicit GEMM (4 or 2.25 per output instead of 9)
    for the transformed tiles' memory traffic, which the cost counts. Measured on the H200 (ResNet-50 3x3
    layers, fp16): 0.29-0.89x cuDNN against the implicit GEMM's 0.85-1.7x, so its GEMM efficiency is
    set to what those runs give (1.5, a quarter of the implicit GEMM's) and it stays a find candidate."""
    m = 2
    efficiency = 1.5

    def is_applicable(self, p, target):
        if (p.r, p.s) != (3, 3) or tuple(p.strides) != (1, 1) or tuple(p.dilations) != (1, 1):
            return "not a 3x3, stride-1, undilated convolution"
        return super().is_applicable(p, target) or (None if p.c % 8 == 0 else "needs channels in multiples of 8")

    def cost(self, p, target):
        a = self.m + 2
        tiles = p.n * -(-p.oh // self.m) * -(-p.ow // self.m)
        peak, bandwidth = target.rates
        gemm = 2.0 * a * a * tiles * p.c * p.k
        traffic = a * a * (2 * tiles * p.c * 2 + 2 * tiles * p.k * 4 + 2 * p.c * p.k * 2) + \
            2 * (p.n * p.h * p.w * p.c + p.n * p.oh * p.ow * p.k)
        return gemm / (peak * 1e9 * self.efficiency) + traffic / (bandwidth * 1e9)

    def default_params(self, p, target):
        return {"tile": 0}

    def kernel(self, r):
        return wgmma_winograd.winograd_kernel(r.name, r.signature, self.spec(r.problem, r.attrs), self.m,
                                              WINOGRAD[self.m], r.params["tile"],
                                              smem_limit=r.target.chip.shared_per_block)


class ConvWinogradF2x3Wgmma(ConvWinogradWgmma):
    name = "conv_winograd_f2x3_wgmma"
    m = 2


class ConvWinogradF4x3Wgmma(ConvWinogradWgmma):
    name = "conv_winograd_f4x3_wgmma"
    m = 4


class ConvSpaceToDepthWgmma(WgmmaSolver, ConvImplicitGemmGpu):
    """Few input channels (an RGB stem) on sm_90 warpgroup MMA: the input repacked space-to-depth so that
    one filter row's taps x channels are 64 contiguous elements, read as k tiles through an overlapping
    TMA view (wgmma_space_to_depth.space_to_depth_kernel). The 7x7/2 stem on 3 channels multiplies 4 x 64 per
    output instead of the implicit GEMM's 49 x 64 (or mma.sync's 49 x 8 after padding to 8 channels)."""
    name = "conv_space_to_depth_wgmma"

    def kernel_applicable(self, spec):
        return wgmma_space_to_depth.space_to_depth_applicable(spec)

    def cost(self, p, target):
        """The GEMM at R2 k tiles per output (zeros included); the input read, the repacked image written
        and read, the output written (2-byte elements)."""
        g = wgmma_space_to_depth.space_to_depth_shape(self.kernel_spec(p).conv)
        flops = 2.0 * p.n * p.oh * p.ow * p.k * g["r2"] * gpu_wgmma.BK
        nbytes = 2 * (p.n * p.h * p.w * p.c + 2 * p.n * g["hb"] * g["wb"] * g["cq"] + p.n * p.oh * p.ow * p.k)
        return roofline(flops, nbytes, target, self.efficiency)

    def k_tiles(self, p):
        return -(-p.r // p.strides[0])                  # one per filter row of blocks

    def kernel(self, r):
        return wgmma_space_to_depth.space_to_depth_kernel(r.name, r.signature, self.spec(r.problem, r.attrs),
                                                          r.params["tile"], smem_limit=r.target.chip.shared_per_block)


class GemmWgmma(WgmmaSolver, GemmGpu):
    """matmul / linear on sm_90 warpgroup MMA with TMA loads."""
    name = "gemm_wgmma"
    split_k = True


class GemvMma(GemmGpu):
    """matmul / linear of at most 16 rows (a batch of decode steps' projections) on mma.sync
    (kernels/nvidia/gemv_mma.py): the rows are one m16 tile, each block streams a slab of the weights'
    columns over all of k, its warps splitting k, one shared-memory sum; no split-K launch. Costed as its
    bytes and a full 16-row tile's multiplies at the mma.sync rate, so that a row or two stay with the SIMT
    GEMV (gemv_gpu), which multiplies only the rows it has. The "tile" parameter indexes gemv_mma.CONFIGS:
    (columns per block, warps, stages)."""
    name = "gemv_mma"
    targets = ("nvvm",)
    efficiency = 3.0

    def is_applicable(self, p, target):
        if target.matrix_core not in ("mma.sync", "wgmma"):
            return f"needs mma.sync (sm_80 or later; {target.arch} has {target.matrix_core})"
        return super().is_applicable(p, target) or gemv_mma.applicable(p.m, p.n, p.k, p.dtype)

    def cost(self, p, target):
        return roofline(2.0 * gemv_mma.MAX_ROWS * p.k * p.n, 2 * (p.m * p.k + p.k * p.n + 2 * p.m * p.n), target,
                        self.efficiency)

    def tunables(self, p):
        return {"tile": [i for i, (bn, _, _) in enumerate(gemv_mma.CONFIGS) if not p.panels or bn == p.panels]}

    def tables(self):
        return {"tile": tuple(f"{bn}n-w{warps}-s{stages}" for bn, warps, stages in gemv_mma.CONFIGS)}

    def default_params(self, p, target):
        return {"tile": gemv_mma.default_config(p.n, target.chip.units, p.panels)}

    def packed_rhs(self, p, params):
        """Constant weights in panels of the block's columns, so that a block streams one contiguous run
        of K x BN (module docstring of kernels/nvidia/gemv_mma.py)."""
        return rhs_panels(p, gemv_mma.CONFIGS[params["tile"]][0])

    def kernel(self, r):
        return gemv_mma.gemv_mma_kernel(r.name, r.signature, self.spec(r.problem, r.attrs), r.params["tile"],
                                        panels=r.problem.panels)


class NormGemvMma(NormGemvSolver, GemvMma):
    name = "norm_gemv_mma"

    def gemv_kernel(self, r, signature, norm):
        return gemv_mma.gemv_mma_kernel(r.name, signature, self.spec(r.problem, r.attrs), r.params["tile"], norm,
                                        r.signature, r.problem.panels)


class AttentionFlashMma(AttentionSolver):
    """prim.attention as one flash-attention kernel on mma.sync (kernels/nvidia/flash_attention.py): f16/bf16,
    head dims 64 and 128, causal or not, an optional additive mask; the scores stay on chip. Costed like
    the mma.sync GEMMs."""
    name = "attention_flash_mma"
    targets = ("nvvm",)
    efficiency = 3.0
    query_rows = flash_attention.BLOCK_Q

    def is_applicable(self, p, target):
        if target.matrix_core not in ("mma.sync", "wgmma"):
            return f"needs mma.sync (sm_80 or later; {target.arch} has {target.matrix_core})"
        return flash_attention.applicable(p.dtype, p.d)

    def kernel(self, r):
        return flash_attention.attention_kernel(r.name, r.signature, r.attrs["scale"], bool(r.attrs["causal"]),
                                                r.attrs["layout"])


class AttentionFlashWgmma(AttentionFlashMma):
    """prim.attention as one flash-attention kernel on sm_90's warpgroup MMA (kernels/nvidia/
    flash_attention_wgmma.py: TMA tiles, both products on wgmma, P from registers): f16/bf16, head dims 64
    and 128, causal or not, no additive mask. Costed as the mma.sync kernel at wgmma's rate."""
    name = "attention_flash_wgmma"
    efficiency = 6.0
    query_rows = flash_attention_wgmma.BLOCK_Q

    def is_applicable(self, p, target):
        if target.matrix_core != "wgmma":
            return f"wgmma and TMA need sm_90 ({target.arch} has {target.matrix_core} only)"
        return flash_attention_wgmma.applicable(p.dtype, p.d, p.mask is not None)

    def kernel(self, r):
        return flash_attention_wgmma.attention_kernel(r.name, r.signature, r.attrs["scale"],
                                                      bool(r.attrs["causal"]), r.attrs["layout"],
                                                      units=r.target.chip.units)


class ConvDepthwisePointwiseMma(Solver):
    """prim.depthwise_pointwise on mma.sync (kernels/nvidia/depthwise_pointwise.py): the pointwise GEMM with
    its A tile computed by the depthwise convolution in registers, so the depthwise result never reaches
    memory; f16/bf16, channels and output channels multiples of 8. Costed as the input, filters and output
    moved once, the GEMM at the mma.sync rate and the depthwise multiplies at the SIMT rate, once per block
    column (tile "large": 128 x 128 blocks, "small": 64 x 64)."""
    name = "conv_depthwise_pointwise_mma"
    op = "depthwise_pointwise"
    targets = ("nvvm",)
    efficiency = 3.0

    def is_applicable(self, p, target):
        if p.dtype not in ("f16", "bf16"):
            return f"{p.dtype}: the fused kernel takes f16 or bf16"
        if p.c % 8 or p.k % 8:
            return "needs channels and output channels that are multiples of 8 (16-byte rows)"
        return None

    def tunables(self, p):
        return {"tile": list(range(len(depthwise_pointwise.TILES)))}

    def tables(self):
        return {"tile": tuple(depthwise_pointwise.TILES)}

    def default_params(self, p, target):
        return {"tile": 0 if p.k > 64 else 1}

    def block(self, p, target) -> tuple[int, int]:
        """(BM, BN) of the default tile."""
        return gpu_mma.TILES[depthwise_pointwise.TILES[self.default_params(p, target)["tile"]]][:2]

    def blocks(self, p, target) -> int:
        bm, bn = self.block(p, target)
        return -(-p.n * p.oh * p.ow // bm) * -(-p.k // bn)

    def pays(self, p, target) -> bool:
        """Whether the grid has 8 or more blocks per multiprocessor. A block computes its depthwise tiles
        one k tile after another (R S dependent loads each), which only many resident blocks hide. On the
        H200 (bench/RESULTS.md, MobileNetV2's pairs at batch 32 against the two kernels) the fused kernel
        was 1.09-1.43x faster with 12-48 blocks per multiprocessor (32@112, 96@112/2, 144@56) and 1.7-8x
        slower with 3 or fewer (144@56/2, 192@28, 384@14, 576@14, 960@7)."""
        return self.blocks(p, target) >= 8 * target.chip.units

    def cost(self, p, target):
        m = p.n * p.oh * p.ow
        bn = self.block(p, target)[1]
        nbytes = 2 * (p.n * p.h * p.w * p.c + m * p.k * (2 if "residual" in p.epilogue else 1)
                      + p.c * (p.k + p.r * p.s))
        peak = target.rates[0] * 1e9
        return roofline(2.0 * m * p.c * p.k, nbytes, target, self.efficiency) + \
            2.0 * m * p.c * p.r * p.s * -(-p.k // bn) / peak

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_depthwise_pointwise(kt, "depthwise_pointwise", operands, attrs, shape, dtype)

    def kernel(self, r):
        return depthwise_pointwise.depthwise_pointwise_kernel(r.name, r.signature, r.given, r.attrs, r.problem,
                                                              depthwise_pointwise.TILES[r.params["tile"]])


class ConvBwdWeightsWgmma(Solver):
    """Backward weights on sm_90 warpgroup MMA: the filter gradient as an implicit GEMM over the batch and the
    map, x and dy read in place by TMA, split over the reduction where the filter is small
    (kernels/nvidia/wgmma_backward_weights.py); the KRSC gradient. The "tile" parameter indexes its
    CONFIGS (BM, BN, stages), "splits" the runs of the reduction."""
    name = "conv_bwd_weights_wgmma"
    directions = ("bwd_weights",)
    targets = ("nvvm",)
    efficiency = 6.0
    CLOCK_HZ = 1.8e9            # the model's per-multiprocessor rates below are per clock
    MMA_PER_CLOCK = 32          # tile elements (BM x BN) 64 pixels add per clock: 4,096 flop/clock
    LOAD_PER_CLOCK = 64         # bytes of TMA boxes landing per clock per multiprocessor, from L2
    TILE_CLOCKS = 150           # a k tile's barrier, mbarrier wait and issue
    SCRATCH_LIMIT = 64 << 20    # bytes of split partial sums

    def is_applicable(self, p, target):
        if target.matrix_core != "wgmma":
            return f"wgmma and TMA need sm_90 ({target.arch} has {target.matrix_core} only)"
        return gpu_wgmma_bwd_weights.applicable(p)

    def filter_layout(self):
        return "KRSC"

    def fits(self, p, target, tile: int, splits: int) -> bool:
        """Equal runs of 2+ k tiles, 2+ stage slots in shared memory, and the runs' partial sums in bounds."""
        tiles = gpu_wgmma_bwd_weights.geometry(p)[2]
        config = gpu_wgmma_bwd_weights.CONFIGS[tile]
        return tiles % splits == 0 and (splits == 1 or tiles // splits >= 2) and \
            (gpu_wgmma_bwd_weights.stages(config, p, target.chip.shared_per_block) >= 2 or tiles == splits) and \
            (splits == 1 or splits * p.k * p.r * p.s * p.c * 4 <= self.SCRATCH_LIMIT)

    def predicted(self, p, target, tile: int, splits: int) -> float:
        """Seconds: waves of blocks, each (tiles / splits) k tiles bound by the tensor cores or by the boxes'
        loads, plus the split's partial sums written and read back and the patches of few channels."""
        bm, bn, _ = gpu_wgmma_bwd_weights.CONFIGS[tile]
        box, _, tiles = gpu_wgmma_bwd_weights.geometry(p)
        pixels = math.prod(box)
        blocks = -(-p.k // bm) * -(-gpu_wgmma_bwd_weights.columns(p) // bn) * splits
        per_tile = max(bm * bn * pixels / 64 / self.MMA_PER_CLOCK, (bm + bn) * pixels * 2 / self.LOAD_PER_CLOCK) + \
            self.TILE_CLOCKS
        waves = -(-blocks // target.chip.units)
        extra = 2 * splits * p.k * p.r * p.s * p.c * 4 if splits > 1 else 0      # bytes beyond the boxes
        patches = gpu_wgmma_bwd_weights.kernel_problem(p)
        if patches is not p:                             # written once, read by each row block
            extra += patches.n * patches.h * patches.w * patches.c * 2 * (1 + -(-p.k // bm))
        return waves * (tiles // splits) * per_tile / self.CLOCK_HZ + extra / (target.rates[1] * 1e9)

    def tunables(self, p):
        tiles = gpu_wgmma_bwd_weights.geometry(p)[2]
        return {"tile": list(range(len(gpu_wgmma_bwd_weights.CONFIGS))),
                "splits": [d for d in range(1, tiles + 1) if tiles % d == 0 and (d == 1 or tiles // d >= 2)]}

    def tables(self):
        return {"tile": tuple(f"{bm}x{bn}-s{stages}" for bm, bn, stages in gpu_wgmma_bwd_weights.CONFIGS)}

    def default_params(self, p, target):
        """The (tile, splits) of the least predicted time."""
        options = self.tunables(p)
        choices = [(self.predicted(p, target, t, d), t, d) for t in options["tile"] for d in options["splits"]
                   if self.fits(p, target, t, d)]
        _, tile, splits = min(choices)
        return {"tile": tile, "splits": splits}

    def cost(self, p, target):
        params = self.default_params(p, target)
        return self.predicted(p, target, params["tile"], params["splits"]) + \
            self.moved_bytes(p) / 2 / (target.rates[1] * 1e9)

    def build(self, kt, operands, attrs, shape, dtype, params):
        return EMITTERS["conv2d_backward_weights"](kt, "conv2d_backward_weights", operands, attrs, shape, dtype)

    def kernel(self, r):
        return gpu_wgmma_bwd_weights.backward_weights_kernel(
            r.name, r.signature, r.problem, r.params["tile"], r.params.get("splits", 1),
            smem_limit=r.target.chip.shared_per_block)

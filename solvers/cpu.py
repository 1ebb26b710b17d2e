"""The CPU solvers: direct, 1x1 and im2col GEMM, depthwise, grouped-GEMM and implicit-GEMM convolutions,
the GEMM, and the reference loop nests (which every target can run).

Fast CPU solvers work on NHWC activations and RSCK filters (prim-select re-lays out constant filters at
compile time and wraps NCHW convolutions in transposes that cancel between layers).
"""
from __future__ import annotations

import math

from openprim.base.ops import filter_block
from openprim.kernels import schedules
from openprim.kernels.cpu import depthwise as cpu_depthwise
from openprim.kernels.cpu import gemm as cpu_gemm
from openprim.kernels.cpu import implicit_gemm as cpu_implicit_gemm
from openprim.kernels.irtext import KernelText, V, amap
from openprim.kernels.semantics import activation, emit_conv2d, emit_matmul, epilogue, mac_body
from openprim.solvers.base import (THREADS, DenseNhwcSolver, Solver, _largest_divisor, _nhwc_epilogue, _thread_split,
                                   rhs_panels, roofline)
from openprim.solvers.problem import GemmProblem


def _pad_nhwc(kt: KernelText, x: V, attrs) -> V:
    pt, pl, pb, pr = attrs["padding"]
    return kt.pad(x, [0, pt, pl, 0], [0, pb, pr, 0], 0.0)


def _named_conv(kt: KernelText, op: str, xp: V, w: V, attrs, shape) -> V:
    """linalg.<op> (a named NHWC convolution) of the padded input into a zeroed f32 accumulator."""
    acc = kt.filled(shape, "f32", 0.0, role="acc")
    n = kt.fresh("conv")
    s, d = attrs["strides"], attrs["dilations"]
    kt.emit(f"{n} = linalg.{op} {{dilations = dense<[{d[0]}, {d[1]}]> : tensor<2xi64>, "
            f"strides = dense<[{s[0]}, {s[1]}]> : tensor<2xi64>}} ins({xp.name}, {w.name} : {xp.type}, {w.type}) "
            f"outs({acc.name} : {acc.type}) -> {acc.type}")
    return V(n, shape, "f32")


class ConvDirect(DenseNhwcSolver):
    """Direct convolution, NHWC x RSCK: register tiles of (1 row, WT columns, FT filters), the filter
    window and input channels as reduction loops (kh, kw, CT), decomposed to 1-d convolutions and
    vectorized into FMAs; threads share output rows."""
    name = "conv_direct"
    efficiency = 0.9

    def tunables(self, p):
        return {"wt": [4, 7, 8, 14], "ft": [16, 32, 64], "ct": [1, 3, 8, 16]}

    def default_params(self, p, target):
        ft = 32 if p.k % 32 == 0 else (16 if p.k % 16 == 0 else p.k)
        wt = next((w for w in (8, 7, 14, 4) if p.ow % w == 0), _largest_divisor(p.ow, 8))
        ct = next((c for c in (8, 3, 16, 4, 2) if p.c % c == 0), 1)
        return {"wt": wt, "ft": ft, "ct": ct}

    def build(self, kt, operands, attrs, shape, dtype, params):
        acc = _named_conv(kt, "conv_2d_nhwc_hwcf", _pad_nhwc(kt, operands[0], attrs), operands[1], attrs, shape)
        return _nhwc_epilogue(kt, acc, operands, attrs, dtype)

    def schedule(self, p, params):
        return schedules.conv_direct(*_thread_split(p.oh, p.k, 1, params["ft"]), params["wt"], params["ft"],
                                     params["ct"])


class GemmBackedSolver(DenseNhwcSolver):
    """A convolution computed as one GEMM (self.gemm_problem): the GEMM solver's parameters and schedule."""

    def gemm_problem(self, p) -> "GemmProblem":
        raise NotImplementedError

    def tunables(self, p):
        return GEMM.tunables(self.gemm_problem(p))

    def default_params(self, p, target):
        return GEMM.default_params(self.gemm_problem(p), target)

    def schedule(self, p, params):
        return GEMM.schedule(self.gemm_problem(p), params)


class Conv1x1Gemm(GemmBackedSolver):
    """A 1x1, stride-1, unpadded convolution is a GEMM: [N*H*W, C] x [C, K]."""
    name = "conv_1x1_gemm"
    efficiency = 0.95

    def is_applicable(self, p, target):
        if (p.r, p.s) != (1, 1) or tuple(p.strides) != (1, 1) or any(p.padding):
            return "not a 1x1, stride-1, unpadded convolution"
        return super().is_applicable(p, target)

    def cost(self, p, target):
        """Its K loop is the input channels: with few of them the GEMM schedule is mostly overhead
        (MobileNetV2's 16- and 24-channel layers ran 3.4-7.7x faster on conv_direct; bench/RESULTS.md)."""
        return super().cost(p, target) * max(1.0, 64 / p.c)

    def gemm_problem(self, p):
        return GemmProblem(1, p.n * p.oh * p.ow, p.k, p.c, False, False, p.dtype, p.epilogue)

    def build(self, kt, operands, attrs, shape, dtype, params):
        x, w = operands[0], operands[1]
        N, H, W, C = x.shape
        acc = _matmul(kt, kt.reshape(x, (N * H * W, C)), kt.reshape(w, (C, shape[3])))
        return _gemm_epilogue_4d(kt, acc, operands, attrs, shape, dtype)


class ConvIm2colGemm(GemmBackedSolver):
    """im2col + GEMM: copy every filter window into a row of [N*OH*OW, R*S*C], then one GEMM with
    the [R*S*C, K] filter. Costs an extra buffer of R*S times the input; wins for small C (the stem)."""
    name = "conv_im2col_gemm"
    efficiency = 0.8

    def cost(self, p, target):
        col = 4 * p.n * p.oh * p.ow * p.r * p.s * p.c
        return super().cost(p, target) + 2 * col / (target.rates[1] * 1e9)

    def gemm_problem(self, p):
        return GemmProblem(1, p.n * p.oh * p.ow, p.k, p.r * p.s * p.c, False, False, p.dtype, p.epilogue)

    def build(self, kt, operands, attrs, shape, dtype, params):
        x, w = operands[0], operands[1]
        xp = _pad_nhwc(kt, x, attrs)
        N, OH, OW, K = shape
        R, S, C, _ = w.shape
        (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
        # col[n, oh, ow, r, s, c] = x[n, oh*sh + r*dh, ow*sw + s*dw, c]
        col = kt.generic([xp], [amap(6, ["d0", f"d1 * {sh} + d3 * {dh}", f"d2 * {sw} + d4 * {dw}", "d5"])],
                         kt.empty((N, OH, OW, R, S, C), x.dtype), amap(6, [f"d{i}" for i in range(6)]),
                         ["parallel"] * 6, lambda a, kt: a[0])
        acc = _matmul(kt, kt.reshape(col, (N * OH * OW, R * S * C)), kt.reshape(w, (R * S * C, K)))
        return _gemm_epilogue_4d(kt, acc, operands, attrs, shape, dtype)


class ConvDepthwise(Solver):
    """Depthwise (groups = C = K) convolution, NHWC: the hand-structured vector kernel of
    kernels/cpu/depthwise.py (register tiles of WT output columns x CT channel lanes, the filter taps of
    a channel block loaded once per output row), or with params kernel=0 the linalg depthwise convolution
    tiled by a transform schedule (WT columns x CT channels)."""
    name = "conv_depthwise"
    efficiency = 0.3

    def is_applicable(self, p, target):
        if not p.depthwise:
            return "not depthwise (needs groups = C = K)"
        if p.layout != "NHWC":
            return "needs NHWC activations"
        return None

    def filter_layout(self):
        return "RSCK"

    def tunables(self, p):
        return {"wt": [1, 2, 4, 6, 7, 8], "ct": [8, 16, 32, 64], "kernel": [0, 1], "order": [0, 1]}

    def default_params(self, p, target):
        """The vector kernel, 4 columns x 8 channels (one AVX2 register; 3x3: 9 taps + 4 accumulators).
        order 1 (column tiles outer, a pixel's channels in one sweep) for few channels at stride 1: on the
        2-core AVX2 CPU, MobileNetV2's 32-channel 112x112 layer at batch 8 ran 1.25x faster, its stride-2
        96-channel one 1.25x slower (order 0: each channel block's taps once per row)."""
        return {"wt": 4, "ct": 8, "kernel": 1, "order": int(p.c <= 64 and tuple(p.strides) == (1, 1))}

    def kernel(self, r):
        if not r.params["kernel"]:
            return None
        return cpu_depthwise.depthwise_kernel(r.name, r.signature, r.problem, r.params, r.attrs, THREADS)

    def build(self, kt, operands, attrs, shape, dtype, params):
        R, S, _, C = operands[1].shape
        w = kt.reshape(operands[1], (R, S, C))
        acc = _named_conv(kt, "depthwise_conv_2d_nhwc_hwc", _pad_nhwc(kt, operands[0], attrs), w, attrs, shape)
        return _nhwc_epilogue(kt, acc, operands, attrs, dtype)

    def schedule(self, p, params):
        return schedules.conv_depthwise(_thread_split(p.oh, p.c, 1, params["ct"]), params["wt"], params["ct"])


class ConvReference(Solver):
    """Any convolution (every layout, groups, dilation): the reference loop nest, tiled to rows and
    vectorized where the vectorizer can. The fallback when no fast solver applies."""
    name = "conv_reference"
    efficiency = 0.02
    targets = ("cpu", "nvvm", "rocdl")

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_conv2d(kt, "conv2d", operands, attrs, shape, dtype)


class Gemm(Solver):
    """GEMM [M,K] x [K,N] (+ batch): threads over M (or N when M is small), register tiles MT x NT
    with a K loop of KT, vectorized along N into outer-product FMAs."""
    name = "gemm"
    op = "matmul"
    efficiency = 0.9

    def is_applicable(self, p, target):
        if p.batched_rhs or p.transpose_rhs or p.panels:
            return "needs a 2-d, non-transposed rhs (prim-select transposes constant weights)"
        return None

    def tunables(self, p):
        return {"mt": [1, 4, 7, 8, 14, 16], "nt": [16, 32, 64], "kt": [1, 8, 16]}

    def default_params(self, p, target):
        mt = next((m for m in (8, 7, 14, 4, 2) if p.m % m == 0), 1)
        widths = (32, 64, 16, 48, 40, 24, 8)
        # one row of work (a GEMV): a width that also splits the columns between the threads
        nt = next((v for v in widths if mt == 1 and p.n % (THREADS * v) == 0), None) or \
            next((v for v in widths if p.n % v == 0), _largest_divisor(p.n, 64))
        kt = next((k for k in (8, 16, 4, 3, 2) if p.k % k == 0), 1)
        return {"mt": mt, "nt": nt, "kt": kt}

    def build(self, kt, operands, attrs, shape, dtype, params):
        a, b, bias, residual = operands
        m = math.prod(a.shape[:-1])
        acc = _matmul(kt, kt.reshape(a, (m, a.shape[-1])), b)
        if residual is not None:
            residual = kt.reshape(residual, acc.shape)
        return kt.reshape(epilogue(kt, acc, bias, residual, 1, attrs, dtype, always=True), shape)

    def schedule(self, p, params):
        return schedules.gemm(_thread_split(p.m, p.n, params["mt"], params["nt"]), params["mt"], params["nt"],
                              params["kt"])


class GemmReference(Solver):
    """Any matmul (batched, transposed rhs): the reference loop nest, tiled and vectorized like aux ops."""
    name = "gemm_reference"
    op = "matmul"
    efficiency = 0.05
    targets = ("cpu", "nvvm", "rocdl")

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_matmul(kt, "matmul", operands, attrs, shape, dtype)


# The largest packed panel (K x NT f32) a thread keeps on its stack.
PANEL_BYTES = 512 * 1024
# Smaller constant rhs with N % NT stay unpadded: they are read from the caches, where packing per call costs little.
PADDED_BYTES = 4 << 20


class GemmPacked(Solver):
    """Any matmul (2-d or batched rhs, transposed or not) as a hand-structured vector kernel
    (kernels/cpu/gemm.py): register tiles of MT rows x NT columns (lanes along N), the column panel
    of B packed into a contiguous stack buffer (always with a transposed rhs), threads over the batch
    and row chunks, or the column panels."""
    name = "gemm_packed"
    op = "matmul"
    targets = ("cpu",)
    efficiency = 1.0

    def is_applicable(self, p, target):
        if p.transpose_rhs and p.k * 16 * 4 > PANEL_BYTES:
            return f"a transposed rhs is packed on the stack: K = {p.k} is too deep (over {PANEL_BYTES // 64})"
        return None

    def tunables(self, p):
        """A transposed rhs is always packed; panels are read as they are."""
        if p.panels:
            return {"mt": [2, 4, 6, 7, 8], "nt": [p.panels], "pack": [0]}
        return {"mt": [2, 4, 6, 7, 8], "nt": [8, 16, 32], "pack": [1] if p.transpose_rhs else [0, 1]}

    def default_params(self, p, target):
        """B packed, in a register tile that fills half the vector registers: 6 x 16 on AVX2 (12 of 16;
        on the 2-core CPU, 120-160 GFLOP/s on BERT's GEMMs against 50-90 unpacked, 35-55 for 4 x 24 or
        3 x 32), 8 x 32 on AVX-512 (16 of 32; ResNet-50's 1x1 layers at 205-225 GFLOP/s against 165-190 for
        6 x 16 in the same registers, Zen 4)."""
        wide = target.vector_lanes == 16 and p.n >= 32
        # a classifier (N = 1000, M <= 8) in whole 8-column panels rather than 16 and a runtime-packed tail
        nt = p.panels or (8 if p.n % 16 and p.n % 8 == 0 and p.m <= 8 else 32 if wide else 16 if p.n >= 16
                          else 8 if p.n >= 8 else p.n)
        return {"mt": _rows_tile(p.m) if nt == 32 else 6, "nt": nt,
                "pack": int(not p.panels and (p.k * nt * 4 <= PANEL_BYTES or cpu_gemm.blocks_k(p, True)))}

    def packed_rhs(self, p, params):
        """A constant [K, N] rhs is packed at compile time into its NT-column panels ([N/NT, K, NT]) when
        they are whole: each panel is then one stream for the prefetcher, where packing at run time reads
        K rows N apart (a new page every row) from memory."""
        return rhs_panels(p, params["nt"])

    def padded_n(self, p, params):
        """A wide constant rhs whose N is no multiple of NT (a language model's vocabulary, 50257 columns):
        padded to the next multiple so that it is packed at compile time. Unpacked, every call packs each
        panel from K rows N apart, and GPT-2's [768, 50257] head ran at 16 GB/s against the 32 GB/s of the
        packed layers around it (2-core Zen 4). Not with a residual, which would need padding per call."""
        nt = params["nt"]
        if p.transpose_rhs or p.batched_rhs or p.panels or not p.n % nt or "residual" in p.epilogue.split("+") \
                or p.k * p.n * 4 < PADDED_BYTES:
            return None
        return -(-p.n // nt) * nt

    def kernel(self, r):
        return cpu_gemm.gemm_kernel(r.name, r.signature, r.problem, r.params, r.attrs, THREADS, r.target.vector_lanes)

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_matmul(kt, "matmul", operands, attrs, shape, dtype)


def _rows_tile(m: int) -> int:
    """The rows of an 8 x 32 AVX-512 register tile: 7 where they divide M and 8 do not (CNNs' maps,
    7 x 2^k pixels wide: no tail tile)."""
    return 7 if m % 8 and m % 7 == 0 else 8


def _matmul(kt: KernelText, a: V, b: V) -> V:
    """linalg.matmul into a zeroed f32 accumulator (f16/bf16 inputs are widened by the op)."""
    acc = kt.filled((a.shape[0], b.shape[1]), "f32", 0.0, role="acc")
    n = kt.fresh("mm")
    kt.emit(f"{n} = linalg.matmul ins({a.name}, {b.name} : {a.type}, {b.type}) outs({acc.name} : {acc.type}) -> {acc.type}")
    return V(n, acc.shape, "f32")


def _gemm_epilogue_4d(kt, acc: V, operands, attrs, shape, dtype):
    """Epilogue on the [M, K] GEMM result (residual flattened alike), then back to NHWC."""
    _, _, bias, residual = operands
    if residual is not None:
        residual = kt.reshape(residual, acc.shape)
    out = epilogue(kt, acc, bias, residual, 1, attrs, dtype, always=True)
    return kt.reshape(out, shape)


class ConvGroupedGemm(Solver):
    """Grouped convolution (1 < groups, not depthwise; NHWC x RSCK) as G GEMMs in one batched
    contraction: per group g, A_g[N*OH*OW, R*S*Cg] (its Cg channels of every filter tap) times the
    filter's B_g[R*S*Cg, Kg]. A is an im2col buffer [M, R*S, G, Cg] that copies all C channels of a tap
    at once (a 1x1, stride-1, unpadded convolution reads the input itself, viewed as [M, 1, G, Cg]); the
    filter is viewed as [R*S, Cg, G, Kg]. One linalg.generic over (g, m, n | t, c) with
    projected-permutation maps gives C[G, M, Kg], and the epilogue writes it as [M, G, Kg] = [M, K]
    (NHWC). The GEMM-like schedule (threads over M, register tiles of one group x MT x NT, reduction
    loops over the taps and KT channels) vectorizes it into FMAs along the group's output channels."""
    name = "conv_grouped_gemm"
    efficiency = 0.5

    def is_applicable(self, p, target):
        if p.groups == 1:
            return "not a grouped convolution (groups=1)"
        if p.depthwise:
            return "depthwise convolution (groups = C = K)"
        if p.k == p.groups:
            # a matrix-vector product per group, whose unit-dim tiles the schedule's folding miscompiles
            # (fuzzer seeds 0, 317, 2064: wrong channels read); conv_implicit_gemm does it well
            return "one output channel per group (use conv_implicit_gemm)"
        if p.layout != "NHWC":
            return "needs NHWC activations (prim-select wraps NCHW in transposes)"
        return None

    def filter_layout(self):
        return "RSCK"

    @staticmethod
    def _direct(p) -> bool:
        """A 1x1, stride-1, unpadded convolution reads its A straight from the input (no im2col)."""
        return (p.r, p.s) == (1, 1) and tuple(p.strides) == (1, 1) and not any(p.padding)

    def cost(self, p, target):
        """Its vectors are the group's Kg output channels: narrower than 8 lanes wastes the rest (and
        tiles that small are mostly loop overhead); the im2col buffer is written and read once."""
        col = 0 if self._direct(p) else 2 * 4 * p.n * p.oh * p.ow * p.r * p.s * p.c
        return super().cost(p, target) * max(1.0, 8 * p.groups / p.k) + col / (target.rates[1] * 1e9)

    def tunables(self, p):
        """Whole tiles only: MT divides M, NT the group's output channels, KT its input channels."""
        m, kg, cg = p.n * p.oh * p.ow, p.k // p.groups, p.c // p.groups
        return {"mt": [t for t in (1, 2, 4, 7, 8, 14) if m % t == 0],
                "nt": [t for t in (4, 8, 16, 32) if kg % t == 0] or [_largest_divisor(kg, 32)],
                "kt": [t for t in (1, 2, 4, 8, 16) if cg % t == 0]}

    def default_params(self, p, target):
        m, kg, cg = p.n * p.oh * p.ow, p.k // p.groups, p.c // p.groups
        mt = next((t for t in (8, 7, 14, 4, 2) if m % t == 0), 1)
        nt = next((t for t in (32, 16, 8, 4) if kg % t == 0), _largest_divisor(kg, 32))
        kt = next((t for t in (8, 16, 4, 3, 2) if cg % t == 0), 1)
        return {"mt": mt, "nt": nt, "kt": kt}

    def build(self, kt, operands, attrs, shape, dtype, params):
        x, w, bias, residual = operands
        N, OH, OW, K = shape
        R, S, Cg, _ = w.shape
        C, G = x.shape[3], attrs["groups"]
        M, Kg = N * OH * OW, K // G
        if (R, S) == (1, 1) and tuple(attrs["strides"]) == (1, 1) and not any(attrs["padding"]):
            a = kt.reshape(x, (M, 1, G, Cg))
        else:
            xp = _pad_nhwc(kt, x, attrs)
            (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
            # col[n, oh, ow, r, s, ch] = x[n, oh*sh + r*dh, ow*sw + s*dw, ch] (copied by the schedule's
            # im2col step, C channels at a time)
            col = kt.generic([xp], [amap(6, ["d0", f"d1 * {sh} + d3 * {dh}", f"d2 * {sw} + d4 * {dw}", "d5"])],
                             kt.empty((N, OH, OW, R, S, C), x.dtype), amap(6, [f"d{i}" for i in range(6)]),
                             ["parallel"] * 6, lambda args, kt: args[0], role="im2col")
            a = kt.reshape(col, (M, R * S, G, Cg))
        b = kt.reshape(w, (R * S, Cg, G, Kg))
        # C[g, m, n] = sum_{t, c} A[m, t, g, c] B[t, c, g, n]        loops (g, m, n | t, c)
        # (the group leads in C: a register tile's unit group dim is a leading one, which vectors drop)
        acc = kt.generic([a, b], [amap(5, ["d1", "d3", "d0", "d4"]), amap(5, ["d3", "d4", "d0", "d2"])],
                         kt.filled((G, M, Kg), "f32", 0.0, role="acc"), amap(5, ["d0", "d1", "d2"]),
                         ["parallel"] * 3 + ["reduction"] * 2, mac_body([a.dtype, b.dtype]), role="contraction")
        # the epilogue, loops (m, g, n), writes the output as [M, G, Kg] = NHWC (rows outermost: a
        # register tile's rows of A are read for every group while they are in cache)
        nhwc = amap(3, ["d0", "d1", "d2"])
        ins, maps = [acc], [amap(3, ["d1", "d0", "d2"])]
        if bias is not None:
            ins.append(kt.reshape(bias, (G, Kg)))
            maps.append(amap(3, ["d1", "d2"]))
        if residual is not None:
            ins.append(kt.reshape(residual, (M, G, Kg)))
            maps.append(nhwc)

        def body(args, kt):
            y = args[0]
            for arg, v in zip(args[1:len(ins)], ins[1:]):
                y = kt.scalar("arith.addf", y, kt.to_f32(arg, v.dtype))
            return kt.from_f32(activation(kt, attrs["activation"], attrs["activation_params"], y), dtype)
        # its destination is an empty NHWC tensor viewed as [M, G, Kg], so that the result is that tensor
        # again (viewed back): any copy into the kernel's output then runs along contiguous NHWC rows
        dest = kt.reshape(kt.empty(shape, dtype), (M, G, Kg))
        out = kt.generic(ins, maps, dest, nhwc, ["parallel"] * 3, body, role="epilogue")
        return kt.reshape(out, shape)

    def schedule(self, p, params):
        m, mt = p.n * p.oh * p.ow, params["mt"]
        par = [m // THREADS, 0, 0] if m % (THREADS * mt) == 0 else \
            ([0, p.groups // THREADS, 0] if p.groups % THREADS == 0 else [mt, 0, 0])
        return schedules.grouped_gemm(par, mt, params["nt"], params["kt"], None if self._direct(p) else p.c)


class ConvImplicitGemm(Solver):
    """Any convolution (NCHW or NHWC, strided, dilated, padded, grouped) as one implicit GEMM per group,
    a hand-structured vector kernel (kernels/cpu/implicit_gemm.py): register tiles of WT output columns x FT
    output channels, lanes along the layout's contiguous dimension, no im2col buffer, no transposes."""
    name = "conv_implicit_gemm"
    targets = ("cpu",)
    # Measured against conv_direct on the 2-core AVX2 CPU (batch 1, bias+relu, best of interleaved runs):
    # NHWC with 16+ channels per group ran 1.8-2.8x faster on ResNet-18's 3x3 layers (1.1-1.4x at 7x7),
    # 2.5-4.6x on 1x1 layers; NCHW (layout=keep) at 0.85-1x its NHWC speed (lanes along OW: 0.5-0.8x).
    efficiency = 1.35

    def cost(self, p, target):
        """Its vector lanes run along K/groups (NCHW with few channels per group: along OW): fewer than 16
        leave the register tile partly empty (depthwise NHWC: 1 of 16), so fuller solvers keep those. The
        empty lanes slow its arithmetic, not its memory traffic: FastViT's grouped convolutions of two
        filters per group (groups = C, K = 2C: 8 of 16 lanes empty, memory-bound) ran 36-87 us here and
        2.3-7.1 ms on conv_reference, which a cost divided through by the fill had preferred."""
        if self.default_params(p, target).get("lanes", 1):
            fill = min(p.k // p.groups, 16) / 16 * (0.85 if p.layout == "NCHW" else 1.0)
        else:
            fill = min(p.ow, 16) / 16 * (0.8 if p.strides[1] == 1 else 0.3)
        return roofline(p.flops / fill, self.moved_bytes(p), target, self.efficiency)

    def filter_layout(self):
        return "RSCK"

    def packed_filter(self, p, params):
        """Blocks of FT channels ("KRSC<FT>k") when every channel tile is whole and the lanes run along k.
        Measured on ResNet-18 at batch 1 (2-core AVX2): its convolutions took 23 ms packed against 32 ms
        RSCK (the deep layers' filter rows, 2 KB apart, defeated the prefetcher)."""
        ft = params["ft"]
        if not (p.layout == "NHWC" or params.get("lanes") == 1) or (p.k // p.groups) % ft:
            return None
        return f"KRSC{ft}k", lambda w: w.reshape(p.r, p.s, p.c // p.groups, p.k // ft, ft).transpose(3, 0, 1, 2, 4)

    def tunables(self, p):
        tiles = {"wt": [2, 3, 4, 6, 7, 8, 12, 16], "ft": [1, 2, 4, 6, 8, 12, 16, 32]}
        return {**tiles, "lanes": [0, 1]} if p.layout == "NCHW" else tiles

    def default_params(self, p, target):
        """Lanes along K/groups in WT x FT accumulators: 6 x 16 on AVX2 (6 x 2 registers; 7 columns,
        spilling 2, beat 6 + 1 in the row-by-row kernel), 7 x 32 (8 x 32 for a pointwise one's GEMM) on
        AVX-512 (NHWC) where the group has whole blocks of 32 channels (14 or 16 of the 32 registers; Zen 4,
        ResNet-50's layers at batch 1: 1x1 205-225 GFLOP/s against 165-190, 3x3 1.0-1.15x faster); NCHW
        with fewer than 16 channels per group: along OW."""
        kg = p.k // p.groups
        if p.layout == "NCHW" and kg < 16:
            wt = 16 if p.ow >= 48 else min(p.ow, 8)
            return {"wt": wt, "ft": min(kg, 6 if wt == 16 else 8), "lanes": 0}
        nchw = {"lanes": 1} if p.layout == "NCHW" else {}
        if target.vector_lanes == 16 and kg % 32 == 0 and not nchw:
            wt = _rows_tile(p.n * p.oh * p.ow) if self.pointwise(p) else min(p.ow, 7)
            return {"wt": wt, "ft": 32}
        ft = 16 if kg >= 16 else 8 if kg >= 8 else kg
        # A pointwise convolution's tiles run across rows (the GEMM kernel), so a narrow map needs no
        # OW-wide tile: 7 x 16 there spills (ResNet-50's 7x7 2048 -> 512 layer: 1.05 ms, 0.54 ms at 6 x 16).
        wt = p.ow if p.ow <= 7 and not self.pointwise(p) else 6 if ft == 16 else 12
        return {"wt": wt, "ft": ft, **nchw}

    @staticmethod
    def pointwise(p) -> bool:
        """A 1x1, stride-1, unpadded NHWC convolution of one group: a GEMM over the pixels as they lie."""
        return ((p.r, p.s) == (1, 1) and tuple(p.strides) == (1, 1) and not any(p.padding) and p.groups == 1
                and p.layout == "NHWC")

    def kernel(self, r):
        """A pointwise convolution runs as the GEMM kernel over all N*H*W pixels, tiles of WT pixels x FT
        channels that run across image rows: row by row, a 7-wide map (ResNet's last stage) left one
        column in six to a tile of one (two accumulators, latency-bound)."""
        p = r.problem
        if self.pointwise(p):
            ft = r.params["ft"]
            panels = ft if filter_block(p.filter_layout) == ft else 0
            gemm = GemmProblem(1, p.n * p.oh * p.ow, p.k, p.c, False, False, p.dtype, p.epilogue, panels)
            params = {"mt": r.params["wt"], "nt": ft, "pack": int(not panels and p.c * ft * 4 <= PANEL_BYTES)}
            return cpu_gemm.gemm_kernel(r.name, r.signature, gemm, params, r.attrs, THREADS, r.target.vector_lanes)
        return cpu_implicit_gemm.conv_kernel(r.name, r.signature, r.problem, r.params, r.attrs, THREADS)

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_conv2d(kt, "conv2d", operands, attrs, shape, dtype)


# The GEMM solver, which the GEMM-backed convolutions delegate to (the one registered in SOLVERS).
GEMM = Gemm()

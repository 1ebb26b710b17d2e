"""The Solver base class (the protocol every solver implements, with its defaults), the roofline cost
model, the CPU thread count and the small helpers that several solver families share."""
from __future__ import annotations

import math

from openprim.kernels.semantics import emit_attention, epilogue
from openprim.solvers.problem import ConvProblem, GemmProblem


def rhs_panels(p, nt: int):
    """The transform packing a constant [K, N] rhs into [N/NT, K, NT] panels (base.ops.RHS_PANELS), or None
    where the problem cannot take them (a transposed, batched or already packed rhs; N no multiple of NT)."""
    if p.transpose_rhs or p.batched_rhs or p.panels or p.n % nt:
        return None
    return lambda w: w.reshape(p.k, p.n // nt, nt).transpose(1, 0, 2)


def roofline(flops, nbytes, target, efficiency=1.0):
    """Compute time at the solver's efficiency plus memory time: additive, so that a more efficient
    solver wins even where both are memory-bound."""
    peak, bandwidth = target.rates
    return flops / (peak * 1e9 * efficiency) + nbytes / (bandwidth * 1e9)


class Solver:
    name = ""
    op = "conv2d"
    efficiency = 1.0        # fraction of peak its schedule reaches (measured on the ResNet layers)
    targets = ("cpu",)      # target kinds it has kernels for
    directions = ("fwd",)   # the ConvProblem directions (problem.DIRECTIONS) a conv2d solver computes
    scheduled = True        # False: its CPU kernel is left as loop nests (LLVM vectorizes what it can)

    def is_applicable(self, p, target) -> str | None:
        return None

    def cost(self, p, target) -> float:
        """The roofline of a convolution or a GEMM, its operands moved once (4-byte elements); a solver of
        any other problem kind defines its own."""
        return roofline(p.flops, self.moved_bytes(p), target, self.efficiency)

    def moved_bytes(self, p) -> int:
        """A convolution's or a GEMM's operands and result, each moved once (4-byte elements)."""
        if isinstance(p, ConvProblem):
            return 4 * (p.n * p.h * p.w * p.c + p.k * p.c * p.r * p.s + p.n * p.oh * p.ow * p.k)
        if isinstance(p, GemmProblem):
            return 4 * p.batch * (p.m * p.k + p.k * p.n + p.m * p.n)
        raise NotImplementedError(f"solver {self.name} has no cost model for a {type(p).__name__}: "
                                  f"define its cost()")

    def tunables(self, p) -> dict:
        return {}

    def tables(self) -> dict[str, tuple[str, ...]]:
        """{parameter: the names of its table's entries, in index order} for each tunable that indexes a table
        of kernel configurations: the tuning database stores such a parameter by its entry's name, so that
        reordering or extending a table never changes what a stored record means."""
        return {}

    def default_params(self, p, target) -> dict:
        return {}

    def filter_layout(self) -> str | None:
        """The filter layout build() expects (prim-select converts constant filters), or None for any."""
        return None

    def packed_filter(self, p, params):
        """(layout, transform) when a constant filter is to be packed at compile time: prim-select gives it
        filter_layout(), then replaces it by transform(values) (float64 numpy in and out) with
        filter_layout = layout, one of base/ops.py's packed layouts; None keeps filter_layout()."""
        return None

    def packed_rhs(self, p, params):
        """For a matmul: transform(values) packing a constant [K, N] rhs into [N/NT, K, NT] panels
        (transpose_rhs = base.ops.RHS_PANELS) at compile time, or None to keep it."""
        return None

    def padded_n(self, p, params) -> int | None:
        """For a matmul whose constant rhs packed_rhs cannot pack (N not a multiple of the panel): the N to
        pad it to with zero columns (prim-select then slices the result back), or None to keep it."""
        return None

    def schedule(self, p, params) -> str | None:
        return None

    def kernel(self, request) -> str | None:
        """Its hand-written kernel for request.target (kernels/registry.py's KernelRequest), or None: its
        build() + schedule() (CPU) or prim-gpu-map's grid mapping (GPUs) make the kernel."""
        return None


class AttentionSolver(Solver):
    """Base of the flash-attention solvers (a vendor's kernel for the whole prim.attention): costed like a
    GEMM solver at `efficiency` on the two products, plus the memory time of q, k, v, the output and the
    mask; build() is the reference form (the kernel replaces it)."""
    op = "attention"
    query_rows = 1          # query rows a block computes: fewer in the problem are multiplied as zeros

    def cost(self, p, target):
        """A flash kernel's query tile computes its rows whether the problem has them or not: a decode step's
        one query row costs it 64 or 128 rows of products."""
        mask = 0 if p.mask is None else 4 * math.prod(p.mask)
        nbytes = 2 * p.batch * (2 * p.sq + 2 * p.sk) * p.d + mask
        return roofline(p.flops * -(-p.sq // self.query_rows) * self.query_rows / p.sq, nbytes, target,
                        self.efficiency)

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_attention(kt, "attention", operands, attrs, shape, dtype)


THREADS = 2


def _thread_split(rows, cols, row_tile, col_tile):
    """scf.forall tile sizes (rows, cols) that give the threads equal whole register tiles: split the
    rows when they divide evenly, else the columns, else one row per iteration."""
    if rows % (THREADS * row_tile) == 0:
        return rows // THREADS, 0
    if cols % (THREADS * col_tile) == 0:
        return 0, cols // THREADS
    return row_tile, 0


def _largest_divisor(n, limit):
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _nhwc_epilogue(kt, acc, operands, attrs, dtype):
    _, _, bias, residual = operands
    return epilogue(kt, acc, bias, residual, 3, attrs, dtype, always=True)


class DenseNhwcSolver(Solver):
    """Base of the solvers for ungrouped NHWC convolutions with RSCK filters."""

    def is_applicable(self, p, target):
        if p.layout != "NHWC":
            return "needs NHWC activations (prim-select wraps NCHW in transposes)"
        if p.groups != 1:
            return f"grouped convolution (groups={p.groups})"
        return None

    def filter_layout(self):
        return "RSCK"

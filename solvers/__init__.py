"""The solver registry, in the spirit of MIOpen: every way we know to compute a convolution or a GEMM.

A solver (base.py's Solver) answers these questions about a problem (problem.py: ConvProblem, GemmProblem,
DepthwisePointwiseProblem, AttentionProblem):
  directions                     -> the convolution directions it computes (fwd, bwd_data, bwd_weights)
  is_applicable(problem, target) -> None, or the reason it does not apply
  cost(problem, target)          -> predicted seconds (a roofline estimate, used to rank solvers)
  tunables(problem)              -> {parameter: candidate values}; default_params(problem, target) picks one
  tables()                       -> the names of the table entries that a parameter indexes (tile configs)
  filter_layout()                -> the filter layout build() expects (prim-select converts constant filters)
  build(kt, operands, ...)       -> the kernel body (linalg on tensors), and schedule(params) -> the
                                    transform script that tiles and vectorizes it (transform dialect)
  kernel(request)                -> its hand-written kernel for the target (MLIR text), or None

SOLVERS maps every solver's name to its instance, in the order `openprim explain` lists them (prim-select
takes the first of equally fast solvers); applicable() says which apply to a problem on a target. The
solvers live by family: cpu.py, cpu_backward.py (the backward convolutions), winograd.py (every target), gpu_simt.py, nvidia.py, amd.py.
"""
from __future__ import annotations

from openprim.base.target import Target
from openprim.solvers.amd import (AttentionFlashMfma, AttentionFlashWmma, ConvImplicitGemmMfma, ConvImplicitGemmWmma,
                                  GemmMfma, GemmWmma)
from openprim.solvers.base import Solver
from openprim.solvers.cpu_backward import ConvBwdDataGemm, ConvBwdReference, ConvBwdWeightsGemm
from openprim.solvers.cpu import (GEMM, Conv1x1Gemm, ConvDepthwise, ConvDirect, ConvGroupedGemm, ConvIm2colGemm,
                                  ConvImplicitGemm, ConvReference, GemmPacked, GemmReference)
from openprim.solvers.gpu_simt import (AttentionDecodeGpu, ConvDepthwiseGpu, ConvImplicitGemmGpu, GemmGpu,
                                      GemvGpu, NormGemvGpu)
from openprim.solvers.nvidia import (AttentionFlashMma, AttentionFlashWgmma, ConvBwdWeightsWgmma, ConvDepthwisePointwiseMma,
                                     ConvIm2colGemmWgmma, ConvImplicitGemmMma, ConvImplicitGemmWgmma,
                                     ConvSpaceToDepthWgmma, ConvWinogradF2x3Wgmma, ConvWinogradF4x3Wgmma, GemmMma,
                                     GemmWgmma, GemvMma, NormGemvMma)
from openprim.solvers.problem import DIRECTIONS, SOLVER_OP, ConvProblem
from openprim.solvers.winograd import (ConvWinogradF2x3, ConvWinogradF2x3Packed, ConvWinogradF4x3,
                                      ConvWinogradF4x3Packed)


# One solver per line, in the order `openprim explain` lists them.
SOLVERS = {s.name: s for s in (
    ConvDirect(),
    Conv1x1Gemm(),
    ConvIm2colGemm(),
    ConvDepthwise(),
    ConvReference(),
    ConvImplicitGemm(),
    GEMM,
    GemmPacked(),
    GemmReference(),
    ConvWinogradF2x3(),
    ConvWinogradF4x3(),
    ConvWinogradF2x3Packed(),
    ConvWinogradF4x3Packed(),
    ConvImplicitGemmGpu(),
    ConvDepthwiseGpu(),
    ConvGroupedGemm(),
    GemmGpu(),
    GemvGpu(),
    NormGemvGpu(),
    ConvImplicitGemmMma(),
    GemmMma(),
    ConvImplicitGemmWgmma(),
    ConvIm2colGemmWgmma(),
    ConvWinogradF2x3Wgmma(),
    ConvWinogradF4x3Wgmma(),
    ConvSpaceToDepthWgmma(),
    GemmWgmma(),
    GemvMma(),
    NormGemvMma(),
    ConvImplicitGemmMfma(),
    GemmMfma(),
    ConvImplicitGemmWmma(),
    GemmWmma(),
    ConvDepthwisePointwiseMma(),
    AttentionFlashMma(),
    AttentionFlashWgmma(),
    AttentionFlashMfma(),
    AttentionFlashWmma(),
    AttentionDecodeGpu(),
    ConvBwdDataGemm(),
    ConvBwdReference("bwd_data"),
    ConvBwdWeightsGemm(),
    ConvBwdWeightsWgmma(),
    ConvBwdReference("bwd_weights"),
)}


def applicable(problem, op: str, target: Target) -> list[tuple["Solver", str | None]]:
    """Every solver for `op` (an op kind: a backward convolution's solvers are conv2d solvers of its
    direction) with None (applicable) or the reason it is not."""
    op = SOLVER_OP.get(op, op)
    return [(s, _why_not(s, problem, target)) for s in SOLVERS.values() if s.op == op]


def _why_not(solver: Solver, problem, target: Target) -> str | None:
    if isinstance(problem, ConvProblem) and problem.direction not in solver.directions:
        return f"serves {' and '.join(DIRECTIONS[d] for d in solver.directions)} only"
    if target.kind not in solver.targets:
        return f"no {target.kind} kernel (runs on: {', '.join(solver.targets)})"
    return solver.is_applicable(problem, target)

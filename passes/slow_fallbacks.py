"""The compile-time warning of prim-select when a layer falls to a slow kernel on a chip with matrix cores.

On an NVIDIA (mma.sync, wgmma) or AMD (MFMA, WMMA) target, an f16/bf16 convolution or matmul is meant to run
on the matrix cores; where prim-select's heuristic leaves one on the reference loop nest (conv_reference,
gemm_reference), the SIMT GEMM (conv_implicit_gemm_gpu, gemm_gpu) or the untiled Winograd kernel, that layer
alone can take most of the network's time. One SlowFallbackWarning per compile lists those layers (op,
problem descriptor, source location) and why: the reasons the matrix-core solvers give for not applying
(solvers' is_applicable), or that one applies but the cost model predicted the fallback faster. A choice
that was forced (solver=) or measured (the tuning database, Find) is the user's or a measurement's and is
not reported; f32 is not either (tensor cores take f32 only as TF32, by opt-in).
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

from openprim.base.target import Target
from openprim.solvers import applicable
from openprim.solvers.amd import AmdMatrixSolver
from openprim.solvers.gpu_simt import ConvImplicitGemmGpu, GemmGpu
from openprim.solvers.nvidia import MmaSolver, WgmmaSolver
from openprim.solvers.winograd import ConvWinograd

MATRIX_DTYPES = ("f16", "bf16")
SHOWN = 3   # locations listed per problem


class SlowFallbackWarning(UserWarning):
    """Layers of a compile that run on a slow fallback kernel although the target has matrix cores."""


@dataclass(frozen=True)
class Fallback:
    """One layer on a slow kernel: where it is, its op and problem, the solver it got, and why."""
    where: str       # file:line:col of the layer
    op: str          # conv2d, matmul
    problem: str     # its problem descriptor
    solver: str
    why: str


def fallback_kind(solver) -> str | None:
    """What kind of slow kernel `solver` builds on a GPU, or None for a matrix-core or dedicated one."""
    if solver.name in ("conv_reference", "gemm_reference"):
        return "the reference loop nest"
    if type(solver) in (ConvImplicitGemmGpu, GemmGpu):
        return "the SIMT GEMM"
    if isinstance(solver, ConvWinograd):
        return "the untiled Winograd kernel"
    return None


def _on_chip(solver, target: Target) -> bool:
    """A matrix-core solver of the target's chip family (mma.sync also runs on wgmma chips)."""
    if isinstance(solver, WgmmaSolver):
        return target.matrix_core == "wgmma"
    if isinstance(solver, MmaSolver):
        return target.kind == "nvvm"
    if isinstance(solver, AmdMatrixSolver):
        return target.kind == "rocdl" and target.matrix_core.startswith(solver.family)
    return False


def why_slow(problem, kind: str, solver, source: str, target: Target) -> str | None:
    """Why a conv2d/matmul on `solver` (chosen by `source`: prim.choice) runs slower than the target's matrix
    cores would, or None where it is not a slow fallback (or the choice was forced or measured)."""
    if not target.is_gpu or target.matrix_core == "none" or kind not in ("conv2d", "matmul") or \
            getattr(problem, "dtype", None) not in MATRIX_DTYPES or source in ("forced", "db", "find"):
        return None
    what = fallback_kind(solver)
    if what is None:
        return None
    candidates = [(s, r) for s, r in applicable(problem, kind, target) if _on_chip(s, target)]
    fits = [s.name for s, r in candidates if r is None]
    if fits:
        return f"{what}; the cost model predicted it faster than {', '.join(fits)} (`openprim tune` measures them)"
    reasons: dict[str, list[str]] = {}
    for s, r in candidates:
        reasons.setdefault(r, []).append(s.name)
    listed = "; ".join(f"{', '.join(names)}: {r}" for r, names in reasons.items())
    return f"{what}; no matrix-core solver applies [{listed or f'none for {target}'}]"


def warn(layers: list[Fallback], target: Target) -> None:
    """One SlowFallbackWarning listing `layers` (nothing when empty), located at the first layer's source line."""
    if not layers:
        return
    groups: dict[tuple, list[str]] = {}
    for f in layers:
        groups.setdefault((f.op, f.problem, f.solver, f.why), []).append(f.where)
    lines = [f"{len(layers)} layer{'s' if len(layers) > 1 else ''} of this compile for {target} "
             f"({target.matrix_core} matrix cores) run on slow fallback kernels:"]
    for (op, problem, solver, why), wheres in groups.items():
        at = ", ".join(wheres[:SHOWN]) + (f" and {len(wheres) - SHOWN} more" if len(wheres) > SHOWN else "")
        lines.append(f"  {op} {problem} at {at} -> {solver}, {why}")
    m = re.fullmatch(r"(.*):(\d+):\d+", layers[0].where)
    filename, lineno = (m[1], int(m[2])) if m else ("<model>", 0)
    warnings.warn_explicit("\n".join(lines), SlowFallbackWarning, filename, lineno)

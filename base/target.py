"""Compilation targets: `cpu`, `nvvm:<sm_XX>` (NVIDIA, PTX/cubin) and `rocdl:<gfxNNN>` (AMD, hsaco).

A target string names the code generator and the chip. The numbers here (peak rates) only rank
solvers against each other; they are leads from the datasheets and our own measurements.
"""
from __future__ import annotations

from dataclasses import dataclass

from openprim.base.errors import OpenPrimError

NVVM_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
ROCDL_ARCHS = ("gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1200")
# (fp32 SIMT GFLOP/s, memory GB/s) per chip family, used by the solvers' roofline costs.
RATES = {"cpu": (100.0, 10.0), "sm_8": (19500.0, 1900.0), "sm_9": (60000.0, 4300.0),
         "gfx9": (80000.0, 5300.0), "gfx1": (60000.0, 900.0)}


@dataclass(frozen=True)
class Target:
    kind: str          # "cpu", "nvvm" or "rocdl"
    arch: str = ""     # "sm_90", "gfx942", ...

    def __str__(self):
        return self.kind if self.kind == "cpu" else f"{self.kind}:{self.arch}"

    @property
    def is_gpu(self) -> bool:
        return self.kind != "cpu"

    @property
    def wavefront(self) -> int:
        """Threads that execute in lockstep: 32 on NVIDIA and RDNA (gfx10+), 64 on CDNA (gfx9)."""
        return 64 if self.arch.startswith("gfx9") else 32

    @property
    def rates(self) -> tuple[float, float]:
        return RATES["cpu"] if self.kind == "cpu" else RATES[self.arch[:4]]


def parse_target(text: str) -> Target:
    text = str(text).strip()
    if text == "cpu":
        return Target("cpu")
    kind, _, arch = text.partition(":")
    archs = {"nvvm": NVVM_ARCHS, "rocdl": ROCDL_ARCHS}.get(kind)
    if archs is None:
        raise OpenPrimError(f"unknown target '{text}'; targets: cpu, nvvm:<{'|'.join(NVVM_ARCHS)}>, "
                            f"rocdl:<{'|'.join(ROCDL_ARCHS)}>")
    if arch not in archs:
        raise OpenPrimError(f"target '{text}': unsupported {kind} architecture '{arch}'; supported: {', '.join(archs)}")
    return Target(kind, arch)

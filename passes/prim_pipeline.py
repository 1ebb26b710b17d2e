"""prim-pipeline: the whole compiler, fuse -> select -> tile -> lower, for one target."""
from __future__ import annotations

from dataclasses import dataclass

NAME = "prim-pipeline"


@dataclass
class Options:
    NAME = NAME
    target: str = "cpu"
    solver: str = ""          # force one solver for every convolution (else $OPENPRIM_SOLVER, else heuristic)
    threads: int = 0          # 1: single-threaded kernels; 0: all cores when an OpenMP runtime is installed
    layout: str = "NHWC"      # "NHWC": run NCHW convs/pools in NHWC through transposes; "keep": leave layouts

    def __post_init__(self):
        from .prim_select import check_layout
        check_layout(self.layout)

    def entries(self):
        from . import prim_fuse, prim_lower, prim_select, prim_tile
        return (prim_fuse.Options().entries() + prim_select.Options(target=self.target, solver=self.solver,
                                                                    layout=self.layout).entries()
                + prim_tile.Options(target=self.target).entries()
                + prim_lower.Options(target=self.target, threads=self.threads != 1).entries())

"""prim-pipeline: the whole compiler, fuse -> select -> tile -> lower, for one target."""
from __future__ import annotations

from dataclasses import dataclass

NAME = "prim-pipeline"


@dataclass
class Options:
    NAME = NAME
    target: str = "cpu"
    solver: str = ""          # force one solver for every convolution (else $OPENPRIM_SOLVER, else heuristic)
    threads: int = 0          # CPU threads in kernels; 0 = all cores

    def run(self, module_op):
        from . import prim_fuse, prim_lower, prim_select, prim_tile
        prim_fuse.Options().run(module_op)
        prim_select.Options(target=self.target, solver=self.solver).run(module_op)
        prim_tile.Options(target=self.target).run(module_op)
        prim_lower.Options(target=self.target).run(module_op)

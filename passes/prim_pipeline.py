"""prim-pipeline: the whole compiler for one target, as one pass.

    prim-batch-chunks  (CPU) a memory-bound network compiled for a part of its batch, run once per part
    prim-decompose  attention without a kernel on the target -> matmul, softmax, matmul
    prim-fuse     conv/matmul + bias + residual + activation epilogues, BN folding, elementwise chains
    prim-layout   NCHW convolutions and pools in NHWC, through transposes that cancel between layers
    prim-select   a solver and its parameters per conv2d/matmul (heuristic, database, Find), weights laid out for it
    prim-tile     one kernel per compute op: the solver's kernel or linalg + a transform schedule
    prim-lower    bufferize and lower the kernels with the target's backend (backends/<kind>/)

Every stage gets the one Target of the pipeline (parsed from pipeline text by passes.parse_options, or
given by the driver).
"""
from __future__ import annotations

from dataclasses import dataclass

from openprim.base.target import Target

from . import batch_chunks, prim_decompose, prim_fuse, prim_layout, prim_lower, prim_select, prim_tile

NAME = "prim-pipeline"


@dataclass
class Options:
    NAME = NAME
    target: Target = Target("cpu")
    solver: str = ""          # force one solver for every convolution (else $OPENPRIM_SOLVER, else heuristic)
    threads: int = 0          # 1: single-threaded kernels; 0: all cores when an OpenMP runtime is installed
    layout: str = "NHWC"      # "NHWC": run NCHW convs/pools in NHWC through transposes; "keep": leave layouts
    tuner: prim_select.Tuner | None = None   # prim-select's database and Find (given by the driver)
    timings: dict | None = None              # prim-tile's seconds per kernel (given by the driver)

    def __post_init__(self):
        prim_layout.check_layout(self.layout)

    def stages(self) -> list[tuple[str, object]]:
        """(name, options) of each stage, in order."""
        chunks = [] if self.target.is_gpu else [(batch_chunks.NAME, batch_chunks.Options())]
        return chunks + [(prim_decompose.NAME, prim_decompose.Options(target=self.target)),
                         (prim_fuse.NAME, prim_fuse.Options()),
                         (prim_layout.NAME, prim_layout.Options(layout=self.layout)),
                         (prim_select.NAME, prim_select.Options(target=self.target, solver=self.solver,
                                                                tuner=self.tuner)),
                         (prim_tile.NAME, prim_tile.Options(target=self.target, timings=self.timings)),
                         (prim_lower.NAME, prim_lower.Options(target=self.target, threads=self.threads != 1))]

    def entries(self):
        return [entry for _, options in self.stages() for entry in options.entries()]

"""`openprim.compile`: the compiler (compiler.py) through the compile cache (cache.py) wherever a compile can
be keyed (a Graph, the default pipeline and the native backend); anything else is compiled in-process."""
from __future__ import annotations

import os
import sys

from openprim import cache as compile_cache, compiler
from openprim.base.target import Target
from openprim.pyfrontend import Graph, importers


def compile(source, target: Target | str = "cpu", solver: str = "", pipeline: str | None = None,
            backend: str = "native", verbose=False, layout: str = "NHWC", cache: bool = True,
            precision: str | None = None, weights: str = "constants"):
    """Compile a Graph (or prim module) for `target` and return a callable on numpy arrays. A path (str or
    os.PathLike) of a model file (.py, .onnx, .pt2, .mlir: `importers.suffixes()`) is loaded first
    (`importers.load`, its default options); other text is MLIR.
    cache: a Graph compiled by the default pipeline and backend goes through the compile cache (openprim.cache;
    OPENPRIM_CACHE=0 turns it off too); `.cache_hit` says whether it was loaded from there.
    precision: "f32" | "f16" | "bf16" computes the graph in that dtype, I/O in the graph's own.
    weights: "constants" (default: the Graph's params are compile-time constants, folded and packed) or
    "values": the executable holds its float params and `exe.load_weights(mapping)` replaces them without a
    recompile (`exe.param_names`, `exe.state_dict()`; docs/artifacts.md, "Weights as values")."""
    if isinstance(source, (str, os.PathLike)) and "\n" not in str(source) and \
            os.path.splitext(source)[1] in importers.suffixes():
        source = importers.load(source)
    if not (cache and compile_cache.enabled() and isinstance(source, Graph) and not pipeline and backend == "native"):
        return compiler.compile(source, target, solver, pipeline, backend, verbose, layout, precision, weights)
    compiler.check_weights(weights, source)
    exe = compile_cache.load_or_compile(source, target, {"solver": solver, "layout": layout, "precision": precision,
                                                         "weights": weights})
    if verbose:
        seconds = exe.compile_seconds
        print(f"loaded from the compile cache in {seconds['load']:.2f} s" if exe.cache_hit else
              f"compiled in {seconds['passes']:.2f} s (passes) + {seconds['codegen']:.2f} s (LLVM), stored in the "
              f"compile cache", file=sys.stderr)
    return exe

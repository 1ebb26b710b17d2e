"""Per-target backends, one folder per target kind (Triton's backends/<vendor>/ are the model).

Each `backends/<kind>/compiler.py` holds what only that kind does:
    lowering(target, threads, nested)      prim-lower's steps once the kernels are bufferized (GPU: mapped
                                           onto the grid and merged into `gpu.module @device`)
    kernel_files(module, target, device_arch=None, stage=untimed)   the artifact members holding the kernels
                                           (stage(name): a context manager around each step, for timings)
    artifact_meta(target, files)           what the manifest records about the build
Adding an architecture is a row of base/target.py's table; adding a target kind is a folder here (and its
runtime driver in runtime/).
"""
from __future__ import annotations

from contextlib import nullcontext

from mlir import ir
from mlir.dialects import gpu

from openprim.base.errors import OpenPrimError


def device_image(module: ir.Module) -> bytes:
    """The bytes of the `gpu.binary @device` object: PTX text (nvvm) or an hsaco (rocdl)."""
    found = []
    module.operation.walk(lambda o: (found.append(o) if o.name == "gpu.binary" else None, ir.WalkResult.ADVANCE)[1])
    if len(found) != 1:
        raise OpenPrimError(f"expected one gpu.binary in the lowered module, found {len(found)}")
    return bytes(gpu.ObjectAttr(found[0].attributes["objects"][0]).object)


def untimed(name: str):
    """The `stage` of an untimed compile: a context manager that does nothing."""
    return nullcontext()

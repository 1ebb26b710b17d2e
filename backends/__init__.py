"""Per-target backends, one folder per target kind (Triton's backends/<vendor>/ are the model).

Each `backends/<kind>/compiler.py` holds what only that kind does:
    lowering(target, threads, nested)      prim-lower's steps once the kernels are bufferized (GPU: once they
                                           are mapped onto the grid; from the merge into `gpu.module @device`
                                           on, gpu_common.merge_device_modules)
    launches(module, weights_bytes)        GPU kinds: the plan's launches of each kernel and the constant
                                           tables they read (gpu_common.launches, with the kind's host ops)
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
from openprim.runtime.executor import ALIGN


def device_image(module: ir.Module) -> bytes:
    """The bytes of the `gpu.binary @device` object: PTX text (nvvm) or an hsaco (rocdl)."""
    found = []
    module.operation.walk(lambda o: (found.append(o) if o.name == "gpu.binary" else None, ir.WalkResult.ADVANCE)[1])
    if len(found) != 1:
        raise OpenPrimError(f"expected one gpu.binary in the lowered module, found {len(found)}")
    return bytes(gpu.ObjectAttr(found[0].attributes["objects"][0]).object)


def aligned(nbytes: int) -> int:
    """nbytes rounded up to the runtime's buffer alignment: where the next buffer of a plan may start."""
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def untimed(name: str):
    """The `stage` of an untimed compile: a context manager that does nothing."""
    return nullcontext()

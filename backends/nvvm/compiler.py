"""The NVIDIA backend: the `gpu.module @device` to PTX (MLIR's NVVM serializer), and PTX to a cubin.

Lowering: nvgpu before gpu (the tensor-map and mbarrier types), then gpu to NVVM with bare-pointer
kernel parameters, NVVM ops that are inline PTX to LLVM, and `gpu-module-to-binary{format=isa}`: the
`gpu.binary @device` holds PTX for the target's PTX architecture (sm_90 compiles as sm_90a: wgmma, TMA).
Serialization: the PTX, plus a cubin from the CUDA toolkit's ptxas when it is installed (else the
driver compiles the PTX when the artifact is loaded).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from mlir import ir

from openprim.base.errors import OpenPrimError
from openprim.base.target import Target
from openprim.runtime.kernel_files import CUBIN, PTX

from .. import device_image, untimed


def lowering(target: Target, threads: bool, nested) -> list:
    """prim-lower's steps after the kernels are mapped and merged into `gpu.module @device`."""
    return [nested([
        f"nvvm-attach-target{{chip={target.ptx_arch} O=3}}",
        "gpu.module(fold-memref-alias-ops,expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-scf-to-cf,"
        "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=true},convert-nvvm-to-llvm)",
        "reconcile-unrealized-casts", "gpu-module-to-binary{format=isa}"])]


def ptxas(ptx: bytes, arch: str) -> bytes | None:
    """A cubin for `arch` from PTX, when the CUDA toolkit's ptxas is installed (else None)."""
    tool = shutil.which("ptxas") or next((p for p in (os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                                                    "bin", "ptxas"),) if os.path.exists(p)), None)
    if not tool:
        return None
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        Path(src).write_bytes(ptx)
        r = subprocess.run([tool, f"-arch={arch}", "-O3", src, "-o", out], capture_output=True, text=True)
        if r.returncode:
            raise OpenPrimError(f"ptxas failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
        return Path(out).read_bytes()


def kernel_files(module: ir.Module, target: Target, device_arch: str | None = None, stage=untimed) -> dict[str, bytes]:
    """kernels.ptx, and kernels.cubin when ptxas is here and the code is for the device it will run on
    (device_arch: the GPU of this process, when known; a cubin for another chip would not load)."""
    ptx = device_image(module)
    files = {PTX: ptx}
    if (device_arch or target.arch) == target.arch:
        with stage("ptxas"):
            cubin = ptxas(ptx, target.ptx_arch)
        if cubin:
            files[CUBIN] = cubin
    return files


def artifact_meta(target: Target, files: dict[str, bytes]) -> dict:
    """The chip the cubin was assembled for (None: PTX only)."""
    return {"cubin_arch": target.arch if CUBIN in files else None}

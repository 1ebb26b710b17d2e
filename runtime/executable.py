"""One way to make an executable from compiled kernels, for a just-compiled module (the JIT) and a loaded
`.oprim` artifact alike: the GPU image picked by one rule (kernel_files.device_image), the same checks of
this machine (instruction set, memory) before anything is allocated."""
from __future__ import annotations

import platform

from openprim.base.errors import OpenPrimError
from openprim.base.target import Target

from . import cpu, kernel_files, manifest as manifest_check
from .device import Device
from .executor import CpuExecutable
from .gpu import GpuExecutable, open_device


def build_executable(target: Target, plan: dict, kernels: dict[str, bytes], weights: bytes, meta: dict,
                     device: int | Device = 0, graphs: bool | None = None, where: str = "", params: bytes = b""):
    """The executable of a plan and its kernel members (kernel_files.py's names) for `target`. meta: what the
    backend recorded of the build (`machine`, `cpu`, `cpu_features`, `cubin_arch`: the manifest's entries).
    On a GPU target it runs on GPU `device` (its index, or the Device opened for it; graphs: replay as a CUDA/HIP graph; None: unless
    OPENPRIM_GPU_GRAPHS=0). where: the artifact's path, which names what cannot run here. params: the initial
    bytes of the plan's params region (weights as values), which the executable holds and load_weights replaces."""
    prefix = f"{where}: " if where else ""
    if target.is_gpu:
        dev = device if isinstance(device, Device) else open_device(target, device)
        image = kernel_files.device_image(target.kind, kernels, meta.get("cubin_arch"), dev.arch())
        return GpuExecutable(plan, image, weights, dev, graphs=graphs, params=params)
    if meta.get("machine") != platform.machine():
        raise OpenPrimError(f"{prefix}compiled for {meta.get('machine')}, this machine is {platform.machine()}")
    try:
        manifest_check.check_cpu(meta)
    except OpenPrimError as e:
        raise OpenPrimError(f"{prefix}{e}") from None
    short = manifest_check.memory_shortfall(manifest_check.host_sizes(plan))
    if short:
        raise OpenPrimError(f"{prefix}cannot run {'here' if where else 'the compiled model here'}: it {short}")
    try:
        lib, address = cpu.load_library(kernels[kernel_files.SHARED_OBJECT])
    except OSError as e:
        raise OpenPrimError(f"{prefix}{kernel_files.SHARED_OBJECT} cannot be loaded ({e})") from None
    return CpuExecutable(plan, address, weights, keepalive=lib, params=params)

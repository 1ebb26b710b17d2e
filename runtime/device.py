"""The device interface every GPU driver implements (CUDA in cuda.py, HIP in hip.py).

A compiled GPU network needs only these operations: load a code object, look a kernel up, allocate,
copy, launch, synchronize, and time with events. Kernel arguments are all 64-bit: device pointers
(memrefs use the bare-pointer convention) and index/i64 scalars.
"""
from __future__ import annotations

import numpy as np

from openprim.base.errors import OpenPrimError


class DeviceError(OpenPrimError):
    """The driver is missing, there is no such device, or a driver call failed."""


class Device:
    """One GPU of one vendor. Drivers raise DeviceError with the failing call and the driver's message."""

    kind = ""          # "cuda" or "hip"
    DEFAULT_SHARED = 48 * 1024   # dynamic shared memory a launch may use without allow_shared

    def arch(self) -> str:
        """The device's architecture as targets name it: 'sm_90', 'gfx942', ..."""
        raise NotImplementedError

    def name(self) -> str:
        raise NotImplementedError

    def load_module(self, image: bytes):
        """A loaded code object (PTX/cubin for CUDA, hsaco for HIP)."""
        raise NotImplementedError

    def function(self, module, name: str):
        raise NotImplementedError

    def alloc(self, nbytes: int) -> int:
        """A device pointer to nbytes (at least 256-byte aligned)."""
        raise NotImplementedError

    def free(self, ptr: int) -> None:
        raise NotImplementedError

    def copy_to_device(self, dst: int, src: np.ndarray) -> None:
        raise NotImplementedError

    def copy_to_host(self, dst: np.ndarray, src: int) -> None:
        raise NotImplementedError

    def launch(self, function, grid: tuple[int, int, int], block: tuple[int, int, int], args: list[int],
               shared_bytes: int = 0) -> None:
        """Launch on the device's stream; every argument is passed as a 64-bit value."""
        raise NotImplementedError

    def allow_shared(self, function, nbytes: int) -> None:
        """Let `function` launch with nbytes of dynamic shared memory (above DEFAULT_SHARED)."""
        raise DeviceError(f"{self.kind}: kernels with {nbytes} bytes of dynamic shared memory are not supported")

    def tensor_map(self, address: int, spec: dict) -> int:
        """The device address of a TMA tensor map over `address` (spec: see driver/plan.py _tensor_map)."""
        raise DeviceError(f"{self.kind}: TMA tensor maps need an NVIDIA sm_90 GPU")

    def synchronize(self) -> None:
        raise NotImplementedError

    def elapsed_ms(self, fn, repeat: int = 1) -> float:
        """Milliseconds between a start and a stop event recorded around `repeat` calls of fn()."""
        raise NotImplementedError

    def function_attributes(self, function) -> dict:
        """Registers, shared/local bytes, max threads of a loaded kernel, where the driver reports them."""
        return {}

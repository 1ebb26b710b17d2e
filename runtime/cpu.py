"""The CPU driver: the OpenMP runtime the kernels call, loading a kernels .so."""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import sys
import tempfile


@functools.lru_cache(None)
def openmp_library() -> str | None:
    """libiomp5/libomp (the __kmpc_* runtime MLIR's OpenMP lowering calls), or None."""
    roots = [sys.prefix, os.path.dirname(os.path.dirname(sys.executable))]
    for root in roots:
        for name in ("libiomp5.so", "libomp.so", "libomp.so.5"):
            hits = glob.glob(os.path.join(root, "lib", name))
            if hits:
                return hits[0]
    return None


def shared_libs() -> list[str]:
    lib = openmp_library()
    return [lib] if lib else []


def link_flags() -> list[str]:
    lib = openmp_library()
    return ([lib, f"-Wl,-rpath,{os.path.dirname(lib)}"] if lib else []) + ["-lm"]


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KERNEL_BUFFERS_KEPT = 1 << 30


def keep_kernel_buffers() -> None:
    """Let glibc's malloc keep freed buffers up to 1 GiB for reuse instead of giving them back to the OS.

    Kernels allocate their intermediates (padded inputs, im2col, Winograd tiles) on every call; by default
    glibc maps each large one fresh and unmaps it on free, so every call paid its page faults again: 42%
    of a Winograd convolution's time was the OS zeroing pages (perf). Other C libraries: nothing to do."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, KERNEL_BUFFERS_KEPT)
        libc.mallopt(M_TRIM_THRESHOLD, 2 * KERNEL_BUFFERS_KEPT)
    except (OSError, AttributeError):
        pass


def load_library(data: bytes):
    """dlopen the kernels (the bytes of a shared object); returns (library, name -> address)."""
    keep_kernel_buffers()
    with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f:
        f.write(data)
    try:
        lib = ctypes.CDLL(f.name)
    finally:
        os.unlink(f.name)  # the mapping stays valid after unlink
    return lib, lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value

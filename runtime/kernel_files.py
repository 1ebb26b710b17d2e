"""The artifact members that hold a target's kernels, and which one a device loads: one table that the
backends write by (backends/<kind>/: `kernel_files`) and the runtime reads by (artifact.py, executable.py,
manifest.py, `openprim inspect`).

    kind   member          what it is                                          required
    cpu    kernels.so      a native shared library, `void kernel(T *arg0, ..., T *out)` each   yes
    nvvm   kernels.ptx     PTX of every kernel (the driver compiles it for the GPU it finds)   yes
           kernels.cubin   the same kernels assembled by ptxas for one chip (`cubin_arch`)    when ptxas ran
    rocdl  kernels.hsaco   an AMDGPU code object (ELF) for the chip                            yes
"""
from __future__ import annotations

SHARED_OBJECT = "kernels.so"
PTX = "kernels.ptx"
CUBIN = "kernels.cubin"
HSACO = "kernels.hsaco"

# target kind -> the member every artifact of that kind has (an nvvm artifact may also hold a CUBIN)
REQUIRED = {"cpu": SHARED_OBJECT, "nvvm": PTX, "rocdl": HSACO}


def device_image(kind: str, files: dict[str, bytes], cubin_arch: str | None, device_arch: str) -> bytes:
    """The code object a GPU of `device_arch` loads: the cubin where it was assembled for exactly that chip,
    else the portable image (PTX, which the driver compiles; the hsaco)."""
    if kind == "nvvm" and cubin_arch == device_arch and CUBIN in files:
        return files[CUBIN]
    return files[REQUIRED[kind]]

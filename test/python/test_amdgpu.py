"""AMDGPU code objects: a gpu.module lowered by convert-gpu-to-rocdl -> openprim.backends.rocdl.compiler.code_object -> hsaco,
checked through the metadata that openprim.runtime.codeobject reads (no AMD GPU is needed).

The kernels use what pulls in each device library: math.erf (ocml) and a dynamic gpu.block_dim (ockl;
ld.lld --no-undefined fails if either is left unresolved), plus a workgroup attribution behind a
gpu.barrier, whose size the LDS count must show.
"""
import sys

import pytest
from mlir import ir, passmanager

from openprim.backends.rocdl import compiler as rocdl
from openprim.base.errors import OpenPrimError
from openprim.base.target import parse_target
from openprim.runtime.codeobject import amdgpu_kernels, amdgpu_target

N = 256
KERNELS = f"""
module attributes {{gpu.container_module}} {{
  gpu.module @kernels {{
    gpu.func @erf_reverse(%a: memref<{N}xf32>, %b: memref<{N}xf32>)
        workgroup(%buf: memref<{N}xf32, #gpu.address_space<workgroup>>) kernel
        attributes {{known_block_size = array<i32: {N}, 1, 1>}} {{
      %t = gpu.thread_id x
      %x = memref.load %a[%t] : memref<{N}xf32>
      %e = math.exp %x : f32
      %r = math.erf %e : f32
      memref.store %r, %buf[%t] : memref<{N}xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %last = arith.constant {N - 1} : index
      %u = arith.subi %last, %t : index
      %y = memref.load %buf[%u] : memref<{N}xf32, #gpu.address_space<workgroup>>
      memref.store %y, %b[%t] : memref<{N}xf32>
      gpu.return
    }}
    gpu.func @scale(%a: memref<4096xf32>) kernel {{
      %t = gpu.thread_id x
      %g = gpu.block_id x
      %d = gpu.block_dim x
      %base = arith.muli %g, %d : index
      %i = arith.addi %base, %t : index
      %x = memref.load %a[%i] : memref<4096xf32>
      %y = arith.addf %x, %x : f32
      memref.store %y, %a[%i] : memref<4096xf32>
      gpu.return
    }}
  }}
}}
"""


def lowered_gpu_module(chip: str) -> str:
    with ir.Context():
        module = ir.Module.parse(KERNELS)
        passmanager.PassManager.parse(
            f"builtin.module(gpu.module(convert-gpu-to-rocdl{{chipset={chip} index-bitwidth=64 runtime=HIP "
            "use-bare-ptr-memref-call-conv=true}))").run(module.operation)
        return str(module.body.operations[0])


@pytest.fixture(scope="module")
def toolchain():
    try:
        import llvmlite  # noqa: F401
        rocdl.ld_lld(), rocdl.device_libs()
    except (ImportError, OpenPrimError) as e:
        pytest.skip(f"AMDGPU toolchain incomplete: {e}")


@pytest.mark.parametrize("chip, wave", [("gfx90a", 64), ("gfx942", 64), ("gfx1100", 32)])
def test_code_object(toolchain, chip, wave):
    gpu_module = lowered_gpu_module(chip)
    assert "__ocml_erf_f32" in gpu_module     # rocdl.workgroup.dim becomes __ockl_get_local_size in LLVM IR
    hsaco = rocdl.code_object(gpu_module, parse_target(f"rocdl:{chip}"))
    assert hsaco[:4] == b"\x7fELF"
    assert chip in amdgpu_target(hsaco)
    kernels = {k["name"]: k for k in amdgpu_kernels(hsaco)}
    assert set(kernels) == {"erf_reverse", "scale"}
    for k in kernels.values():
        assert k["vgpr_count"] > 0 and k["sgpr_count"] > 0
        assert k["wavefront_size"] == wave
        assert k["scratch_bytes"] == 0
    assert kernels["erf_reverse"]["lds_bytes"] == N * 4
    assert kernels["erf_reverse"]["max_flat_workgroup_size"] == N
    assert kernels["erf_reverse"]["kernarg_bytes"] == 16
    assert kernels["scale"]["lds_bytes"] == 0


def test_isa_version():
    assert [parse_target(f"rocdl:{c}").isa_version for c in ("gfx90a", "gfx942", "gfx1100", "gfx1030")] == \
        [9010, 9402, 11000, 10300]
    with pytest.raises(OpenPrimError, match="unsupported rocdl architecture 'sm_90'"):
        parse_target("rocdl:sm_90")


@pytest.mark.parametrize("data, why", [(b"", "no ELF magic"), (b"\x7fELF\x01\x01" + bytes(58), "64-bit"),
                                       (b"\x7fELF\x02\x01" + bytes(12) + b"\xe0\x00" + bytes(44), "corrupt")])
def test_malformed_code_object(data, why):
    with pytest.raises(OpenPrimError, match=f"not an AMDGPU code object .*{why}"):
        amdgpu_kernels(data)


def test_missing_tools(monkeypatch):
    """Each missing piece is one OpenPrimError that says how to install it."""
    monkeypatch.setitem(sys.modules, "llvmlite.binding", None)
    with pytest.raises(OpenPrimError, match=r"pip install llvmlite==0\.50\.0"):
        rocdl.code_object("", parse_target("rocdl:gfx942"))
    monkeypatch.setattr(rocdl, "_ROCM", "/nonexistent")
    monkeypatch.setattr(rocdl.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(rocdl.shutil, "which", lambda name: None)
    monkeypatch.setattr(rocdl.os.path, "exists", lambda path: False)
    for probe, advice in [(rocdl.ld_lld, "pip install ziglang"), (rocdl.device_libs, "rocm-device-libs")]:
        probe.cache_clear()
        with pytest.raises(OpenPrimError, match=advice):
            probe()
        probe.cache_clear()

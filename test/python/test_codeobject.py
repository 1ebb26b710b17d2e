"""Kernel resources from CUDA code objects (checked against what `ptxas -v` prints) and the HIP driver
(its errors on this GPU-less machine, and its calls against a stand-in for hip-python).
"""
import ctypes
import enum
import re
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest
from mlir import ir, passmanager
from mlir.dialects import gpu

from openprim.base.errors import OpenPrimError
from openprim.runtime.codeobject import cubin_kernels, ptx_kernels
from openprim.runtime.device import DeviceError
from openprim.runtime.hip import HipDevice

# `reverse` uses 400 bytes of shared memory; `private` a dynamically indexed array ptxas must keep in local memory.
KERNELS = """
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @reverse(%a: memref<4096xf32>, %b: memref<4096xf32>)
        workgroup(%buf: memref<100xf32, #gpu.address_space<workgroup>>) kernel {
      %t = gpu.thread_id x
      %x = memref.load %a[%t] : memref<4096xf32>
      memref.store %x, %buf[%t] : memref<100xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %c99 = arith.constant 99 : index
      %u = arith.subi %c99, %t : index
      %y = memref.load %buf[%u] : memref<100xf32, #gpu.address_space<workgroup>>
      memref.store %y, %b[%t] : memref<4096xf32>
      gpu.return
    }
    gpu.func @private(%a: memref<4096xf32>, %b: memref<4096xf32>) kernel {
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c64 = arith.constant 64 : index
      %tmp = memref.alloca() : memref<64xf32, #gpu.address_space<private>>
      scf.for %i = %c0 to %c64 step %c1 {
        %j = arith.addi %i, %t : index
        %x = memref.load %a[%j] : memref<4096xf32>
        %k = arith.remui %j, %c64 : index
        memref.store %x, %tmp[%k] : memref<64xf32, #gpu.address_space<private>>
      }
      %k = arith.remui %t, %c64 : index
      %y = memref.load %tmp[%k] : memref<64xf32, #gpu.address_space<private>>
      memref.store %y, %b[%t] : memref<4096xf32>
      gpu.return
    }
  }
}
"""


@pytest.fixture(scope="module")
def ptx() -> bytes:
    with ir.Context():
        module = ir.Module.parse(KERNELS)
        passmanager.PassManager.parse(
            "builtin.module(nvvm-attach-target{chip=sm_90}, gpu.module(convert-scf-to-cf, "
            "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=true}), gpu-module-to-binary{format=isa})"
        ).run(module.operation)
        return gpu.ObjectAttr(module.body.operations[0].attributes["objects"][0]).object


def test_ptx_kernels(ptx):
    assert ptx_kernels(ptx.decode()) == [{"name": "reverse", "registers": None, "shared_bytes": 400},
                                         {"name": "private", "registers": None, "shared_bytes": 0}]


@pytest.mark.skipif(not shutil.which("ptxas"), reason="ptxas (CUDA toolkit) not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cubin_kernels_match_ptxas(ptx, tmp_path, arch):
    (tmp_path / "k.ptx").write_bytes(ptx.replace(b".target sm_90", f".target {arch}".encode()))
    run = subprocess.run(["ptxas", f"-arch={arch}", "-v", "k.ptx", "-o", "k.cubin"], cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    expected = {}
    for name, body in re.findall(r"entry function '(\w+)'(.*?)(?=entry function|\Z)", run.stdout + run.stderr,
                                  re.DOTALL):
        shared = re.search(r"(\d+) bytes smem", body)
        expected[name] = {"name": name, "registers": int(re.search(r"Used (\d+) registers", body)[1]),
                          "shared_bytes": int(shared[1]) if shared else 0,
                          "local_bytes": int(re.search(r"(\d+) bytes stack frame", body)[1])}
    assert expected["reverse"]["shared_bytes"] == 400 and expected["private"]["local_bytes"] == 256
    assert sorted(cubin_kernels((tmp_path / "k.cubin").read_bytes()), key=lambda k: k["name"]) == \
        sorted(expected.values(), key=lambda k: k["name"])


def test_cubin_malformed():
    with pytest.raises(OpenPrimError, match="not a CUDA cubin"):
        cubin_kernels(b"\x7fELF\x02\x01" + bytes(12) + b"\xe0\x00" + bytes(44))


def test_hip_device_here():
    """This machine has no ROCm and no AMD GPU: one line naming what is missing."""
    try:
        device = HipDevice()
    except DeviceError as e:
        assert "\n" not in str(e) and ("libamdhip64.so" in str(e) or "hip-python" in str(e)
                                       or "no AMD GPU" in str(e))
    else:
        assert device.arch().startswith("gfx")


class FakeHip:
    """Enough of hip-python's `hip` module: calls return (hipError_t, results...)."""

    class hipError_t(enum.Enum):
        hipSuccess = 0
        hipErrorOutOfMemory = 2

    class hipFunction_attribute(enum.Enum):
        HIP_FUNC_ATTRIBUTE_NUM_REGS = 4
        HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
        HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3
        HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0

    class hipStreamCaptureMode(enum.Enum):
        hipStreamCaptureModeThreadLocal = 1

    class hipMemoryType(enum.Enum):
        hipMemoryTypeHost = 0
        hipMemoryTypeDevice = 1

    hipStreamNonBlocking, hipEventDisableTiming = 1, 2

    def __init__(self):
        self.launches = []
        self.calls = []                   # (name, args) of the stream, copy, capture and graph calls
        self.capturing = None
        self.ok = self.hipError_t.hipSuccess

    def __getattr__(self, name):          # calls without results
        return lambda *args: (self.ok,)

    def hipGetDeviceCount(self):
        return self.ok, 1

    def hipGetDeviceProperties(self, index):
        return self.ok, types.SimpleNamespace(gcnArchName="gfx942:sramecc+:xnack-", name="AMD Instinct MI300X")

    def hipGetErrorString(self, err):
        return self.ok, "out of memory"

    def hipMalloc(self, nbytes):
        return (self.hipError_t.hipErrorOutOfMemory, None) if nbytes > 1 << 40 else (self.ok, 0x1000)

    def hipMemGetInfo(self):
        return self.ok, 1 << 36, 1 << 37

    def hipFuncGetAttribute(self, attr, function):
        return (self.hipError_t.hipErrorOutOfMemory, 0) if attr.value == 3 else (self.ok, 10 + attr.value)

    def hipModuleLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        values = [ctypes.cast(params[i], ctypes.POINTER(ctypes.c_uint64)).contents.value for i in range(len(params))]
        self.launches.append(((gx, gy, gz), (bx, by, bz), shared, values))
        self.calls.append(("captured launch" if stream is not None and stream == self.capturing else "launch", stream))
        return (self.ok,)

    def _record(name, result=None):
        def call(self, *args):
            self.calls.append((name, args))
            return (self.ok,) if result is None else (self.ok, result)
        return call

    hipStreamCreateWithFlags = _record("hipStreamCreateWithFlags", 0x51)
    hipMemcpyDtoDAsync = _record("hipMemcpyDtoDAsync")
    hipGraphInstantiateWithFlags = _record("hipGraphInstantiateWithFlags", "exec")
    hipGraphLaunch = _record("hipGraphLaunch")

    def hipStreamBeginCapture(self, stream, mode):
        self.calls.append(("hipStreamBeginCapture", (stream, mode)))
        self.capturing = stream
        return (self.ok,)

    def hipStreamEndCapture(self, stream):
        self.calls.append(("hipStreamEndCapture", (stream,)))
        self.capturing = None
        return self.ok, "graph"

    def hipPointerGetAttributes(self, ptr):
        kind = self.hipMemoryType.hipMemoryTypeDevice if ptr == 0x1000 else self.hipMemoryType.hipMemoryTypeHost
        return self.ok, types.SimpleNamespace(type=kind, device=0)

    def hipStreamGetDevice(self, stream):
        return self.ok, 0 if stream == 0x51 else 1


def test_hip_device_calls(monkeypatch):
    fake = FakeHip()
    monkeypatch.setitem(sys.modules, "hip", types.SimpleNamespace(hip=fake))
    device = HipDevice()
    assert (device.arch(), device.name()) == ("gfx942", "AMD Instinct MI300X")
    assert device.alloc(64) == 0x1000
    device.launch("f", (4, 1, 1), (256, 1, 1), [0x1000, 7, -1], shared_bytes=128)
    assert fake.launches == [((4, 1, 1), (256, 1, 1), 128, [0x1000, 7, 2**64 - 1])]
    assert device.function_attributes("f") == {"registers": 14, "shared_bytes": 11, "max_threads": 10}
    device.copy_to_device(0x1000, np.zeros(4, np.float32))
    with pytest.raises(DeviceError, match=r"^hipMalloc failed: hipErrorOutOfMemory: out of memory$"):
        device.alloc(1 << 41)


def test_hip_streams_copies_and_graphs(monkeypatch):
    """Device-to-device copies and launches go on the given stream; a capture records the launches and the
    graph is instantiated once and launched on the caller's stream."""
    fake = FakeHip()
    monkeypatch.setitem(sys.modules, "hip", types.SimpleNamespace(hip=fake))
    device = HipDevice()
    stream = device.create_stream()
    device.check_stream(stream)
    with pytest.raises(DeviceError, match="is not a stream of AMD GPU 0"):
        device.check_stream(0x99)
    assert (device.pointer_device(0x1000), device.pointer_device(0x2000)) == (0, None)
    device.copy_device_to_device(0x1000, 0x2000, 64, stream)
    graph = device.capture(stream, lambda: device.launch("f", (1, 1, 1), (64, 1, 1), [0x1000], 0, stream))
    device.graph_launch(graph[1], 0x77)
    assert graph == ("graph", "exec")
    assert fake.calls == [
        ("hipStreamCreateWithFlags", (1,)), ("hipMemcpyDtoDAsync", (0x1000, 0x2000, 64, 0x51)),
        ("hipStreamBeginCapture", (0x51, fake.hipStreamCaptureMode.hipStreamCaptureModeThreadLocal)),
        ("captured launch", 0x51), ("hipStreamEndCapture", (0x51,)), ("hipGraphInstantiateWithFlags", ("graph", 0)),
        ("hipGraphLaunch", ("exec", 0x77))]

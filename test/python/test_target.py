"""The Target: parsed once from its text, every chip fact from the one table (base/target.py), the
device check the runtime applies, and `cpu:<mcpu>` (code for a named CPU, here the x86-64 baseline)."""
import json
import platform
import zipfile

import numpy as np
import pytest

import openprim.compiler
import openprim.runtime
from openprim.base.errors import OpenPrimError
from openprim.base.target import CHIPS, KINDS, Target, archs, host_cpu, parse_target
from openprim.runtime import kernel_files
from openprim.pyfrontend import Graph


@pytest.mark.parametrize("kind, arch", [k for k in CHIPS if k[0] != "cpu"] + [("cpu", ""), ("cpu", "znver4")])
def test_round_trip(kind, arch):
    t = parse_target(f"{kind}:{arch}" if arch else kind)
    assert t == Target(kind, arch) and parse_target(str(t)) == t and parse_target(t) is t


def test_concrete_names_the_chip():
    """Plain `cpu` (and cpu:native) is this machine's CPU: the one resolution the tuning database's arch,
    the compile cache's key and the CPU backend's -mcpu all use."""
    assert Target("cpu").concrete == Target("cpu", host_cpu())
    assert Target("cpu", "native").concrete == Target("cpu", host_cpu())
    for t in (Target("cpu", "x86-64-v3"), Target("nvvm", "sm_90"), Target("rocdl", "gfx942")):
        assert t.concrete is t


@pytest.mark.parametrize("kind, files, cubin_arch, device, want", [
    ("nvvm", {"kernels.ptx": b"ptx", "kernels.cubin": b"cubin"}, "sm_90", "sm_90", b"cubin"),
    ("nvvm", {"kernels.ptx": b"ptx", "kernels.cubin": b"cubin"}, "sm_80", "sm_90", b"ptx"),
    ("nvvm", {"kernels.ptx": b"ptx"}, None, "sm_90", b"ptx"),
    ("rocdl", {"kernels.hsaco": b"hsaco"}, None, "gfx942", b"hsaco"),
])
def test_device_image(kind, files, cubin_arch, device, want):
    """The one rule by which the JIT and a loaded artifact pick the GPU code object: the cubin only where it
    was assembled for exactly this chip, else the portable image."""
    assert kernel_files.device_image(kind, files, cubin_arch, device) == want
    assert kernel_files.REQUIRED[kind] in files


def test_table_facts():
    """Facts the compiler relies on: lanes per vendor, matrix cores by family, and sizes that are set."""
    for (kind, arch), chip in CHIPS.items():
        assert kind in KINDS
        if kind == "cpu":
            continue
        assert chip.units > 0 and chip.shared_per_block <= chip.shared_per_unit and chip.gflops > 0
        assert chip.wave == (64 if arch.startswith("gfx9") else 32)
    assert parse_target("nvvm:sm_90").matrix_core == "wgmma" and parse_target("nvvm:sm_80").matrix_core == "mma.sync"
    assert {parse_target(f"rocdl:{a}").matrix_core for a in archs("rocdl")} == {"mfma", "wmma-gfx11", "wmma-gfx12", "none"}
    assert parse_target("nvvm:sm_90").ptx_arch == "sm_90a" and parse_target("nvvm:sm_86").ptx_arch == "sm_86"
    assert parse_target("rocdl:gfx90a").isa_version == 9010


@pytest.mark.parametrize("text, message", [
    ("gpu", "unknown target 'gpu'; targets: cpu, nvvm:<"), ("nvvm:sm_70", "unsupported nvvm architecture 'sm_70'"),
    ("rocdl:gfx000", "unsupported rocdl architecture"), ("cpu:", "expected cpu or cpu:<llvm cpu name>"),
    ("cpu:a b", "expected cpu or cpu:<llvm cpu name>")])
def test_bad_target(text, message):
    with pytest.raises(OpenPrimError, match=message.replace("(", r"\(").replace("<", "<")):
        parse_target(text)


@pytest.mark.parametrize("target, device, ok", [
    ("nvvm:sm_80", "sm_80", True), ("nvvm:sm_80", "sm_90", True), ("nvvm:sm_86", "sm_80", False),
    ("nvvm:sm_90", "sm_90", True), ("nvvm:sm_90", "sm_100", False),   # sm_90a code: sm_90 only
    ("rocdl:gfx942", "gfx942", True), ("rocdl:gfx942", "gfx90a", False)])
def test_runs_on(target, device, ok):
    why = parse_target(target).runs_on(device)
    assert (why is None) == ok and (ok or f"but the GPU is {device}" in why)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 is an LLVM CPU of x86_64 hosts")
def test_cpu_mcpu(tmp_path):
    """cpu:x86-64 generates baseline x86-64 code: the manifest records it, and it runs here."""
    rng = np.random.default_rng(0)
    g = Graph(layout="NHWC")
    w = rng.standard_normal((4, 3, 3, 5))
    x = g.input("x", (1, 6, 7, 5))
    g.output(g.relu(g.conv2d(x, g.param("w", w), padding=1)))
    path = str(tmp_path / "net.oprim")
    info = openprim.compiler.save(g, path, target="cpu:x86-64")
    assert info["target"] == "cpu:x86-64" and info["cpu"] == "x86-64"
    with zipfile.ZipFile(path) as z:
        assert json.loads(z.read("manifest.json"))["plan"]["target"] == "cpu:x86-64"
    xv = rng.standard_normal((1, 6, 7, 5))
    out = np.asarray(openprim.runtime.load(path)(xv.astype(np.float32)), np.float64)
    xp = np.pad(xv, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((1, 6, 7, 4))
    for r in range(3):
        for s in range(3):
            want += np.einsum("nhwc,kc->nhwk", xp[:, r:r + 6, s:s + 7], w[:, r, s, :])
    np.testing.assert_allclose(out, np.maximum(want, 0), rtol=1e-5, atol=1e-5 * np.abs(want).max())

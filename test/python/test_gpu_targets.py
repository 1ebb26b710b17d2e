"""GPU targets without a GPU: the test networks compiled for nvvm and rocdl into .oprim artifacts, every
launch checked against the code object (its function is there, with registers and the chip's wavefront
size); refused artifacts, loading without the GPU, and `openprim inspect`, each with one-line errors."""
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from openprim import cli, compiler
from openprim.backends.rocdl import compiler as rocdl
from openprim.base.errors import OpenPrimError
from openprim.base.target import parse_target
from openprim.pyfrontend import Graph
from openprim.plan import build_plan
from openprim.runtime import artifact, load
from openprim.runtime.codeobject import amdgpu_kernels, amdgpu_target, cubin_kernels, ptx_kernels
from openprim.runtime.device import DeviceError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import mobilenetv2  # noqa: E402
import resnet  # noqa: E402

NETS = {"resnet18": lambda: resnet.build(depth=18, size=32, classes=10),
        "mobilenetv2": lambda: mobilenetv2.build(size=32, classes=10, width=0.5)}
WAVEFRONT = {"rocdl:gfx90a": 64, "rocdl:gfx942": 64, "rocdl:gfx1100": 32}


@pytest.fixture(scope="module")
def amdgpu_toolchain():
    try:
        import llvmlite  # noqa: F401
        rocdl.ld_lld(), rocdl.device_libs()
    except (ImportError, OpenPrimError) as e:
        pytest.skip(f"AMDGPU toolchain incomplete: {e}")


def save(graph, path, target, capsys, what):
    info = compiler.save(graph, str(path), target)
    with capsys.disabled():
        print(f"\n{what} for {target}: compiled in {info['seconds']:.1f} s, {len(launches(info['plan']))} launches")
    with zipfile.ZipFile(path) as z:
        return info["plan"], {n: z.read(n) for n in z.namelist()}


def launches(plan) -> list[dict]:
    return [launch for step in plan["steps"] for launch in plan["kernels"][step["kernel"]]["launches"]]


def launched(plan) -> set[str]:
    return {launch["function"] for launch in launches(plan)}


@pytest.mark.slow
@pytest.mark.parametrize("target", WAVEFRONT)
@pytest.mark.parametrize("net", NETS)
def test_rocdl_network(amdgpu_toolchain, tmp_path, capsys, net, target):
    plan, files = save(NETS[net](), tmp_path / "net.oprim", target, capsys, net)
    hsaco = files["kernels.hsaco"]
    assert amdgpu_target(hsaco).endswith(parse_target(target).arch)
    kernels = {k["name"]: k for k in amdgpu_kernels(hsaco)}
    for name in launched(plan):
        assert name in kernels, f"launched {name} is not in the code object"
        assert kernels[name]["vgpr_count"] > 0
        assert kernels[name]["wavefront_size"] == WAVEFRONT[target]


@pytest.mark.slow
@pytest.mark.parametrize("net", NETS)
def test_nvvm_network(tmp_path, capsys, net):
    plan, files = save(NETS[net](), tmp_path / "net.oprim", "nvvm:sm_90", capsys, net)
    ptx = files["kernels.ptx"].decode()
    assert ".target sm_90" in ptx
    assert launched(plan) <= {k["name"] for k in ptx_kernels(ptx)}
    if shutil.which("ptxas"):
        cubin = {k["name"]: k for k in cubin_kernels(files["kernels.cubin"])}
        for name in launched(plan):
            assert cubin[name]["registers"] > 0


def small_graph():
    g = Graph(layout="NCHW", dtype="f32")
    x = g.input("x", (1, 3, 8, 8))
    w = g.param("w", np.random.default_rng(0).standard_normal((4, 3, 3, 3)))
    g.output(g.softmax(g.flatten(g.global_avg_pool(g.relu(g.conv2d(x, w, padding=1))))))
    return g


@pytest.mark.parametrize("dtype,target,mma", [
    ("bf16", "nvvm:sm_80", r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32"),
    ("f32", "nvvm:sm_90", r"mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32"),
    ("bf16", "nvvm:sm_90", r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.bf16\.bf16")])
def test_nvvm_tensor_cores(tmp_path, capsys, monkeypatch, dtype, target, mma):
    """bf16 (and f32 as TF32, opted in) convolutions and matmuls on tensor cores: the PTX has the mma of
    the type and chip (sm_90: warpgroup MMA), each launch is in it, and ptxas (when installed)
    assembles it."""
    monkeypatch.setenv("OPENPRIM_ALLOW_TF32", "1")
    rng = np.random.default_rng(0)
    g = Graph(layout="NHWC", dtype=dtype)
    y = g.relu(g.conv2d(g.input("x", (2, 9, 9, 64)), g.param("w", rng.standard_normal((64, 3, 3, 64))), padding=1))
    # a matmul of 162 rows (2 rows, a flattened batch, would be gemv_gpu's: no tile computed in vain)
    g.output(g.matmul(g.reshape(y, (2 * 9 * 9, 64)), g.param("m", rng.standard_normal((64, 24)))))
    plan, files = save(g, tmp_path / "mma.oprim", target, capsys, f"{dtype} conv + matmul")
    ptx = files["kernels.ptx"].decode()
    bodies = {entry.split("(", 1)[0]: entry for entry in ptx.split(".visible .entry ")[1:]}
    assert len(launched(plan)) == 2 and all(re.search(mma, bodies[name]) for name in launched(plan)), launched(plan)
    if shutil.which("ptxas"):
        cubin = {k["name"]: k for k in cubin_kernels(files["kernels.cubin"])}
        assert all(cubin[name]["registers"] > 0 for name in launched(plan))


def test_wgmma_launch_plan(tmp_path, capsys, monkeypatch):
    """A wgmma launch passes TMA tensor maps for the runtime to encode (the buffer, its shape and the box,
    outermost first) and asks for more dynamic shared memory than the 48 KB default."""
    from openprim.kernels.nvidia.wgmma import CONFIGS, smem_bytes
    from openprim.solvers import SOLVERS
    monkeypatch.setattr(SOLVERS["conv_implicit_gemm_wgmma"], "default_params", lambda p, target: {"tile": 1})
    rng = np.random.default_rng(0)
    g = Graph(layout="NHWC", dtype="f16")
    g.output(g.conv2d(g.input("x", (2, 14, 14, 64)), g.param("w", rng.standard_normal((256, 3, 3, 64))), padding=1))
    plan, _ = save(g, tmp_path / "wg.oprim", "nvvm:sm_90", capsys, "f16 conv on wgmma")
    launch, = launches(plan)
    maps = [v for kind, v in launch["args"] if kind == "tensormap"]
    assert [(m["memory"], m["shape"], m["box"], m["dtype"], m["swizzle"]) for m in maps] == [
        (["arg", 0], [2, 14, 14, 64], [1, 8, 16, 64], "f16", 128),  # pixel box: 8 x 16 covers 14 x 14
        (["arg", 1], [3, 3, 64, 256], [1, 1, 64, 64], "f16", 128)]
    assert launch["shared"] == smem_bytes(CONFIGS[1], 9) > 48 * 1024 and launch["block"] == [256, 1, 1]
    capsys.readouterr()
    assert cli.main(["inspect", str(tmp_path / "wg.oprim")]) == 0
    assert f"block=(256,1,1) dynamic shared {launch['shared']} B tma[1x8x16x64] tma[1x1x64x64]" in capsys.readouterr().out


@pytest.mark.parametrize("target", ["nvvm:sm_90", "rocdl:gfx942"])
def test_nchw_conv_layout_keep(target):
    """layout=keep: an NCHW convolution (grouped, strided, padded, with a residual and relu) compiles to
    the SIMT implicit GEMM reading and writing NCHW in place: one launch, in the code object (where the
    target's toolchain is installed), and no transpose kernels; the default layout runs it in NHWC
    between transposes."""
    rng = np.random.default_rng(0)
    g = Graph(layout="NCHW")
    y = g.conv2d(g.input("x", (2, 16, 9, 7)), g.param("w", rng.standard_normal((32, 4, 3, 3))), stride=(2, 1),
                 padding=1, groups=4)
    g.output(g.relu(g.add(y, g.input("r", (2, 32, 5, 7)))))
    module = compiler.lower(g, target, layout="keep")
    plan, _ = build_plan(module, parse_target(target))
    assert [s["kernel"] for s in plan["steps"]] == ["conv2d_0"], plan["steps"]
    default, _ = build_plan(compiler.lower(g, target), parse_target(target))
    assert [s["kernel"].split("_")[0] for s in default["steps"]].count("transpose") == 3, default["steps"]
    if parse_target(target).kind == "nvvm":
        functions = {k["name"] for k in ptx_kernels(compiler.kernel_files(module, target)["kernels.ptx"].decode())}
    else:
        try:
            functions = {k["name"] for k in amdgpu_kernels(compiler.kernel_files(module, target)["kernels.hsaco"])}
        except OpenPrimError as e:  # no ld.lld / device libraries here: the plan was still checked
            pytest.skip(f"AMDGPU toolchain incomplete: {e}")
    assert launched(plan) <= functions and not any("transpose" in f for f in functions), functions


@pytest.fixture(scope="module")
def nvvm_artifact(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("nvvm") / "small.oprim")
    compiler.save(small_graph(), path, "nvvm:sm_90")
    return path


def rewritten(src, dst, **manifest_changes):
    """A copy of the artifact with manifest fields changed (a consistent zip: only the content is wrong)."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for name in z.namelist():
            data = z.read(name)
            if name == "manifest.json":
                data = json.dumps({**json.loads(data), **manifest_changes}).encode()
            out.writestr(name, data)
    return str(dst)


def one_line_error(excinfo, *words):
    msg = str(excinfo.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_truncated_artifact(nvvm_artifact, tmp_path):
    path = tmp_path / "truncated.oprim"
    path.write_bytes(open(nvvm_artifact, "rb").read()[:-1000])
    with pytest.raises(OpenPrimError) as e:
        load(str(path))
    one_line_error(e, "truncated.oprim", "not a valid OpenPrim artifact")


@pytest.mark.parametrize("target", ["rocdl:gfx942", "cpu"])
def test_target_of_another_kind(nvvm_artifact, tmp_path, target):
    path = rewritten(nvvm_artifact, tmp_path / "edited.oprim", target=target)
    with pytest.raises(OpenPrimError) as e:
        artifact.read(path)
    one_line_error(e, "edited.oprim", "missing kernels." + ("hsaco" if target != "cpu" else "so"))


def test_load_without_gpu(nvvm_artifact):
    try:
        load(nvvm_artifact)
    except DeviceError as e:
        assert "\n" not in str(e), str(e)
    else:
        pytest.skip("this machine has an NVIDIA GPU")


def openprim_cli(*args):
    return subprocess.run([sys.executable, "-m", "openprim.cli", *args], capture_output=True, text=True)


def test_cli_run_without_gpu(nvvm_artifact):
    r = openprim_cli("run", nvvm_artifact, "--repeat", "0")
    if r.returncode == 0:
        pytest.skip("this machine has an NVIDIA GPU")
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("openprim: error: "), r.stderr


def test_cli_inspect_refuses(nvvm_artifact, tmp_path):
    path = tmp_path / "truncated.oprim"
    path.write_bytes(open(nvvm_artifact, "rb").read()[:3000])
    r = openprim_cli("inspect", str(path))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "not a valid OpenPrim artifact" in r.stderr, r.stderr


def inspect(path, capsys):
    assert cli.main(["inspect", path]) == 0
    return capsys.readouterr().out


def test_inspect_nvvm(nvvm_artifact, capsys):
    out = inspect(nvvm_artifact, capsys)
    assert "target nvvm:sm_90" in out and "input x: f32[1, 3, 8, 8]" in out and "output 0: f32[1, 4]" in out
    assert "scratch" in out and "arena" in out and "naive" in out
    plan = artifact.read(nvvm_artifact)[0]["plan"]
    for name in launched(plan):
        assert f"-> {name} grid=(" in out
        if shutil.which("ptxas"):
            assert f"  {name}: registers " in out and f"  {name}: registers None" not in out
        else:
            assert f"  {name}: shared " in out


def test_inspect_rocdl(amdgpu_toolchain, tmp_path, capsys):
    path = str(tmp_path / "small.oprim")
    compiler.save(small_graph(), path, "rocdl:gfx1100")
    out = inspect(path, capsys)
    for name in launched(artifact.read(path)[0]["plan"]):
        assert f"  {name}: sgpr " in out and f"-> {name} grid=(" in out
    assert "wavefront 32" in out and "vgpr " in out and "lds " in out

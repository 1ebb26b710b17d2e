"""`openprim profile` (driver/profile_command.py, runtime/profile.py): every kernel of a compiled network timed.

On the CPU: a small network (a convolution, a grouped strided one, a pool, a matmul, a softmax) compiled into an
.oprim artifact and profiled through the command (an artifact, a model file) and the Python API; a step per plan
step, times positive, shares summing to 1, a convolution's FLOPs exactly 2 N K C R S OH OW / groups, the JSON;
a missing or corrupt artifact is one error line. The arithmetic (gaps, medians) and the table on made-up times.
The GPU path (timing events around each launch, no graph replay) against the stand-in CUDA driver of
test_device_arrays.py. The compile-time warning of layers left on slow kernels where a GPU has matrix cores.

    python -m pytest test/python/test_profile.py -q
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import openprim
from openprim import cli, compiler
from openprim.passes.slow_fallbacks import SlowFallbackWarning
from openprim.profile_command import table
from openprim.pyfrontend import Graph
from openprim.runtime import artifact, load
from openprim.runtime.profile import Profile, profile, step_stats, summarize

MODEL = """
import numpy as np
from openprim.pyfrontend import Graph


def build(batch=1):
    g = Graph(layout="NCHW")
    rng = np.random.default_rng(0)
    y = g.relu(g.conv2d(g.input("x", (batch, 3, 16, 16)), g.param("w1", rng.standard_normal((16, 3, 3, 3))),
                        padding=1))
    y = g.conv2d(y, g.param("w2", rng.standard_normal((32, 8, 3, 3))), stride=2, padding=1, groups=2)
    y = g.flatten(g.global_avg_pool(g.max_pool2d(y, 2)))
    g.output(g.softmax(g.matmul(y, g.param("fc", rng.standard_normal((32, 10))))))
    return g
"""
# The two convolutions: (N, K, C, R, S, OH, OW, groups) -> 2 N K C R S OH OW / groups multiply-adds x 2
CONVS = [(1, 16, 3, 3, 3, 16, 16, 1), (1, 32, 16, 3, 3, 8, 8, 2)]


def conv_flops(n, k, c, r, s, oh, ow, groups):
    return 2 * n * k * c * r * s * oh * ow // groups


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(model file, its .oprim artifact, the artifact's plan)."""
    d = tmp_path_factory.mktemp("profile")
    path, art = d / "tiny.py", d / "tiny.oprim"
    path.write_text(MODEL)
    assert cli.main(["compile", str(path), "-o", str(art)]) == 0
    manifest, _, _ = artifact.read(str(art))
    return str(path), str(art), manifest["plan"]


def _cli(capsys, *argv):
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def check_report(report: dict, plan: dict, runs: int):
    """What every profile of the tiny model satisfies (a Profile's to_dict(), or the JSON)."""
    steps = report["steps"]
    assert len(steps) == len(plan["steps"]) and report["runs"] == runs
    assert [s["kernel"] for s in steps] == [s["kernel"] for s in plan["steps"]]
    assert all(s["time_us"] > 0 and s["launches"] == 1 for s in steps), steps
    assert sum(s["share"] for s in steps) == pytest.approx(1.0)
    assert 0 < report["kernel_us"] <= report["total_us"] <= report["call_us"] and report["gap_us"] >= 0
    convs = [s for s in steps if s["op"] == "conv2d"]
    assert [s["flops"] for s in convs] == [conv_flops(*c) for c in CONVS], convs
    assert all(s["solver"] and s["problem"].startswith("conv2d-") and "tiny.py:" in s["loc"] for s in convs)
    for s in steps:   # bytes: the step's arguments' buffers
        args = plan["steps"][s["index"]]["args"]
        assert s["bytes"] == sum(int(np.prod(plan["values"][a]["shape"])) * 4 for a in args)
        assert s["gbps"] == pytest.approx(s["bytes"] / s["time_us"] / 1e3)
        assert s["peak_fraction"] is None and s["bandwidth_fraction"] is None   # the CPU: no peak known
    assert report["slowest"] == [s["index"] for s in sorted(steps, key=lambda s: -s["time_us"])[:3]]


def test_profile_an_artifact(model, capsys, tmp_path):
    _, art, plan = model
    out_json = tmp_path / "profile.json"
    rc, out, err = _cli(capsys, "profile", art, "--runs", "3", "--warmup", "1", "--json", str(out_json))
    assert rc == 0, err
    report = json.loads(out_json.read_text())
    check_report(report, plan, 3)
    assert report["source"] == art and report["target"] == "cpu" and report["device"].startswith("CPU")
    lines = out.splitlines()
    assert lines[0].startswith(f"loaded {art}") and lines[1].startswith("profile on cpu, CPU")
    assert lines[2].split()[:4] == ["#", "op", "solver", "params"]
    table_rows = lines[3:3 + len(plan["steps"])]
    assert [r.split()[0] for r in table_rows] == [str(i) for i in range(len(plan["steps"]))]
    assert any("tiny.py:" in r for r in table_rows)
    assert any(r.endswith("conv2d-1x3x16x16-k16-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-KRSC-f32-relu") for r in table_rows)
    summary = lines[3 + len(plan["steps"])]
    assert summary.startswith("total ") and "kernels" in summary and "gaps" in summary and "slowest: #" in summary
    assert "n/a" in out   # % of peak on the CPU


def test_profile_top(model, capsys):
    _, art, plan = model
    rc, out, _ = _cli(capsys, "profile", art, "--runs", "2", "--warmup", "0", "--top", "2")
    lines = out.splitlines()
    assert rc == 0 and "(2 slowest of" in lines[1]
    times = [float(r.split()[-11]) for r in lines[3:5]]   # the time column, counted from the right
    assert times == sorted(times, reverse=True) and lines[5].startswith("total ")


def test_profile_a_model_file(model, capsys):
    """A model file is compiled first, as `openprim run` does (compile options allowed)."""
    path, _, plan = model
    rc, out, err = _cli(capsys, "profile", path, "--runs", "2", "--target", "cpu", "-D", "batch=1")
    assert rc == 0, err
    assert out.splitlines()[0].startswith(f"compiled {path} for cpu") and "total " in out


def test_python_api(model):
    """runtime.profile.profile on a loaded artifact (no MLIR on that path) and on openprim.compile's
    executable; random inputs by default."""
    path, art, plan = model
    report = profile(load(art), runs=3, warmup=1)
    assert isinstance(report, Profile)
    check_report(report.to_dict(), plan, 3)
    assert report.slowest(1)[0].time_us == max(s.time_us for s in report.steps)
    exe = openprim.compile(path)
    check_report(profile(exe, runs=2, warmup=0).to_dict(), exe.plan, 2)


def test_batch_chunks(rng, monkeypatch):
    """A plan run in chunks of its batch: every step once per chunk, its time and work summed over them."""
    from helpers import Net
    from test_batch_chunks import N, _budget, _net
    _budget(monkeypatch, "f32", 2)
    net = Net(rng, "f32")
    net.g.output(*_net(net)[0])
    exe = openprim.compile(net.g, cache=False)
    chunks = exe.plan["batch_chunks"]
    assert chunks == N // 2
    report = profile(exe, runs=2, warmup=0)
    assert len(report.steps) == len(exe.plan["steps"]) and all(s.launches == chunks for s in report.steps)
    first = next(s for s in report.steps if s.op == "conv2d")   # the strided one, 2 samples a chunk
    assert first.flops == chunks * conv_flops(2, 8, 4, 3, 3, 7, 7, 1)


def test_summarize_gaps_and_medians():
    """Made-up spans: the gap before a call is from the previous call's end (never negative), a step sums its
    calls, every figure is the median over the runs."""
    spans = [[[0, 10], [12, 15], [15, 25]],       # run 0: gaps 2 (before call 1) and 0
             [[5, 25], [24, 27], [30, 31]],        # run 1: an overlap (-1: 0) and a gap of 3
             [[0, 12], [13, 16], [18, 30]]]        # run 2: gaps 1 and 2
    got = summarize(np.array(spans, float), [0, 1, 1], 3)
    np.testing.assert_allclose(got["time"], [12, 13, 0])       # medians of [10, 20, 12] and [13, 4, 15]
    np.testing.assert_allclose(got["gap"], [0, 3, 0])          # step 1: the median of 2+0, 0+3, 1+2
    assert got["total"] == 26 and got["kernels"] == 24 and got["gaps"] == 3   # of 25 26 30, 23 24 27, 2 3 3
    empty = summarize(np.zeros((2, 0, 2)), [], 0)
    assert empty["total"] == 0 and empty["kernels"] == 0
    with pytest.raises(ValueError, match="3 calls timed, 2 steps"):
        summarize(np.array(spans, float), [0, 1], 2)


def test_table_on_made_up_numbers():
    """The table and summary of a GPU-like profile: % of the fp32 peak only for f32 steps (n/a for the others,
    '-' without FLOPs), % of bandwidth for every step, --top K slowest first."""
    def value(nbytes, dtype):
        return {"shape": [nbytes // 2 if dtype == "f16" else nbytes // 4], "dtype": dtype, "storage": "arena"}
    values = [value(5 * 10**6, "f16"), value(5 * 10**6, "f16"), value(2 * 10**6, "f32"), value(2 * 10**6, "f32"),
              value(4 * 10**6, "f16"), value(4 * 10**6, "f16")]
    plan = {"values": values, "steps": [
        {"kernel": "conv2d_0", "args": [0, 1], "op": "conv2d", "solver": "conv_implicit_gemm_wgmma",
         "params": {"tile": 3}, "flops": 2 * 10**9, "loc": "/some/where/model.py:12:5", "problem": "conv2d-P"},
        {"kernel": "matmul_1", "args": [2, 3], "op": "matmul", "solver": "gemm_gpu", "params": {"tile": 3},
         "flops": 10**8},
        {"kernel": "fused_elementwise_2", "args": [4, 5]}]}    # no op recorded: from the kernel's name
    sums = {"time": np.array([100.0, 50.0, 25.0]), "gap": np.array([0.0, 2.5, 2.5])}
    steps = step_stats(plan, sums, [1, 1, 1], 60000.0, 4300.0)
    report = Profile("nvvm:sm_90", "Fake GPU (GPU 0)", 5, steps, 180.0, 175.0, 5.0, graph_us=176.0,
                     peak_gflops=60000.0, peak_gbps=4300.0, notes=["a note"])
    text = table(report).splitlines()
    assert text[0] == "profile on nvvm:sm_90, Fake GPU (GPU 0): median of 5 runs, times per run"
    cells = [line.split() for line in text[2:5]]
    assert cells[0][:7] == ["0", "conv2d", "conv_implicit_gemm_wgmma", "tile=3", "100.0", "57.1%", "0.0"]
    assert cells[0][-7:] == ["20.000", "n/a", "10M", "100.0", "2.3%", "model.py:12:5", "conv2d-P"]   # f16: no peak
    assert cells[1][-6:] == ["2.000", "3.3%", "4M", "80.0", "1.9%", "f32[500000]"]                 # f32: of 60 TFLOP/s
    assert cells[2][1:3] == ["fused_elementwise", "-"]
    assert cells[2][-7:] == ["-", "-", "-", "8M", "320.0", "7.4%", "f16[2000000]"]
    assert text[5] == ("total 180.0 us: kernels 175.0 us (97.2%), gaps 5.0 us (2.8%) over 3 steps; slowest: "
                       "#0 conv2d 100.0 us (57.1%), #1 matmul 50.0 us (28.6%), #2 fused_elementwise 25.0 us (14.3%)")
    assert text[6:] == ["replayed as a graph (as calls run it): 176.0 us per run", "note: a note"]
    top = table(report, top=2).splitlines()
    assert "(2 slowest of 3 steps)" in top[0] and [line.split()[0] for line in top[2:4]] == ["0", "1"]
    json.dumps(report.to_dict())


def test_missing_and_corrupt_artifacts(tmp_path, capsys):
    """One error line, exit status 1, no traceback (cli.main returns instead of raising)."""
    missing = tmp_path / "missing.oprim"
    corrupt = tmp_path / "corrupt.oprim"
    corrupt.write_bytes(b"PK\x03\x04 not a zip archive at all")
    for path, why in ((missing, "no such file"), (corrupt, "not a valid OpenPrim artifact")):
        rc, out, err = _cli(capsys, "profile", str(path))
        assert rc == 1 and out == "" and err.count("\n") == 1, (out, err)
        assert err.startswith(f"openprim: error: {path}: {why}"), err


def test_refusals_before_any_work(model, tmp_path, capsys):
    _, art, _ = model
    rc, out, err = _cli(capsys, "profile", art, "--json", str(tmp_path / "no" / "such" / "dir.json"))
    assert rc == 1 and out == "" and err.startswith("openprim: error: --json ") and "does not exist" in err
    rc, out, err = _cli(capsys, "profile", art, "--precision", "f16")
    assert rc == 1 and "is compiled already: --precision" in err and err.count("\n") == 1


# ---------------------------------------------------------------------------- the GPU path, on a fake driver
@pytest.fixture
def timed_cuda(monkeypatch):
    """test_device_arrays' stand-in driver with a device clock: a launch advances it by its kernel's time
    (mul 10 us, relu_bias 30 us), an event takes the clock's time when recorded."""
    from test_device_arrays import FakeCuda, install

    class TimedCuda(FakeCuda):
        DURATION = {"mul": 0.010, "relu_bias": 0.030}    # ms

        def __init__(self):
            super().__init__()
            self.clock, self.stamps, self.destroyed = 0.0, {}, []

        def cuLaunchKernel(self, f, *args):
            if args[7] not in self.capturing:   # (grid, block, shared bytes, stream, ...)
                self.clock += self.DURATION[f]
            return super().cuLaunchKernel(f, *args)

        def cuEventRecord(self, event, stream):
            self.stamps[event] = self.clock
            return super().cuEventRecord(event, stream)

        def cuEventElapsedTime(self, start, stop):
            return self.ok, self.stamps[stop] - self.stamps[start]

        def cuEventDestroy(self, event):
            self.destroyed.append(event)
            return (self.ok,)

    return install(monkeypatch, TimedCuda())


def test_gpu_launch_spans(timed_cuda, rng):
    """Two timing events around each launch, launched one by one (no graph), every event destroyed; the
    spans are each launch's start and end after the run's first start."""
    from test_device_arrays import _plan
    from openprim.runtime.cuda import CudaDevice
    from openprim.runtime.gpu import GpuExecutable
    plan = {**_plan(), "target": "nvvm:sm_90"}
    w = rng.standard_normal((3, 5, 7)).astype(np.float32)
    exe = GpuExecutable(plan, b"image", w.tobytes(), CudaDevice(0))
    x, s = rng.standard_normal((3, 5, 7)).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    exe(x, s)
    timed_cuda.log.clear()
    spans = exe.launch_spans(runs=2, warmup=1)
    assert spans.shape == (2, 2, 2)
    np.testing.assert_allclose(spans[0], [[0, 0.010], [0.010, 0.040]], atol=1e-12)
    np.testing.assert_allclose(spans[1], spans[0], atol=1e-12)
    kinds = [e[0] for e in timed_cuda.log if e[0] in ("launch", "record", "graph_launch")]
    assert kinds == ["launch"] * 2 + ["record", "launch", "record"] * 4   # warm-up, then 2 runs x 2 launches
    assert len(timed_cuda.destroyed) == 4

    report = profile(exe, [x, s], runs=3, warmup=0)
    assert [s.time_us for s in report.steps] == pytest.approx([10.0, 30.0])
    assert report.total_us == pytest.approx(40.0) and report.gap_us == pytest.approx(0.0, abs=1e-9)
    assert report.graph_us is not None and report.call_us is None
    assert (report.peak_gflops, report.peak_gbps) == (60000.0, 4300.0)
    mul = report.steps[0]   # f32, no FLOPs recorded (a hand-written plan): bytes from its three arguments
    assert mul.bytes == 3 * 105 * 4 and mul.flops is None and mul.peak_fraction is None
    assert mul.bandwidth_fraction == pytest.approx(mul.bytes / 10e-6 / 1e9 / 4300.0)
    assert report.device == "Fake GPU (GPU 0)"


# ---------------------------------------------------------------------------- slow fallbacks at compile time
def _gpu_graph(dtype="f16"):
    """An NCHW convolution of 3 channels (left NCHW with layout='keep': only the SIMT GEMM reads NCHW) and a
    classifier of 10 classes (N = 10: not a multiple of 8 for the matrix cores)."""
    rng = np.random.default_rng(0)
    g = Graph(layout="NCHW", dtype=dtype)
    y = g.relu(g.conv2d(g.input("x", (1, 3, 16, 16)), g.param("w", rng.standard_normal((16, 3, 3, 3))), padding=1))
    y = g.flatten(g.global_avg_pool(y))
    g.output(g.matmul(y, g.param("fc", rng.standard_normal((16, 10)))))
    return g


def _warnings(graph, target, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = compiler.lower(graph, target, **kw)
    return module, [w for w in caught if issubclass(w.category, SlowFallbackWarning)]


def test_slow_fallback_warning():
    """One warning per compile listing both layers (op, problem, location) and why, located at the first
    layer's line; the plan's steps record the solvers and the FLOPs for a GPU target too."""
    graph = _gpu_graph()
    module, caught = _warnings(graph, "nvvm:sm_90", layout="keep")
    assert len(caught) == 1
    text = str(caught[0].message)
    lines = text.splitlines()
    assert lines[0] == ("2 layers of this compile for nvvm:sm_90 (wgmma matrix cores) run on slow fallback "
                        "kernels:"), text
    assert lines[1].startswith("  conv2d conv2d-1x3x16x16-k16-3x3-s1x1-p1x1x1x1-d1x1-g1-NCHW-KCRS-f16-relu at ")
    assert "-> conv_implicit_gemm_gpu, the SIMT GEMM; no matrix-core solver applies [" in lines[1]
    assert "conv_implicit_gemm_mma, conv_implicit_gemm_wgmma" in lines[1] and "needs NHWC" in lines[1]
    assert lines[2].startswith("  matmul gemm-b1-m1-n10-k16-nn-f16-none at ")
    assert "-> gemm_gpu, the SIMT GEMM" in lines[2]
    assert "multiples of 8" in lines[2]
    assert caught[0].filename == __file__ and f"{__file__}:{caught[0].lineno}:" in lines[1]
    from openprim.base.target import parse_target
    from openprim.plan import build_plan
    plan, _ = build_plan(module, parse_target("nvvm:sm_90"))
    conv = next(s for s in plan["steps"] if s["op"] == "conv2d")
    assert conv["solver"] == "conv_implicit_gemm_gpu" and conv["flops"] == conv_flops(1, 16, 3, 3, 3, 16, 16, 1)
    assert "tile" in conv["params"] and conv["problem"].startswith("conv2d-1x3x16x16-k16")


@pytest.mark.parametrize("target,kw,dtype", [("nvvm:sm_90", {}, "f32"), ("cpu", {"layout": "keep"}, "f16"),
                                             ("nvvm:sm_90", {"layout": "keep", "solver": "conv_implicit_gemm_gpu"},
                                              "f16")])
def test_no_slow_fallback_warning(target, kw, dtype):
    """f32 (tensor cores take it only as TF32, by opt-in), the CPU, and a forced solver: no warning; a forced
    convolution solver leaves the matmul to the heuristic, which still warns about it alone."""
    _, caught = _warnings(_gpu_graph(dtype), target, **kw)
    if kw.get("solver"):
        assert len(caught) == 1 and "1 layer of this compile" in str(caught[0].message)
        assert "matmul" in str(caught[0].message) and "conv2d-" not in str(caught[0].message)
    else:
        assert caught == []

"""The differential fuzzer's CI slice (issue 16): fixed seeds of test/fuzzing's generator, each its own test.

Each seed's case (a random graph over the frontend's ops, NCHW/NHWC, f32/f16/bf16) is compiled on the CPU
with the heuristic and with every applicable solver forced, and compared with float64 numpy. `python
scripts/fuzz.py --cases N | --minutes T` runs more; a failure there prints a shrunk, ready-to-paste test.
The tests of the fuzzer itself check that the slice covers every op and CPU solver, and that an injected
wrong answer is found, shrunk to the op that is wrong, and printed as a test that fails.
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test/: the fuzzing package
from fuzzing import check, graphs, refops, shrink  # noqa: E402
from openprim.solvers import SOLVERS  # noqa: E402

SEEDS = range(50)   # about 130 compiles: 1.5 minutes on an idle 2-core machine


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed{s}") for s in SEEDS])
def test_fuzz_case(seed):
    case = graphs.generate(seed)
    solvers, _ = check.variants(case)
    failures = [f for f in (check.fails(case, s) for s in solvers) if f is not None]
    assert not failures, f"{graphs.case_text(case)}:\n" + "\n".join(map(str, failures)) + \
        f"\nshrink and print it: python scripts/fuzz.py --cases 1 --seed {seed}"


def test_slice_covers_every_op_and_cpu_solver():
    cases = [graphs.generate(s) for s in SEEDS]
    drawn = {op for c in cases for op in c.ops()}
    assert drawn == set(graphs.RENDER), f"never drawn: {sorted(set(graphs.RENDER) - drawn)}"
    assert {c.dtype for c in cases} == set(graphs.DTYPES) and {c.layout for c in cases} == set(graphs.LAYOUTS)
    assert {c.compile_layout for c in cases} == {"NHWC", "keep"}
    forced = {s for c in cases for s in check.variants(c)[0]}
    cpu = {name for name, s in SOLVERS.items() if "cpu" in s.targets}
    missing = cpu - forced
    # solvers whose conditions the slice's small random graphs do not meet: covered by test_solvers.py
    # (the packed Winograd ones need 8k input and 16k output channels, f32)
    assert missing <= {"conv_1x1_gemm", "conv_winograd_f2x3", "conv_winograd_f4x3", "conv_winograd_f2x3_packed",
                       "conv_winograd_f4x3_packed"}, f"never forced: {missing}"


def test_generator_is_reproducible():
    assert graphs.generate(7) == graphs.generate(7)
    assert graphs.render(graphs.generate(7)).source == graphs.render(graphs.generate(7)).source
    assert graphs.generate(7) != graphs.generate(8)


def test_injected_bug_is_found_shrunk_and_printed(monkeypatch):
    """A reference that is wrong for relu stands in for a compiler bug: a case with relu among other ops
    fails, shrinks to the relu alone on a small input, and the printed test fails the same way."""
    seed = next(s for s in range(1000) if "relu" in (c := graphs.generate(s)).ops() and len(c.ops()) >= 3)
    monkeypatch.setattr(refops, "relu", lambda x: refops.f64(x) * 0.5)
    failure = check.fails(graphs.generate(seed), "")
    assert failure is not None and failure.kind == "mismatch", failure
    small, tried = shrink.shrink(failure)
    assert small.case.ops() == ["relu"], graphs.case_text(small.case)
    x0 = next(s for s in small.case.steps if s["op"] == "input")["shape"]
    assert sum(x0) < sum(next(s for s in failure.case.steps if s["op"] == "input")["shape"])
    text = shrink.as_test(small)
    namespace = {"__file__": os.path.abspath(__file__), "__name__": "printed"}
    exec(compile(text, "printed_test.py", "exec"), namespace)
    test = next(v for k, v in namespace.items() if k.startswith("test_fuzz_seed_"))
    with pytest.raises(AssertionError, match="out of tolerance|all zeros"):
        test()


def test_record_replay_verify(tmp_path):
    """The GPU path end to end, with CPU artifacts standing in: record a case's variants, run them with
    scripts/gpu_replay.py (the runtime alone), verify them; a wrong output is reported."""
    import subprocess

    import numpy as np
    case = next(c for c in map(graphs.generate, SEEDS) if "conv2d" in c.ops())
    names = check.record(case, "cpu", str(tmp_path))
    assert len(names) == len(check.variants(case)[0]) > 1
    outputs = str(tmp_path / "outputs.npz")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, os.path.join(root, "scripts", "gpu_replay.py"), str(tmp_path), outputs],
                   check=True, capture_output=True)
    assert check.verify(str(tmp_path), outputs) == (len(names), [])
    with np.load(outputs) as z:
        results = {k: z[k] for k in z.files}
    results[f"{names[0]}.out0"] = results[f"{names[0]}.out0"] + 1.0
    np.savez(outputs, **results)
    checked, failures = check.verify(str(tmp_path), outputs)
    assert checked == len(names) and len(failures) == 1 and failures[0].startswith(names[0]), failures


# ------------------------------------------------------------------------------------------------------------
# What the fuzzer found, shrunk: a strict xfail while it is not fixed (a fix makes it pass, then the marker
# goes). fuzz_check compiles like the fuzzer and compares with float64 numpy.

def fuzz_check(build, shape, dtype="f32", **compile_options):
    """Compile the graph that build(g, x) outputs on random data and compare with its float64 reference;
    build returns (graph tensor, reference function of the input)."""
    import numpy as np

    import openprim
    from helpers import assert_close, rounded
    from openprim.pyfrontend import Graph
    g = Graph(layout="NCHW", dtype=dtype)
    data = rounded(np.random.default_rng(1).standard_normal(shape), dtype)
    out, ref = build(g, g.input("x", shape))
    g.output(out)
    got = openprim.compile(g, **compile_options)(data.astype(np.float32))
    assert_close(got, ref(data), dtype, 9)


def test_found_grouped_gemm_one_channel_per_group():
    """Found by the fuzzer (seeds 0, 317, 2064): conv_grouped_gemm was wrong with one output channel per
    group and a 1x1 filter. It no longer applies there (forcing it is a clear error); the heuristic's
    choice is right."""
    import numpy as np

    from openprim.base.errors import OpenPrimError
    w = np.random.default_rng(2).standard_normal((2, 2, 1, 1))

    def build(g, x):
        return g.conv2d(x, g.param("w", w), groups=2), lambda d: refops.conv2d(d, w, groups=2)
    with pytest.raises(OpenPrimError, match="one output channel per group"):
        fuzz_check(build, (1, 4, 5, 7), solver="conv_grouped_gemm", cache=False)
    fuzz_check(build, (1, 4, 5, 7), cache=False)


def test_found_implicit_gemm_nchw_strided_dilated():
    """Found by the fuzzer (seeds 1283, 2415), fixed: NCHW kept, lanes along OW, a border tile whose taps
    cover a span as wide as the vector but not every lane (stride 2) was loaded without its shuffle."""
    import numpy as np
    w = np.random.default_rng(2).standard_normal((1, 1, 1, 3))
    kw = dict(stride=(1, 2), padding=(0, 1, 0, 1), dilation=(1, 2))
    fuzz_check(lambda g, x: (g.conv2d(x, g.param("w", w), **kw), lambda d: refops.conv2d(d, w, **kw)),
               (1, 1, 1, 7), solver="conv_implicit_gemm", layout="keep", cache=False)


def test_found_graph_without_kernels_through_the_artifact(tmp_path, monkeypatch):
    """Found by the fuzzer, fixed: a graph without kernels (its output a reshape of its input) made an
    artifact that the runtime's manifest check rejected, so the compile cache (and save/load) failed."""
    monkeypatch.setenv("OPENPRIM_CACHE_DIR", str(tmp_path))
    fuzz_check(lambda g, x: (g.reshape(x, (4, 23)), lambda d: d.reshape(4, 23)), (4, 23, 1), cache=True)

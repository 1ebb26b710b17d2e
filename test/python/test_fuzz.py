"""The differential fuzzer's CI slice (issue 16): fixed seeds of test/fuzzing's generator, each its own test.

Each seed's case (a random graph over the frontend's ops, NCHW/NHWC, f32/f16/bf16) is compiled on the CPU
with the heuristic and with every applicable solver forced, compared with float64 numpy, and called from 2-4
threads at once (each result compared with a call alone). `python scripts/fuzz.py --cases N | --minutes T`
runs more; a failure there prints a shrunk, ready-to-paste test.
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

SEEDS = range(67)   # about 150 compiles: 1 minute on an idle 2-core machine


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
    cpu = {name for name, s in SOLVERS.items() if "cpu" in s.targets and "fwd" in s.directions}  # backward: test_backward_ops
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


def test_threaded_finds_calls_that_share_memory():
    """check.threaded finds an executable whose calls share their memory (as the CPU executor's one arena
    did): each thread's results are compared with a call alone on the same inputs."""
    import time

    import numpy as np

    class Shared:
        def __init__(self):
            self.arena = np.zeros(64, np.float32)

        def __call__(self, x):
            self.arena[:] = x
            time.sleep(0.002)
            return self.arena * 2

    feeds = [np.arange(64, dtype=np.float32)]
    assert check.threaded(lambda x: x * 2, feeds, "f32", 4) is None
    assert "differs from a call alone" in check.threaded(Shared(), feeds, "f32", 4)
    assert "ValueError: no" in check.threaded(lambda x: (_ for _ in ()).throw(ValueError("no")), feeds, "f32", 2)


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


def test_found_variants_as_a_forced_solver_sees_them():
    """Found by the fuzzer (seeds 10290, 10677), fixed in the fuzzer: prim-select subsamples a strided 1x1
    convolution for its own choice only, so conv_1x1_gemm applies to it unforced but not forced; variants
    looked at the problems unforced and forced a solver that cannot be (a clear error, not a finding)."""
    conv = {"name": "v1", "op": "conv2d", "src": ["x0"], "k": 4, "kernel": (1, 1), "stride": (2, 2),
            "dilation": (1, 1), "padding": (0, 0, 0, 0), "groups": 0, "multiplier": 1, "bias": False,
            "act": ("none", ())}
    case = graphs.Case(1, "f32", "NHWC", "NHWC", [{"name": "x0", "op": "input", "src": [], "shape": (1, 5, 5, 3)},
                                                  conv], ["v1"])
    solvers, _ = check.variants(case)
    assert "conv_1x1_gemm" not in solvers
    assert [f for f in (check.fails(case, s) for s in solvers) if f is not None] == []


def test_found_graph_without_kernels_through_the_artifact(tmp_path, monkeypatch):
    """Found by the fuzzer, fixed: a graph without kernels (its output a reshape of its input) made an
    artifact that the runtime's manifest check rejected, so the compile cache (and save/load) failed."""
    monkeypatch.setenv("OPENPRIM_CACHE_DIR", str(tmp_path))
    fuzz_check(lambda g, x: (g.reshape(x, (4, 23)), lambda d: d.reshape(4, 23)), (4, 23, 1), cache=True)


def _attention_lengths(g, rng, dtype, lengths):
    """One causal attention per length S (q, k, v [1, 2, S, 8] inputs): (feeds, float64 references)."""
    from helpers import rounded
    feeds, want, outs = [], [], []
    for n in lengths:
        q, k, v = (rounded(rng.standard_normal((1, 2, n, 8)), dtype) for _ in range(3))
        outs.append(g.attention(*(g.input(f"{t}{n}", (1, 2, n, 8)) for t in "qkv"), causal=True))
        feeds += [q.astype("float32"), k.astype("float32"), v.astype("float32")]
        want.append(refops.attention(q, k, v, causal=True))
    g.output(*outs)
    return feeds, want


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_found_bf16_causal_attention_short_sequences(dtype):
    """Issue 29, fixed: a bf16 causal attention of 4, 7 or 8 queries did not compile ("cannot reshape array
    of size 70 into shape (7,7)"). prim-decompose's causal mask is a constant of 0 and -inf; MLIR prints a
    small bf16 constant element by element, -inf as 0xFF80, which dialect.to_numpy read as two numbers (0
    and 80). Every length 1-17 in every dtype, against float64."""
    import numpy as np

    import openprim
    from helpers import assert_close
    from openprim.pyfrontend import Graph
    g = Graph(dtype=dtype)
    feeds, want = _attention_lengths(g, np.random.default_rng(3), dtype, range(1, 18))
    for n, got, ref in zip(range(1, 18), openprim.compile(g, target="cpu")(*feeds), want):
        assert_close(got, ref, dtype, what=f"S={n}")


def test_found_bf16_causal_attention_precision_and_torch(tmp_path):
    """The same through precision="bf16" (an fp32 graph) and torch's bf16 scaled_dot_product_attention
    with is_causal=True, and compiled (not run) for nvvm:sm_90 and rocdl:gfx942, which decompose it too
    where the head dim is small."""
    import numpy as np

    import openprim.compiler
    from helpers import assert_close
    from openprim.pyfrontend import Graph
    g = Graph(dtype="f32")
    feeds, want = _attention_lengths(g, np.random.default_rng(4), "bf16", range(1, 18))
    for n, got, ref in zip(range(1, 18), openprim.compile(g, target="cpu", precision="bf16")(*feeds), want):
        assert_close(got, ref, "bf16", what=f"S={n}")
    for target in ("nvvm:sm_90", "rocdl:gfx942"):
        g = Graph(dtype="bf16")
        _attention_lengths(g, np.random.default_rng(5), "bf16", (4, 7, 8))
        openprim.compiler.save(g, str(tmp_path / "attention.oprim"), target=target)
    torch = pytest.importorskip("torch")
    from openprim.torch_backend import compile_module

    class Causal(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    rng = np.random.default_rng(6)
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 2, 7, 8), np.float32)).bfloat16() for _ in range(3))
    got = compile_module(Causal(), (q, k, v))(q, k, v).float().numpy()
    assert_close(got, refops.attention(*(t.float().numpy() for t in (q, k, v)), causal=True), "bf16")

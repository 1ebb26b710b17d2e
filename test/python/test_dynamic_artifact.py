"""One .oprim artifact for a range of sizes (runtime/dynamic.py, format version 5): pooled weights, buckets
made on first use, batch split or padded, sequences padded with their values; the CLI's --dynamic for .py
and ONNX models; refusals and corrupt files."""
from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
import warnings
import zipfile

import numpy as np
import pytest

from helpers import seeded_cnn
from openprim.base.errors import OpenPrimError
from openprim.runtime import artifact, load
from openprim.runtime.buckets import BatchRange
from openprim.runtime.dynamic import POOL_ALIGN, pool_weights

torch = pytest.importorskip("torch")
from openprim import dynamic_batch  # noqa: E402 - after the skip: imports MLIR
from openprim.torch_backend import _exported, compile_module  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def _plan(values: list[tuple[int, int]], size: int, launch_offsets=()) -> dict:
    """A plan with f32 weight values (offset, count) in a blob of `size` bytes; a GPU kernel whose launch
    reads the weights at launch_offsets (the last through a tensor map)."""
    plan = {"values": [{"shape": [n], "dtype": "f32", "storage": "weight", "offset": o} for o, n in values],
            "weights_bytes": size}
    if launch_offsets:
        args = [["weight", o] for o in launch_offsets[:-1]] + [["tensormap", {"memory": ["weight", launch_offsets[-1]]}]]
        plan["kernels"] = {"k": {"launches": [{"function": "f", "args": args}]}}
    return plan


def test_pool_weights_stores_each_segment_once():
    """Two buckets' blobs: a value both have (at other offsets), one each of their own, and a GPU constant
    table past the values read by a launch and a tensor map. The pool holds each distinct segment once, at
    its offset modulo POOL_ALIGN; every rewritten offset reads the bytes the old one read."""
    rng = np.random.default_rng(0)
    shared, own_a, own_b, table = (rng.standard_normal(n).astype(np.float32).tobytes() for n in (16, 8, 24, 4))
    blob_a = shared + own_a + bytes(64) + table + bytes(48)                  # table at 160
    blob_b = own_b + bytes(32) + shared                                      # shared at 128
    plan_a = _plan([(0, 16), (64, 8)], len(blob_a), launch_offsets=(160, 164, 64))
    plan_b = _plan([(0, 24), (128, 16)], len(blob_b))
    (new_a, new_b), pool = pool_weights([(plan_a, blob_a), (plan_b, blob_b)])
    assert new_a["weights_bytes"] == new_b["weights_bytes"] == len(pool) and len(pool) % 64 == 0
    assert pool.count(shared) == 1 and len(pool) < len(blob_a) + len(blob_b)
    for old, new, blob in ((plan_a, new_a, blob_a), (plan_b, new_b, blob_b)):
        for v, w in zip(old["values"], new["values"]):
            assert pool[w["offset"]:w["offset"] + 4 * v["shape"][0]] == blob[v["offset"]:v["offset"] + 4 * v["shape"][0]]
            assert w["offset"] % POOL_ALIGN == v["offset"] % POOL_ALIGN
    args = new_a["kernels"]["k"]["launches"][0]["args"]
    assert pool[args[0][1]:args[0][1] + 4] == blob_a[160:164] and pool[args[1][1]:args[1][1] + 4] == blob_a[164:168]
    assert args[2][1]["memory"][1] == new_a["values"][1]["offset"]
    assert plan_a["values"][0]["offset"] == 0 and plan_a["kernels"]["k"]["launches"][0]["args"][0] == ["weight", 160]
    with pytest.raises(OpenPrimError, match="offset 999 lies outside every segment"):
        pool_weights([(_plan([(0, 4)], 16, launch_offsets=(999, 0)), bytes(16))])


def _relative(got, want) -> float:
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


def test_dynamic_batch_artifact(tmp_path):
    """compile_module(..., dynamic_batch=(3, 12)).save: one file, buckets 3, 4, 8, 12; the runtime alone runs
    any batch in the range (on the CPU split into buckets: 7 = 4 + 3, 5 = 4 + 1 padded to 3) against float64
    PyTorch, and makes only the buckets that calls used."""
    m = seeded_cnn()
    path = str(tmp_path / "cnn.oprim")
    info = compile_module(m, (torch.randn(2, 4, 11, 9),), dynamic_batch=(3, 12)).save(path)
    assert info["buckets"] == [3, 4, 8, 12] and info["spec"]["inputs"] == {"input": 0} and info["spec"]["outputs"] == [0]
    assert info["pool_bytes"] < info["bucket_bytes"]
    exe = load(path)
    assert exe.buckets == [3, 4, 8, 12] and exe.executables == {}
    for n in (7, 5, 12, 3):
        x = torch.randn(n, 4, 11, 9)
        with torch.no_grad():
            want = copy.deepcopy(m).double()(x.double()).numpy()
        got = exe(x.numpy())
        assert got.shape == want.shape and _relative(got, want) < 1e-5, n
    assert sorted(exe.executables) == [3, 4, 12]
    on_gpu = type("OnGpu", (), {"__cuda_array_interface__": {}})()
    with pytest.raises(OpenPrimError, match="a dynamic artifact's call takes numpy arrays"):
        exe(on_gpu)
    with pytest.raises(OpenPrimError, match=r"batch 13 is outside the compiled range \[3, 12\]"):
        exe(np.zeros((13, 4, 11, 9), np.float32))
    with pytest.raises(OpenPrimError, match=r"input 'input' must have shape \(5, 4, 11, 9\) \(at batch 5; any in \[3, 12\]\), got \(5, 4, 11, 8\)"):
        exe(np.zeros((5, 4, 11, 8), np.float32))


def test_dynamic_sequence_artifact(tmp_path):
    """A Hugging Face BERT for lengths 4-32 in one file, padded with ids 0 and mask 0: equal to eager at
    lengths between the buckets and on them, outputs cut back to the call's length."""
    pytest.importorskip("transformers")
    import language_models
    model = language_models.get("bert", "small", layers=1)
    feeds = language_models.example_input(model, batch=2, seq=12)
    run = compile_module(language_models.LastHidden(model).eval(), (feeds["input_ids"], feeds["attention_mask"]),
                         dynamic_sequence=(4, 32), sequence_padding={"input_ids": 0, "attention_mask": 0})
    path = str(tmp_path / "bert.oprim")
    info = run.save(path)
    assert info["spec"]["padding"] == {"input_ids": 0, "attention_mask": 0} and info["buckets"] == [4, 8, 16, 32]
    exe = load(path)
    for seq in (5, 13, 32):
        inputs = language_models.example_input(model, batch=2, seq=seq, seed=seq)
        got = exe(inputs["input_ids"].numpy(), inputs["attention_mask"].numpy())
        want = language_models.reference(model, inputs)
        assert got.shape == want.shape and _relative(got, want) < 1e-4, seq


def test_dynamic_artifact_refusals(tmp_path):
    """What one artifact cannot serve is refused before anything is written, saying why."""
    def centered(x):
        return torch.relu(x - x.mean(0, keepdim=True))
    with pytest.raises(OpenPrimError, match=r"padding or splitting the batch would change the results"):
        compile_module(centered, (torch.randn(2, 5),), dynamic_batch=8).save(str(tmp_path / "a.oprim"))

    def pooled(x):
        return x - x.mean(1, keepdim=True)
    with pytest.raises(OpenPrimError, match="differs when 7 is padded to 8: is every padded position masked"):
        compile_module(pooled, (torch.randn(2, 5, 3),), dynamic_sequence=(4, 16),
                       sequence_padding={"x": 0.0}).save(str(tmp_path / "b.oprim"))
    build = lambda n: _exported(torch.nn.Linear(3, 2), (torch.randn(4, 3),))[1]   # noqa: E731 - the size is ignored
    with pytest.raises(OpenPrimError, match="no input changes with it"):
        dynamic_batch.save(build, str(tmp_path / "c.oprim"), "cpu", BatchRange(1, 4), "batch")
    with pytest.raises(OpenPrimError, match="has one size"):
        dynamic_batch.save(build, str(tmp_path / "c.oprim"), "cpu", BatchRange(4, 4), "batch")
    swapped = lambda n: _exported(torch.nn.Linear(n, 2), (torch.randn(3, n),))[1]   # noqa: E731 - dim 1 varies
    with pytest.raises(OpenPrimError, match=r"it is not dim 0 of \{'input': 1\}.*needs a padding value"):
        dynamic_batch.save(swapped, str(tmp_path / "d.oprim"), "cpu", BatchRange(1, 4), "batch")
    assert not any(p.suffix == ".oprim" for p in tmp_path.iterdir())


def _rewrite(path: str, edit) -> None:
    """The artifact at `path` with its members passed through edit(name, bytes) -> bytes."""
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(name, edit(name, data))


def test_corrupt_dynamic_artifact(tmp_path):
    """A bucket's manifest edited, its kernels swapped for another bucket's, or the buckets list changed:
    each refused with one line at load, before any bucket runs."""
    path = str(tmp_path / "cnn.oprim")
    compile_module(seeded_cnn(), (torch.randn(2, 4, 11, 9),), dynamic_batch=(1, 4)).save(path)
    artifact.read(path)
    cases = {
        "bucket manifest edited": (lambda n, d: d.replace(b'"arena_bytes": ', b'"arena_bytes": 1') if n == "bucket-2/manifest.json" else d,
                                   r"bucket-2/manifest.json is not the one"),
        "kernels swapped": (lambda n, d, k={}: k.setdefault("so", d) if n.endswith("kernels.so") else d,
                            r"is not the one this manifest was written with"),
        "buckets changed": (lambda n, d: json.dumps({**json.loads(d), "buckets": [1, 4]}).encode() if n == "manifest.json" else d,
                            r"buckets \[1, 4\] are not those of the range, \[1, 2, 4\]"),
    }
    for what, (edit, message) in cases.items():
        broken = str(tmp_path / "broken.oprim")
        with open(path, "rb") as src, open(broken, "wb") as dst:
            dst.write(src.read())
        _rewrite(broken, edit)
        with pytest.raises(OpenPrimError, match=message):
            load(broken)


def _onnx_cnn(path: str) -> None:
    """seeded_cnn as ONNX with the batch a named dimension 'N'."""
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(seeded_cnn(), (torch.randn(2, 4, 11, 9),), f, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    with open(path, "wb") as out:
        out.write(f.getvalue())


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "openprim.cli", *args], cwd=cwd, capture_output=True, text=True)


def test_cli_dynamic_onnx(tmp_path):
    """`openprim compile m.onnx --dynamic N=1:4`: the ONNX model's named batch dimension compiled into one
    artifact; `openprim run` runs it at batch 3 (not a bucket) like ONNX Runtime; inspect lists the buckets.
    A dimension the model does not have, a malformed range and --pad without --dynamic: one line each."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    _onnx_cnn(str(tmp_path / "cnn.onnx"))
    r = _cli("compile", "cnn.onnx", "--dynamic", "N=1:4", "-o", "cnn.oprim", cwd=tmp_path)
    assert r.returncode == 0 and "dynamic N in [1, 4], buckets [1, 2, 4]" in r.stdout, r.stderr
    x = np.random.default_rng(3).standard_normal((3, 4, 11, 9)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = _cli("run", "cnn.oprim", "--input", "x.npy", "-o", "y.npy", "--repeat", "1", cwd=tmp_path)
    assert r.returncode == 0 and "dynamic batch in [1, 4]: 3 buckets" in r.stdout, r.stderr
    want = ort.InferenceSession(str(tmp_path / "cnn.onnx")).run(None, {"x": x})[0]
    assert _relative(np.load(tmp_path / "y.npy"), want) < 1e-5
    r = _cli("inspect", "cnn.oprim", cwd=tmp_path)
    assert r.returncode == 0 and "dynamic batch 'N' in [1, 4], padded by repeating rows, split into buckets" in r.stdout
    assert "bucket 4: f32[4, 4, 11, 9] -> f32[4, 3]" in r.stdout
    for args, message in ((("--dynamic", "M=1:4"), r"dims names \['M'\], not a named dimension of any input \(the model's: \['N'\]\)"),
                          (("--dynamic", "N=1"), "--dynamic 'N=1': expected NAME=LOW:HIGH"),
                          (("--pad", "x=0"), "--pad applies only with --dynamic")):
        r = _cli("compile", "cnn.onnx", *args, "-o", "z.oprim", cwd=tmp_path)
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
        assert __import__("re").search(message, r.stderr), r.stderr


def test_gpu_dynamic_artifact_validates(tmp_path):
    """For an NVIDIA target (compiled here, not run): every bucket's plan, launches included, validates
    against the pooled weights."""
    m = seeded_cnn()
    path = str(tmp_path / "cnn.oprim")
    info = dynamic_batch.save(lambda b: _exported(m, (torch.randn(b, 4, 11, 9),))[1], path, "nvvm:sm_90",
                              BatchRange(1, 4), "batch")
    assert info["spec"]["split"] is False      # a GPU pads into one bucket
    manifest, buckets, pool = artifact.read(path)
    assert manifest["version"] == artifact.DYNAMIC_VERSION and sorted(buckets) == [1, 2, 4]
    assert all(inner["plan"]["weights_bytes"] == len(pool) for inner, _ in buckets.values())


TINY_MODEL = '''
import numpy as np
from openprim.pyfrontend import Graph


def build(n=1):
    rng = np.random.default_rng(0)
    g = Graph()
    x = g.input("x", (n, 3, 10, 10))
    y = g.relu(g.conv2d(x, g.param("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)), padding=1))
    g.output(g.conv2d(y, g.param("w2", rng.standard_normal((4, 8, 1, 1)).astype(np.float32))))
    return g
'''


def test_cli_dynamic_explain_and_tune(tmp_path):
    """explain --dynamic: each bucket's layers with their choice and a tally per bucket; tune --dynamic
    measures every bucket's layers into the database that explain then reads; compile --dynamic of the
    .py model (NAME a build() keyword) runs any size like the model compiled at that size."""
    (tmp_path / "tiny.py").write_text(TINY_MODEL)
    r = _cli("explain", "tiny.py", "--dynamic", "n=1:4", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "dynamic n: buckets [1, 2, 4] on cpu" in r.stdout and "n=4: 2 distinct layers" in r.stdout
    assert r.stdout.count("solvers at n=") == 3 and "conv2d-4x3x10x10-k8-3x3" in r.stdout
    env_db = str(tmp_path / "tune.sqlite")
    r = _cli("tune", "tiny.py", "--dynamic", "n=1:2", "--budget", "1", "--db", env_db, cwd=tmp_path)
    assert r.returncode == 0 and "tuned 4 distinct layers of tiny.py over the buckets [1, 2] of n" in r.stdout, r.stderr
    r = _cli("compile", "tiny.py", "--dynamic", "n=1:4", "-o", "tiny.oprim", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    from openprim.pyfrontend import importers
    from openprim import cache
    exe = load(str(tmp_path / "tiny.oprim"))
    x = np.random.default_rng(1).standard_normal((3, 3, 10, 10)).astype(np.float32)
    want = cache.load_or_compile(importers.load(str(tmp_path / "tiny.py"), n=3), "cpu")(x)
    np.testing.assert_allclose(exe(x), want, rtol=1e-5, atol=1e-5)
    r = _cli("tune", "tiny.py", "--dynamic", "n=1:2", "--measure-on", "b.zip", cwd=tmp_path)
    assert r.returncode == 1 and "--dynamic tunes one model's buckets here" in r.stderr

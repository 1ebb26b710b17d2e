"""The compile cache (driver/cache.py): hits across processes without MLIR, keys, LRU bound, bad entries.

conftest.py turns the cache off for the suite; the `cache` fixture turns it on in a temporary directory.
"""
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import openprim
from openprim import base, cache
from openprim.base.errors import OpenPrimError
from openprim.base.target import parse_target
from openprim.pyfrontend import Graph
from openprim.runtime import artifact

import reference as ref
from helpers import assert_close

SHAPE = (2, 3, 11, 7)   # odd on purpose
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def weights(seed, shape=SHAPE, k=5):
    r = np.random.default_rng(seed)
    return (r.standard_normal((k, shape[1], 3, 3)), r.standard_normal(k),
            r.standard_normal((4, k * shape[2] * shape[3])) * 0.1)


def build(seed=0, shape=SHAPE, alpha=0.1, k=5):
    """conv (padding 1, bias) + leaky_relu + flatten + linear, with the weights of `seed`."""
    w, b, fw = weights(seed, shape, k)
    g = Graph()
    x = g.input("x", shape)
    y = g.leaky_relu(g.conv2d(x, g.param("w", w), g.param("b", b), padding=1), alpha)
    g.output(g.linear(g.flatten(y), g.param("fw", fw)))
    return g


def expected(x, seed, alpha=0.1):
    w, b, fw = weights(seed)
    y = ref.leaky_relu(ref.conv2d(ref.f64(x), w, b, padding=1), alpha)
    return ref.linear(ref.flatten(y), fw)


def model_file(directory):
    """A model file defining build(seed=...) above, importing nothing but numpy and openprim.pyfrontend
    (this test module imports MLIR through helpers)."""
    path = directory / "cache_model.py"
    path.write_text(f"import numpy as np\nfrom openprim.pyfrontend import Graph\nSHAPE = {SHAPE!r}\n\n\n"
                    + inspect.getsource(weights) + "\n\n" + inspect.getsource(build))
    return path


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    """The cache on, in an empty temporary directory, with the default bound."""
    monkeypatch.setenv("OPENPRIM_CACHE", "1")
    monkeypatch.setenv("OPENPRIM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPENPRIM_CACHE_MAX_MB", raising=False)
    return tmp_path / "cache"


def entries(directory):
    return sorted(p.name for p in directory.glob("*.oprim"))


def test_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENPRIM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "openprim"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "openprim"
    monkeypatch.setenv("OPENPRIM_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"


_PROGRAM = """\
import json, sys
import numpy as np
sys.path.insert(0, {here!r})
from cache_model import build
from openprim import cache
g = build(seed=7)
exe = cache.load_or_compile(g, "cpu", {{"layout": "NHWC"}})
x = np.random.default_rng(1).standard_normal({shape!r}).astype(np.float32)
np.save({out!r} + f"/y{{int(exe.cache_hit)}}.npy", exe(x))
print(json.dumps({{"hit": exe.cache_hit, "mlir": "mlir" in sys.modules,
                  "compiler": "openprim.compiler" in sys.modules, "seconds": exe.compile_seconds}}))
"""


def test_hit_in_second_process_without_mlir(cache_on, tmp_path):
    program = _PROGRAM.format(here=str(model_file(tmp_path).parent), shape=SHAPE, out=str(tmp_path))
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                           env={**os.environ})
        assert p.returncode == 0, p.stderr
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert not first["hit"] and first["mlir"] and first["seconds"]["passes"] > 0
    assert second["hit"], "the second process compiled again"
    assert not second["mlir"] and not second["compiler"], "a cache hit imported MLIR or the compiler"
    assert second["seconds"]["passes"] == second["seconds"]["codegen"] == 0.0
    assert len(entries(cache_on)) == 1
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    y0, y1 = np.load(tmp_path / "y0.npy"), np.load(tmp_path / "y1.npy")
    assert_close(y1, expected(x, seed=7), "f32")
    np.testing.assert_array_equal(y0, y1)


def test_key_is_stable_and_sensitive(monkeypatch, tmp_path):
    g = build()
    key = cache.graph_key(g, parse_target("cpu"), {"layout": "NHWC"})
    assert len(key) == 64 and int(key, 16) >= 0
    assert cache.graph_key(build(), parse_target("cpu"), {"layout": "NHWC"}) == key, "the same graph built twice"
    p = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from cache_model import "
                        "build; from openprim import cache; from openprim.base.target import parse_target; print(cache.graph_key(build(), parse_target('cpu'), "
                        "{'layout': 'NHWC'}))", str(model_file(tmp_path).parent)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == key, "another process computes another key"
    conv = next(n for n in g.nodes if n.op == "conv2d")
    conv.attrs = dict(reversed(list(conv.attrs.items())))
    assert cache.graph_key(g, parse_target("cpu"), {"layout": "NHWC"}) == key, "attribute order changed the key"
    assert cache.graph_key(g, parse_target("cpu"), {"layout": "NHWC", "precision": None}) == key, "an option set to None"

    weight = next(n for n in g.nodes if n.op == "constant").value
    weight.reshape(-1).view(np.uint8)[5] ^= 1
    assert cache.graph_key(g, parse_target("cpu"), {"layout": "NHWC"}) != key, "a weight byte"
    weight.reshape(-1).view(np.uint8)[5] ^= 1
    assert cache.graph_key(g, parse_target("cpu"), {"layout": "NHWC"}) == key
    changed = {
        "attribute": cache.graph_key(build(alpha=0.2), parse_target("cpu"), {"layout": "NHWC"}),
        "shape": cache.graph_key(build(shape=(2, 3, 11, 9)), parse_target("cpu"), {"layout": "NHWC"}),
        "target": cache.graph_key(g, parse_target("nvvm:sm_90"), {"layout": "NHWC"}),
        "cpu target": cache.graph_key(g, parse_target("cpu:znver4"), {"layout": "NHWC"}),
        "option": cache.graph_key(g, parse_target("cpu"), {"layout": "keep"}),
        "new option": cache.graph_key(g, parse_target("cpu"), {"layout": "NHWC", "precision": "bf16"}),
    }
    monkeypatch.setenv("OPENPRIM_SOLVER", "conv_direct")
    changed["environment"] = cache.graph_key(g, parse_target("cpu"), {"layout": "NHWC"})
    monkeypatch.delenv("OPENPRIM_SOLVER")
    monkeypatch.setattr(base, "__version__", "0.0.1")
    changed["version"] = cache.graph_key(g, parse_target("cpu"), {"layout": "NHWC"})
    same = [what for what, k in changed.items() if k == key]
    assert not same, f"the key does not change with: {same}"
    assert len(set(changed.values())) == len(changed)


def test_key_refuses_unkeyable_option():
    with pytest.raises(OpenPrimError, match="cannot be part of a compile-cache key"):
        cache.graph_key(build(), parse_target("cpu"), {"timings": object()})


def test_key_hashes_resnet50_weights_fast():
    """The key of ResNet-50 (examples/resnet.py: 25.6 M random f32 parameters, 102 MB) in well under a second."""
    spec = importlib.util.spec_from_file_location("resnet_example", os.path.join(EXAMPLES, "resnet.py"))
    resnet = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(resnet)
    g = resnet.build(depth=50)
    assert sum(n.value.nbytes for n in g.nodes if n.value is not None) > 100e6
    cache.source_digest()      # once per process, not per key
    t0 = time.perf_counter()
    key = cache.graph_key(g, parse_target("cpu"), {})
    seconds = time.perf_counter() - t0
    assert seconds < 0.5, f"hashing ResNet-50 took {seconds:.2f} s"
    next(n for n in g.nodes if n.op == "constant" and n.value.size > 1000).value.reshape(-1).view(np.uint8)[-1] ^= 1
    assert cache.graph_key(g, parse_target("cpu"), {}) != key


def test_lru_eviction(cache_on, monkeypatch):
    graphs = [build(seed=s) for s in range(3)]
    cache.load_or_compile(graphs[0])
    size = next(cache_on.glob("*.oprim")).stat().st_size
    monkeypatch.setenv("OPENPRIM_CACHE_MAX_MB", str(2.5 * size / 2**20))   # two entries fit, not three
    cache.load_or_compile(graphs[1])
    key_a, key_b = (cache.graph_key(g, parse_target("cpu"), {}) for g in graphs[:2])
    now = time.time()
    os.utime(cache_on / f"{key_a}.oprim", (now - 7200, now - 7200))       # a is the oldest...
    os.utime(cache_on / f"{key_b}.oprim", (now - 3600, now - 3600))
    assert cache.load_or_compile(graphs[0]).cache_hit                    # ...until a hit touches it
    cache.load_or_compile(graphs[2])
    key_c = cache.graph_key(graphs[2], parse_target("cpu"), {})
    assert entries(cache_on) == sorted([f"{key_a}.oprim", f"{key_c}.oprim"]), "b (least recently used) goes"
    assert cache.info()["entries"] == 2 and cache.info()["bytes"] <= cache.max_bytes()
    monkeypatch.setenv("OPENPRIM_CACHE_MAX_MB", "0")                      # an entry larger than the bound stays
    assert not cache.load_or_compile(graphs[1]).cache_hit
    assert entries(cache_on) == [f"{key_b}.oprim"]
    assert cache.clear() == 1 and entries(cache_on) == []


def _rewrite(path, **meta_changes):
    """The entry rewritten with other manifest fields (e.g. another compiler version)."""
    manifest, kernels, weights = artifact.read(str(path))
    meta = {k: v for k, v in manifest.items() if k not in ("format", "version", "kernel_files", "plan")}
    artifact.write(str(path), manifest["plan"], kernels, weights, {**meta, **meta_changes})


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other version"])
def test_bad_entry_is_rebuilt(cache_on, damage):
    g = build(seed=3)
    cache.load_or_compile(g)
    path = next(cache_on.glob("*.oprim"))
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "garbage":
        path.write_bytes(np.random.default_rng(0).bytes(4096))
    else:
        _rewrite(path, compiler="openprim 0.0.1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exe = cache.load_or_compile(g)
    assert not exe.cache_hit
    assert len(caught) == 1 and "ignoring entry" in str(caught[0].message) and path.name in str(caught[0].message)
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    assert_close(exe(x), expected(x, seed=3), "f32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.load_or_compile(g).cache_hit, "the rebuilt entry is used"
    assert not caught


def test_entry_of_another_key_is_rebuilt(cache_on):
    """An entry records its key (manifest `cache_key`): another model's entry copied over it loaded and ran
    as this model before; now it is a miss, with one warning, and rebuilt."""
    a, b = build(seed=3), build(seed=9)
    cache.load_or_compile(a)
    cache.load_or_compile(b)
    path_a, path_b = (cache_on / f"{cache.graph_key(g, parse_target('cpu'), {})}.oprim" for g in (a, b))
    assert artifact.read(str(path_a))[0]["cache_key"] == path_a.stem
    path_a.write_bytes(path_b.read_bytes())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exe = cache.load_or_compile(a)
    assert not exe.cache_hit
    assert len(caught) == 1 and f"{path_a.name} (it records the key {path_b.stem}, not its name)" in str(caught[0].message)
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    assert_close(exe(x), expected(x, seed=3), "f32")
    assert cache.load_or_compile(a).cache_hit and artifact.read(str(path_a))[0]["cache_key"] == path_a.stem


def test_errors_name_no_temporary_file(cache_on, monkeypatch):
    """A model too large for this machine was reported as `<cache>/.tmp-xyz.part: cannot run here: ...`."""
    from openprim.runtime import manifest
    monkeypatch.setattr(manifest, "memory_shortfall", lambda sizes: "needs 9 GiB of host memory (arena 9 GiB)")
    with pytest.raises(OpenPrimError) as e:
        cache.load_or_compile(build(seed=4))
    assert str(e.value) == "the compiled model: cannot run here: it needs 9 GiB of host memory (arena 9 GiB)"
    assert not list(cache_on.glob(f"{cache.TEMP_PREFIX}*")), "the temporary file is removed"


def test_cache_off(cache_on, monkeypatch):
    g = build(seed=4)
    monkeypatch.setenv("OPENPRIM_CACHE", "0")
    x = np.random.default_rng(5).standard_normal(SHAPE).astype(np.float32)
    for _ in range(2):
        exe = cache.load_or_compile(g)
        assert not exe.cache_hit
        assert_close(exe(x), expected(x, seed=4), "f32")
        assert not openprim.compile(g).cache_hit
    assert not cache_on.exists() or entries(cache_on) == []
    monkeypatch.setenv("OPENPRIM_CACHE", "1")
    assert not openprim.compile(g, cache=False).cache_hit
    assert not cache_on.exists() or entries(cache_on) == []


def test_compile_numerics_cached_equal_uncached(cache_on):
    g = build(seed=6)
    x = np.random.default_rng(8).standard_normal(SHAPE).astype(np.float32)
    uncached = openprim.compile(g, cache=False)
    miss, hit = openprim.compile(g), openprim.compile(g)
    assert not uncached.cache_hit and not miss.cache_hit and hit.cache_hit
    assert hit.compile_seconds["passes"] == 0.0 and miss.compile_seconds["passes"] > 0
    want = expected(x, seed=6)
    assert_close(uncached(x), want, "f32")
    np.testing.assert_array_equal(hit(x), uncached(x))
    np.testing.assert_array_equal(miss(x), uncached(x))
    assert openprim.compile(g, layout="keep").cache_hit is False, "another option is another entry"
    assert len(entries(cache_on)) == 2


def test_cli(cache_on, tmp_path, capsys):
    from openprim import cli
    model = str(model_file(tmp_path))
    assert cli.main(["compile", model, "-D", "seed=9", "-o", str(tmp_path / "a.oprim")]) == 0
    assert cli.main(["compile", model, "-D", "seed=9", "-o", str(tmp_path / "b.oprim")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("compiled ") and "copied from the compile cache" in out
    assert (tmp_path / "a.oprim").read_bytes() == (tmp_path / "b.oprim").read_bytes()
    assert cli.main(["run", model, "-D", "seed=9", "--repeat", "0"]) == 0
    assert "loaded from the compile cache" in capsys.readouterr().out
    assert cli.main(["run", model, "-D", "seed=9", "--repeat", "0", "--no-cache"]) == 0
    assert "loaded from the compile cache" not in capsys.readouterr().out
    assert cli.main(["cache", "info"]) == 0
    assert f"compile cache {cache_on}: 1 entries" in capsys.readouterr().out
    assert cli.main(["cache", "clear"]) == 0 and entries(cache_on) == []
    os.environ["OPENPRIM_CACHE_MAX_MB"] = "lots"
    try:
        assert cli.main(["cache", "info"]) == 1
    finally:
        del os.environ["OPENPRIM_CACHE_MAX_MB"]
    assert "OPENPRIM_CACHE_MAX_MB='lots'" in capsys.readouterr().err


def test_concurrent_stores_of_one_key(cache_on, tmp_path):
    """Two processes compiling the same graph at once both succeed and leave one whole entry, no temporaries."""
    program = _PROGRAM.format(here=str(model_file(tmp_path).parent), shape=SHAPE, out=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    (entry,) = cache_on.glob("*.oprim")
    assert sorted(os.listdir(cache_on)) == [entry.name]
    artifact.read(str(entry))
    assert cache.load_or_compile(build(seed=7), "cpu", {"layout": "NHWC"}).cache_hit


def test_store_for_a_gpu_target_without_the_gpu(cache_on):
    g = build(seed=10)
    path = cache.store(g, "nvvm:sm_90", {"layout": "NHWC"})
    manifest, kernels, _ = artifact.read(str(path))
    assert manifest["target"] == "nvvm:sm_90" and "kernels.ptx" in kernels
    assert path.name == cache.graph_key(g, parse_target("nvvm:sm_90"), {"layout": "NHWC"}) + ".oprim"
    inode = path.stat().st_ino
    assert cache.store(g, "nvvm:sm_90", {"layout": "NHWC"}) == path and path.stat().st_ino == inode, "stored twice"

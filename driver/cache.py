"""The compile cache: a Graph compiled once is loaded from disk the next time, in any process.

    exe = load_or_compile(graph, "nvvm:sm_90", {"layout": "NHWC"})   # miss: compile + store; hit: load
    exe.cache_hit                                                    # True when nothing was compiled

An entry is the `.oprim` artifact of one compile, named by its key: `<cache_dir()>/<sha256>.oprim`. A hit is
`runtime.artifact.load` of that file, so it needs numpy (and the GPU driver bindings) but never MLIR: this
module wraps the compiler: it imports neither `mlir` nor `openprim.compiler` at module level, and imports the
compiler only on a miss; the compiler knows nothing of it. A cache filled on a machine with MLIR can be carried
to a GPU machine without it and hit there.

The key (`graph_key`) is a sha256 over a canonical text of everything the compile depends on: the Graph's
ops in order (operands named by position, never by id()), their attributes (dicts by sorted key, floats by
repr), shapes, dtypes, input/output names, a sha256 of every param's bytes (hashlib straight over the numpy
buffer: ResNet-50's 102 MB of weights in about 0.2 s, no pickling), the parsed target (plus the host CPU for
`cpu`, whose code is built for this CPU: Target.concrete), the options sorted by name, the environment variables and tuning
database records that steer solver selection, and the compiler: its version and a digest of its sources
(a checkout edited without a version bump must not hit entries of the old code). Two processes or two
machines with the same sources building the same Graph get the same key.

Stores are atomic: the compiler writes a temporary file in the cache directory, which is renamed over the
entry, so two processes storing the same key both end with a valid file and readers need no lock. The
size is bounded by `OPENPRIM_CACHE_MAX_MB` (default 2048): every hit touches the entry's mtime, and a store
evicts the oldest entries until the rest fit. Every entry records its key in its manifest (`cache_key`). An
entry that does not load (truncated, corrupt, built for another machine), that another compiler version
wrote, or whose recorded key is not its name (another entry or artifact copied over it) is ignored with a
warning and rebuilt.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from openprim import base
from openprim.base.errors import OpenPrimError
from openprim.base.files import atomic_file
from openprim.base.settings import compile_environment, user_db_path
from openprim.base.target import Target, parse_target
from openprim.runtime import artifact
from openprim.timings import CompileTimings
from openprim.tuning import store as tuning_store

DEFAULT_MAX_MB = 2048
SUFFIX = ".oprim"
TEMP_PREFIX = ".tmp-"   # compiles in progress (or left by a killed process): never loaded, removed by clear()
KEY_FORMAT = "openprim-cache-key 2"   # bump when the canonical text below changes


def cache_dir() -> Path:
    """$OPENPRIM_CACHE_DIR, else $XDG_CACHE_HOME/openprim, else ~/.cache/openprim."""
    if os.environ.get("OPENPRIM_CACHE_DIR"):
        return Path(os.environ["OPENPRIM_CACHE_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "openprim"
    return Path.home() / ".cache" / "openprim"


def enabled() -> bool:
    """False when OPENPRIM_CACHE=0 (every call compiles)."""
    return os.environ.get("OPENPRIM_CACHE", "1").strip() != "0"


def max_bytes() -> int:
    """The size bound of the cache directory: OPENPRIM_CACHE_MAX_MB megabytes (default 2048)."""
    text = os.environ.get("OPENPRIM_CACHE_MAX_MB", "").strip()
    if not text:
        return DEFAULT_MAX_MB * 2**20
    try:
        mb = float(text)
    except ValueError:
        mb = -1.0
    if not mb >= 0:
        raise OpenPrimError(f"OPENPRIM_CACHE_MAX_MB={text!r}: expected a size in megabytes, e.g. 2048")
    return int(mb * 2**20)


# ------------------------------------------------------------------------------------------------ the key

def _canonical(value, what: str) -> str:
    """A text of an attribute or option value that is the same in every process: no id(), no dict order."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return repr(None if value is None else bool(value))
    if isinstance(value, (int, np.integer)):
        return repr(int(value))
    if isinstance(value, (float, np.floating)):
        return "f" + repr(float(value))
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_canonical(v, what) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted((str(k), v) for k, v in value.items())
        return "{" + ",".join(f"{json.dumps(k)}:{_canonical(v, what)}" for k, v in items) + "}"
    if isinstance(value, np.ndarray):
        return _array_digest(value)
    raise OpenPrimError(f"{what}: a value of type {type(value).__name__} cannot be part of a compile-cache key; "
                        f"pass plain numbers, strings and lists, or compile with cache=False")


def _array_digest(a: np.ndarray) -> str:
    """dtype, shape and the sha256 of the bytes (hashlib reads the buffer in place)."""
    a = np.ascontiguousarray(a)
    return f"{a.dtype.str}{list(a.shape)}:{hashlib.sha256(a.data if a.size else b'').hexdigest()}"


def _target_text(target: Target) -> str:
    """The target and, on the CPU, the chip its code is generated for (`cpu` is this machine's CPU)."""
    return f"{target} ({target.concrete} on {platform.machine()})" if target.kind == "cpu" else str(target)


PACKAGES = ("base", "dialect", "pyfrontend", "kernels", "solvers", "passes", "backends", "tuning", "runtime")


def package_dirs() -> dict[str, Path]:
    """The folder of every OpenPrim package, found from this file's, not imported: installed, they are
    openprim/<name>; in a checkout (editable, or the scripts/ loaders on a machine without an install) the
    package openprim is the folder driver/ and the others are its siblings."""
    root = Path(__file__).resolve().parent
    dirs = {}
    for name in PACKAGES:
        found = [d for d in (root / name, root.parent / name) if (d / "__init__.py").is_file()]
        if found:
            dirs[f"openprim.{name}"] = found[0]
    return {**dirs, "openprim": root}     # the root last: installed, it holds the others too


@functools.lru_cache(None)
def source_digest() -> str:
    """sha256 of OpenPrim's own sources (.py, .mlir), named by package: a checkout edited without a version
    bump gets new keys, and the same tree gives the same digest on every machine (installed or not)."""
    seen, h = set(), hashlib.sha256()
    for package, root in package_dirs().items():
        for path in sorted(root.rglob("*")):
            if path.suffix not in (".py", ".mlir") or "__pycache__" in path.parts or path in seen:
                continue
            seen.add(path)
            h.update(f"{package}/{path.relative_to(root).as_posix()}\n".encode())
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _environment_lines():
    """What besides the graph, target and options decides the compile: the environment (base/settings.py) and
    the records of the tuning databases (tuning/store.py)."""
    yield "env " + _canonical(compile_environment(), "environment")
    yield f"user tuning db {tuning_store.digest(user_db_path())}"
    yield f"system tuning db {tuning_store.digest(tuning_store.SYSTEM_DB)}"


def _graph_lines(graph):
    """The canonical text of a pyfrontend Graph, one line at a time."""
    labels = {}   # id(Tensor) -> its position in the graph: used for lookup only, never in the text
    yield f"graph {json.dumps(graph.name)} layout {graph.layout} dtype {graph.dtype}"
    for i, t in enumerate(graph.inputs):
        labels[id(t)] = f"in{i}"
        yield f"input {json.dumps(t.name)} {list(t.shape)} {t.dtype}"
    for i, node in enumerate(graph.nodes):
        try:
            operands = ["-" if t is None else labels[id(t)] for t in node.operands]
        except KeyError:
            raise OpenPrimError(f"graph node {i} (prim.{node.op}) uses a tensor that is not defined before it") from None
        labels[id(node.result)] = f"n{i}"
        r = node.result
        value = "" if node.value is None else " value " + _array_digest(node.value)
        yield (f"n{i} = {node.op}({','.join(operands)}) {_canonical(node.attrs, f'prim.{node.op} attributes')} "
               f"-> {json.dumps(r.name)} {list(r.shape)} {r.dtype}{value}")
    try:
        yield "outputs " + ",".join(labels[id(t)] for t in graph.outputs)
    except KeyError:
        raise OpenPrimError("graph output is not a tensor of this graph") from None
    if graph.state:   # only where there is state: the keys of graphs without it stay as they were
        yield "state " + ",".join(f"{i}:{o}" for i, o in graph.state)


def graph_key(graph, target: Target, options: dict) -> str:
    """The sha256 (hex) naming the compile of `graph` for `target` with `options` (save's keyword arguments;
    options set to None or to their DEFAULTS count as absent; weights="values" is one, so such an entry is
    another than the constant-weights one)."""
    options = _set_options(options)
    h = hashlib.sha256()
    for line in (KEY_FORMAT, f"openprim {base.__version__} sources {source_digest()}",
                 f"target {_target_text(target)}", f"options {_canonical(options, 'compile options')}",
                 *_environment_lines(), *_graph_lines(graph)):
        h.update(line.encode())
        h.update(b"\n")
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ entries

def _entries(directory: Path) -> list[tuple[float, int, Path]]:
    """(mtime, bytes, path) of every entry, oldest first; entries removed meanwhile are skipped."""
    out = []
    for p in directory.glob(f"*{SUFFIX}"):
        if p.name.startswith(TEMP_PREFIX):
            continue
        try:
            st = p.stat()
        except OSError:
            continue
        out.append((st.st_mtime, st.st_size, p))
    return sorted(out)


def evict(keep: Path | None = None, limit: int | None = None) -> int:
    """Removes the least recently used entries until the cache is under `limit` (default: max_bytes());
    `keep` (the entry just stored) is never removed. Returns the number removed."""
    limit = max_bytes() if limit is None else limit
    entries = _entries(cache_dir())
    total, removed = sum(size for _, size, _ in entries), 0
    for _, size, path in entries:
        if total <= limit:
            break
        if path == keep:
            continue
        try:
            path.unlink()
        except FileNotFoundError:   # another process evicted it first
            pass
        total -= size
        removed += 1
    return removed


def info() -> dict:
    """What `openprim cache info` prints: directory, entries, total bytes, the bound, enabled."""
    directory = cache_dir()
    entries = _entries(directory) if directory.is_dir() else []
    return {"dir": str(directory), "entries": len(entries), "bytes": sum(s for _, s, _ in entries),
            "limit_bytes": max_bytes(), "enabled": enabled()}


def clear() -> int:
    """Removes every entry (and leftover temporary files); returns the number of entries removed."""
    directory = cache_dir()
    if not directory.is_dir():
        return 0
    removed = 0
    for p in list(directory.glob(f"*{SUFFIX}")) + list(directory.glob(f"{TEMP_PREFIX}*")):
        try:
            p.unlink()
            removed += not p.name.startswith(TEMP_PREFIX)
        except FileNotFoundError:
            pass
    return removed


def _usable(path: Path, open_entry):
    """open_entry(path) (artifact.load or artifact.read) of a stored entry, or None when there is none or it
    must be rebuilt: unreadable, corrupt, for another machine, from another compiler version, or recording
    another key than its name (one warning)."""
    try:
        opened = open_entry(str(path))
    except OpenPrimError as e:
        if not path.exists():        # evicted by another process meanwhile, or never stored
            return None
        if not str(e).startswith(f"{path}:"):   # not the entry's fault (e.g. no GPU): rebuilding cannot help
            raise
        why = str(e)[len(str(path)) + 1:].strip()
    else:
        manifest = opened[0] if isinstance(opened, tuple) else opened.manifest
        built_by = manifest.get("compiler")
        if built_by != f"openprim {base.__version__}":
            why = f"built by {built_by}, this is openprim {base.__version__}"
        elif manifest.get("cache_key") != path.stem:   # another entry (or artifact) copied over it
            why = f"it records the key {manifest.get('cache_key')}, not its name"
        else:
            return opened
    warnings.warn(f"openprim cache: ignoring entry {path.name} ({why}); rebuilding it", stacklevel=4)
    return None


def _touch(path: Path) -> None:
    """Marks an entry used now (the LRU order is the mtime order); a read-only cache still hits."""
    try:
        os.utime(path)
    except OSError:
        pass


@contextmanager
def _work_dir(final: Path | None):
    """Where a compile writes its temporary file: the cache directory (so that the rename into the entry is
    atomic), or a scratch directory when the cache is off (final None)."""
    if final is None:
        with tempfile.TemporaryDirectory(prefix="openprim-") as scratch:
            yield Path(scratch)
        return
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OpenPrimError(f"compile cache {final.parent}: cannot create it ({e.strerror}); set OPENPRIM_CACHE_DIR "
                            f"to a writable directory, or OPENPRIM_CACHE=0") from None
    yield final.parent


def _save_temp(directory: Path, graph, target: Target, options: dict, timings, final: Path | None) -> tuple[str, dict]:
    """Compiles into a new temporary file of `directory` that records the key of its entry `final`: (its
    path, save's manifest)."""
    from openprim import compiler          # lazy: a hit must not import MLIR
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".part", dir=directory)
    os.close(fd)
    meta = {"cache_key": final.stem} if final else None
    try:
        return tmp, compiler.save(graph, tmp, target=target, timings=timings, meta=meta, **options)
    except BaseException:
        os.unlink(tmp)
        raise


def _publish(tmp: str, final: Path | None) -> None:
    """Renames a compiled temporary file to its entry (atomic: a concurrent store of the same key also ends
    with a whole file), then evicts down to the bound; final None (cache off): deletes it."""
    if final is None:
        os.unlink(tmp)
        return
    os.replace(tmp, final)
    evict(keep=final)


def _copy_atomic(source: str, path: str) -> None:
    with open(source, "rb") as src, atomic_file(path, "wb", "-o") as f:
        shutil.copyfileobj(src, f)


DEFAULTS = {"weights": "constants"}   # options whose default is spelled out: keyed as if absent


def _set_options(options) -> dict:
    """The options that change the compile: those not None nor at their DEFAULTS (so that weights="constants"
    keys as every entry did before the option existed)."""
    return {k: v for k, v in (options or {}).items() if v is not None and DEFAULTS.get(k, None) != v}


def _entry(graph, target: Target | str, options) -> tuple[Target, dict, Path | None]:
    """(the target, the options set, the path of the entry or None when the cache is off) of a compile."""
    target, options = parse_target(target), _set_options(options)
    return target, options, cache_dir() / f"{graph_key(graph, target, options)}{SUFFIX}" if enabled() else None


def load_or_compile(graph, target: Target | str = "cpu", options=None, device=0):
    """The executable of `graph` compiled for `target` with `options` (keyword arguments of
    openprim.compiler.save): loaded from the cache on a hit, else compiled, stored and loaded.
    `.cache_hit` says which; `.compile_seconds` has the passes, codegen and load seconds."""
    target, options, final = _entry(graph, target, options)
    if final is not None:
        t0 = time.perf_counter()
        exe = _usable(final, lambda p: artifact.load(p, device))
        if exe is not None:
            _touch(final)
            exe.cache_hit = True
            exe.compile_seconds = {"passes": 0.0, "codegen": 0.0, "load": time.perf_counter() - t0}
            return exe
    with _work_dir(final) as directory:
        timings = CompileTimings()
        tmp, _ = _save_temp(directory, graph, target, options, timings, final)
        try:
            with timings.stage("load"):
                exe = artifact.load(tmp, device)    # before the rename: an eviction elsewhere cannot race it
        except OpenPrimError as e:   # it names the temporary file: name the model instead
            os.unlink(tmp)
            raise OpenPrimError(f"the compiled model{str(e).removeprefix(tmp)}") from None
        except BaseException:
            os.unlink(tmp)
            raise
        _publish(tmp, final)
    exe.compile_seconds, exe.cache_hit = timings.seconds(), False
    return exe


def store(graph, target: Target | str = "cpu", options=None) -> Path:
    """The entry of `graph` for `target`, compiled now unless the cache has it; nothing is loaded, so a cache
    for a GPU target can be filled on a machine without that GPU (and copied there). Needs the cache on."""
    if not enabled():
        raise OpenPrimError("cannot store into the compile cache: OPENPRIM_CACHE=0 turns it off; unset it")
    target, options, final = _entry(graph, target, options)
    if _usable(final, artifact.read) is None:
        with _work_dir(final) as directory:
            tmp, _ = _save_temp(directory, graph, target, options, None, final)
            _publish(tmp, final)
    return final


def save_cached(graph, path: str, target: Target | str = "cpu", options=None, timings=None) -> dict:
    """openprim.compiler.save through the cache (`openprim compile`): the entry copied to `path` on a hit,
    else compiled, copied and stored. Returns save's manifest (plan, bytes, seconds) plus `cache_hit`."""
    t0 = time.perf_counter()
    target, options, final = _entry(graph, target, options)
    opened = _usable(final, artifact.read) if final else None
    if opened is not None:
        _touch(final)
        _copy_atomic(str(final), path)
        manifest = {k: v for k, v in opened[0].items() if k not in ("format", "version", "kernel_files")}
        return {**manifest, "bytes": os.path.getsize(path), "seconds": time.perf_counter() - t0, "cache_hit": True}
    with _work_dir(final) as directory:
        tmp, info = _save_temp(directory, graph, target, options, timings, final)
        try:
            _copy_atomic(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        _publish(tmp, final)
    return {**info, "seconds": time.perf_counter() - t0, "cache_hit": False}

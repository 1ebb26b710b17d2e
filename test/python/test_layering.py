"""OpenPrim's layering: which package may import which, checked on the source (ast) and by importing.

The packages (pyproject.toml's `package-dir`: the folder driver/ is `openprim` itself, every other
top-level folder X is `openprim.X`) form layers, from the bottom up:

    base        the op table, dtypes, errors, targets: imports nothing of OpenPrim outside base, never MLIR
    runtime     loads and runs artifacts with numpy and ctypes: base and runtime only, never MLIR nor the compiler
    dialect     the `prim` dialect (MLIR): base only
    pyfrontend  Graph and the ONNX / torch importers: base only, no MLIR; only pyfrontend/emit.py (the
                emission to MLIR) and the room pyfrontend/mlir_import/ (importers of MLIR-level input)
                import the dialect (and MLIR)
    kernels     kernel emitters: base, dialect, kernels
    solvers     solvers (which kernel, which parameters): base, dialect, kernels, solvers
    backends    per-target lowering and serialization: base, dialect, runtime, backends
    passes      the prim-* passes: base, dialect, kernels, solvers, backends, runtime, passes
    tuning      the database, Find and the tuner: all of the above plus pyfrontend (the commands and Find's
                worker program, which compile, are the driver's tuning_commands.py and find_worker.py)
    driver      `openprim`, `openprim.compiler`, `.plan`, `.cli`, `.opt`, `.torch_backend`, `.onnx_backend`:
                anything

LAYERS below is that table; every rule is checked on every module found by walking the folders of
`package-dir`, so a new module or a split package is covered without editing this file. EXCEPTIONS lets
one module import more than its layer; ROOMS lets every module of a subpackage do so: a declared place for
code of that kind (pyfrontend/mlir_import/: a new importer of MLIR input goes there, not into an exception).

1. Layers, statically: every import (at module level or in a function, relative ones resolved) of an
   OpenPrim module or of `mlir` is allowed by LAYERS for the importing module's layer (or by EXCEPTIONS, ROOMS).
2. Layers, dynamically: with the forbidden modules made unimportable (None in sys.modules), the
   runtime, the frontend, the dialect, the kernels and the passes still import (in subprocesses).
3. No import cycle between modules (the module-level imports; importing `openprim.a.b` also imports
   the package `openprim.a`).
4. An OpenPrim module is imported inside a function only where the laziness is the point
   (LAZY_IMPORTS: each with its reason); optional third-party dependencies (onnx, torch, llvmlite,
   cuda, hip, ...) imported in functions are not checked.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

# ------------------------------------------------------------------------------------------------------------
# The rules.

DRIVER = "driver"   # `openprim` itself and its modules (compiler, plan, cli, opt, torch_backend, onnx_backend)
MLIR = "mlir"       # the MLIR Python bindings (a pseudo-layer: who may import `mlir`)

# layer -> the layers its modules may import.
LAYERS = {
    "base":       {"base"},
    "runtime":    {"base", "runtime"},
    "dialect":    {"base", "dialect", MLIR},
    "pyfrontend": {"base", "pyfrontend"},
    "kernels":    {"base", "dialect", "kernels", MLIR},
    "solvers":    {"base", "dialect", "kernels", "solvers", MLIR},
    "backends":   {"base", "dialect", "runtime", "backends", MLIR},
    "passes":     {"base", "dialect", "kernels", "solvers", "backends", "runtime", "passes", MLIR},
    "tuning":     {"base", "dialect", "kernels", "solvers", "backends", "runtime", "passes", "pyfrontend",
                   "tuning", MLIR},
    DRIVER:       {"base", "dialect", "pyfrontend", "kernels", "solvers", "backends", "passes", "runtime",
                   "tuning", DRIVER, MLIR},
}

# module -> layers it may import beyond its layer's row.
EXCEPTIONS = {
    "openprim.pyfrontend.emit": {"dialect", MLIR},  # the emission of a Graph to MLIR
}

# package -> layers its modules (the package and everything under it) may import beyond its layer's row.
ROOMS = {
    # importers of MLIR-level input (prim modules; StableHLO, TOSA, linalg on tensors): they parse MLIR
    "openprim.pyfrontend.mlir_import": {"dialect", MLIR},
}

# Files (relative to the repository root) that may import OpenPrim modules inside functions.
LAZY_IMPORTS = {
    # commands import their layer only when run, so `openprim run x.oprim` needs no MLIR
    "driver/cli.py",
    # lazy attributes (openprim.Graph, openprim.compile) keep `import openprim.runtime` free of MLIR
    "driver/__init__.py",
    # `to_module` imports emit, so building a Graph needs no MLIR
    "pyfrontend/__init__.py",
    # the importer registry imports an importer (and onnx, torch or MLIR) only when a file of its suffix is loaded
    "pyfrontend/importers/__init__.py",
    # a compile-cache hit loads the .oprim without MLIR: the compiler (and the host CPU's name) only when needed
    "driver/cache.py",
    # `openprim profile X.oprim` needs no MLIR: the compiler (openprim.api) only for a model file
    "driver/profile_command.py",
}

# ------------------------------------------------------------------------------------------------------------
# The modules, from pyproject.toml.

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def _package_dir() -> dict[str, str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["package-dir"]


PACKAGE_DIR = _package_dir()


@dataclass(frozen=True)
class Module:
    name: str       # openprim.kernels.nvidia.wgmma
    path: str       # kernels/nvidia/wgmma.py (relative to ROOT)
    is_package: bool


def _discover() -> dict[str, Module]:
    mapped = {os.path.normpath(folder) for folder in PACKAGE_DIR.values()}
    modules = {}
    for package, folder in PACKAGE_DIR.items():
        folder = os.path.normpath(folder)
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, folder)):
            rel_dir = os.path.relpath(dirpath, ROOT)
            # A subfolder mapped to a package of its own is walked as that package.
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith(".")
                                 and os.path.normpath(os.path.join(rel_dir, d)) not in mapped)
            parts = [] if rel_dir == folder else os.path.relpath(rel_dir, folder).split(os.sep)
            for fn in sorted(filenames):
                if not fn.endswith(".py"):
                    continue
                stem = fn[:-3]
                is_package = stem == "__init__"
                name = ".".join([package, *parts] + ([] if is_package else [stem]))
                modules[name] = Module(name, os.path.join(rel_dir, fn).replace(os.sep, "/"), is_package)
    return modules


MODULES = _discover()
TOP = "openprim"


def room_of(name: str) -> set:
    """The layers a module may import beyond its layer's row as a member of a room (ROOMS)."""
    return set().union(*(extra for room, extra in ROOMS.items() if name == room or name.startswith(room + ".")))


def layer_of(name: str) -> str | None:
    """The layer of a module name (an OpenPrim module, or `mlir`); None for anything else."""
    head, _, rest = name.partition(".")
    if head == MLIR:
        return MLIR
    if head != TOP:
        return None
    sub = rest.split(".")[0]
    return sub if rest and sub in LAYERS and sub != DRIVER else DRIVER


def ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


# ------------------------------------------------------------------------------------------------------------
# The imports, from the source.

@dataclass(frozen=True)
class Import:
    module: Module      # the importing module
    line: int
    text: str           # the import statement
    targets: tuple      # the modules it names (X.Y for `from X import Y` where X.Y is a module, else X)
    in_function: bool
    in_class: bool

    def where(self) -> str:
        return f"{self.module.path}:{self.line}"


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module name of `from <node.module> import ...` (relative ones resolved)."""
    if not node.level:
        return node.module
    package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: Module, node) -> tuple:
    if isinstance(node, ast.Import):
        return tuple(alias.name for alias in node.names)
    source = _resolve(module, node)
    out = []
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        out.append(sub if sub in MODULES else source)
    return tuple(dict.fromkeys(out))


class _Collector(ast.NodeVisitor):
    def __init__(self, module: Module, source: str):
        self.module, self.source = module, source
        self.functions = self.classes = 0
        self.imports: list[Import] = []

    def _scope(self, node, attr):
        setattr(self, attr, getattr(self, attr) + 1)
        self.generic_visit(node)
        setattr(self, attr, getattr(self, attr) - 1)

    def visit_FunctionDef(self, node):
        self._scope(node, "functions")

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._scope(node, "classes")

    def visit_Import(self, node):
        self.imports.append(Import(self.module, node.lineno, ast.unparse(node), _targets(self.module, node),
                                   self.functions > 0, self.classes > 0))

    visit_ImportFrom = visit_Import


def _collect() -> list[Import]:
    imports = []
    for module in MODULES.values():
        with open(os.path.join(ROOT, module.path), encoding="utf-8") as f:
            source = f.read()
        collector = _Collector(module, source)
        collector.visit(ast.parse(source, filename=module.path))
        imports += collector.imports
    return imports


IMPORTS = _collect()


def _openprim(name: str) -> bool:
    return name == TOP or name.startswith(TOP + ".")


# ------------------------------------------------------------------------------------------------------------
# 0. The table covers every package.

def test_every_package_has_a_layer():
    assert MODULES, f"no module found under {ROOT} from pyproject.toml's package-dir"
    missing = sorted({layer_of(m) for m in MODULES} - set(LAYERS))
    assert not missing, f"packages without a row in LAYERS: {missing}"
    tops = {name.split(".")[1] for name in PACKAGE_DIR if name.count(".") == 1}
    assert tops <= set(LAYERS), f"top-level packages without a layer in LAYERS: {sorted(tops - set(LAYERS))}"
    unknown = sorted(set(EXCEPTIONS) - set(MODULES))
    assert not unknown, f"EXCEPTIONS names modules that do not exist: {unknown}"
    empty = sorted(room for room in ROOMS if not (room in MODULES and MODULES[room].is_package))
    assert not empty, f"ROOMS names packages that do not exist: {empty}"
    gone = sorted(p for p in LAZY_IMPORTS if not os.path.exists(os.path.join(ROOT, p)))
    assert not gone, f"LAZY_IMPORTS names files that do not exist: {gone}"


# ------------------------------------------------------------------------------------------------------------
# 1. Layers, statically.

def test_layers_static():
    violations = []
    for imp in IMPORTS:
        layer = layer_of(imp.module.name)
        allowed = LAYERS[layer] | EXCEPTIONS.get(imp.module.name, set()) | room_of(imp.module.name)
        for target in imp.targets:
            target_layer = layer_of(target)
            if target_layer is None or target_layer in allowed:
                continue
            violations.append(
                f"{imp.where()}: `{imp.text}` ({imp.module.name}, layer {layer}) imports {target} "
                f"(layer {target_layer}); layer {layer} may import only {sorted(allowed)}")
    assert not violations, "imports that break the layering:\n  " + "\n  ".join(violations)


# ------------------------------------------------------------------------------------------------------------
# 2. Layers, dynamically: import with the forbidden modules blocked, each case in a subprocess of its own.

def _modules_of(layer: str) -> list[str]:
    return sorted(m for m in MODULES if layer_of(m) == layer and not m.endswith(".__main__"))


def _modules_of_package(package: str) -> list[str]:
    return sorted(m for m in MODULES if m == package or m.startswith(package + "."))


_GRAPH = 'from openprim.pyfrontend import Graph\ng = Graph(); x = g.input("x", (1, 3, 8, 8)); g.output(g.relu(x))\n'

# case -> (blocked modules, modules to import, code to run after, skip reason or None)
CASES = {
    "runtime": (["mlir", "openprim.compiler", "openprim.passes", "openprim.dialect"], _modules_of("runtime"), "",
                None),
    "pyfrontend": (["mlir", "openprim.compiler"], ["openprim.pyfrontend"], _GRAPH, None),
    "onnx_importer": (["mlir", "openprim.compiler"], ["openprim.pyfrontend.onnx.importer"], "", None),
    "torch_importer": (["mlir", "openprim.compiler"], ["openprim.pyfrontend.torch.importer"], "",
                       None if importlib.util.find_spec("torch") else "torch is not importable"),
    # the registry and the .py importer, without MLIR or an optional package: each importer loads them itself
    "importers": (["mlir", "openprim.compiler", "onnx", "torch"], _modules_of_package("openprim.pyfrontend.importers"),
                  "", None),
    "mlir_import": (["openprim.compiler", "openprim.passes"], _modules_of_package("openprim.pyfrontend.mlir_import"),
                    "", None),
    "dialect": (["openprim.passes", "openprim.pyfrontend", "openprim.compiler"], ["openprim.dialect"], "", None),
    "kernels": (["openprim.passes", "openprim.solvers", "openprim.compiler", "openprim.tuning"],
                _modules_of("kernels"), "", None),
    "passes": (["openprim.tuning", "openprim.compiler"], ["openprim.passes"], "", None),
    "cache": (["mlir", "openprim.compiler"], ["openprim.cache"], _GRAPH + 'import openprim.cache as c\n'
              'c.graph_key(g, c.parse_target("cpu"), {})\n', None),
}

_PROGRAM = """\
import importlib, sys, traceback
for name in {blocked!r}:
    sys.modules[name] = None
failed = []
for name in {modules!r}:
    try:
        importlib.import_module(name)
    except BaseException:
        failed.append(name)
        print(f"--- importing {{name}} with {blocked!r} blocked:", file=sys.stderr)
        traceback.print_exc()
if failed:
    sys.exit(f"failed: {{failed}}")
{after}"""


@pytest.fixture(scope="module")
def launched():
    """Starts every case at once (they run in parallel); each test waits for its own."""
    procs = {}
    for case, (blocked, modules, after, skip) in CASES.items():
        if skip is None:
            program = _PROGRAM.format(blocked=blocked, modules=modules, after=after)
            procs[case] = subprocess.Popen([sys.executable, "-c", program], cwd=ROOT, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True)
    yield procs
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("case", list(CASES))
def test_layers_dynamic(case, launched):
    blocked, modules, _, skip = CASES[case]
    if skip:
        pytest.skip(skip)
    assert modules, f"no module to import for {case}"
    out, err = launched[case].communicate(timeout=300)
    assert launched[case].returncode == 0, (
        f"importing {modules} with {blocked} blocked failed (exit {launched[case].returncode}):\n{err}{out}")


# ------------------------------------------------------------------------------------------------------------
# 3. No import cycle.

def _graph() -> dict[str, dict[str, str]]:
    """module -> {imported module: why}, from the module-level imports (not in functions or classes)."""
    graph: dict[str, dict[str, str]] = {m: {} for m in MODULES}
    for imp in IMPORTS:
        if imp.in_function or imp.in_class:
            continue
        src = imp.module.name
        before = set(ancestors(src))  # imported (begun) before src itself runs: no dependency of src's
        for target in imp.targets:
            if not _openprim(target):
                continue
            edges = graph[src]
            edges.setdefault(target, f"{imp.where()}: `{imp.text}`")
            for package in ancestors(target):
                if package not in before and package != src:
                    edges.setdefault(package, f"{imp.where()}: `{imp.text}` (imports its package {package})")
    return graph


def _sccs(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        n = stack.pop()
                        on_stack.discard(n)
                        component.append(n)
                        if n == node:
                            break
                    out.append(sorted(component))
    return out


def _cycle(graph, component) -> list[str]:
    """One cycle through the component's first module (breadth first: a shortest one)."""
    members, start = set(component), component[0]
    parent = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in graph[node]:
            if child == start:
                path = [node]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                path.reverse()
                return [f"{a} -> {b}   [{graph[a][b]}]" for a, b in zip(path, path[1:] + [start])]
            if child in members and child not in parent:
                parent[child] = node
                queue.append(child)
    return component


def test_no_import_cycle():
    graph = _graph()
    cycles = [c for c in _sccs(graph) if len(c) > 1]
    report = [f"cycle among {c}:\n    " + "\n    ".join(_cycle(graph, c)) for c in cycles]
    assert not cycles, "module-level import cycles:\n  " + "\n  ".join(report)


def test_cycle_finder_finds_a_cycle():
    graph = {"a": {"b": ""}, "b": {"c": ""}, "c": {"a": ""}, "d": {"a": ""}}
    assert [c for c in _sccs(graph) if len(c) > 1] == [["a", "b", "c"]]


# ------------------------------------------------------------------------------------------------------------
# 4. Function-level imports of OpenPrim modules only where the laziness is the point.

def test_function_level_imports():
    violations = [f"{imp.where()}: `{imp.text}` in a function of {imp.module.name}"
                  for imp in IMPORTS
                  if imp.in_function and imp.module.path not in LAZY_IMPORTS
                  and any(_openprim(t) for t in imp.targets)]
    assert not violations, (
        "OpenPrim modules imported inside functions (import them at module level, or add the file to "
        "LAZY_IMPORTS with the reason the laziness is needed):\n  " + "\n  ".join(violations))

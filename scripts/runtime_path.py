"""Import openprim from a checkout without installing it: the GPU machine has numpy, the driver bindings and
PyTorch but no MLIR (and the runtime, the cache's hits and the frontends need neither MLIR nor the compiler)."""
import importlib.abc
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("base", "dialect", "pyfrontend", "kernels", "solvers", "passes", "backends", "tuning", "runtime")


class _Checkout(importlib.abc.MetaPathFinder):
    """`openprim` from this checkout (pyproject's package-dir: driver/ is the package itself, every other
    top-level folder X is openprim.X)."""

    def find_spec(self, name, path=None, target=None):
        parts = name.split(".")
        if parts[0] != "openprim" or len(parts) > 2 or (len(parts) == 2 and parts[1] not in PACKAGES):
            return None
        folder = os.path.join(ROOT, "driver" if len(parts) == 1 else parts[1])
        return importlib.util.spec_from_file_location(name, os.path.join(folder, "__init__.py"),
                                                      submodule_search_locations=[folder])


def use_checkout() -> None:
    """Make `import openprim...` work: the installed package when there is one, else this checkout."""
    try:
        import openprim.runtime  # noqa: F401 - installed (editable or not)
    except ImportError:
        for name in [m for m in sys.modules if m == "openprim" or m.startswith("openprim.")]:
            del sys.modules[name]
        sys.meta_path.insert(0, _Checkout())


def import_runtime():
    use_checkout()
    import openprim.runtime
    return openprim.runtime

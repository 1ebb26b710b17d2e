"""Import openprim's runtime from a checkout without installing it: the GPU machine has numpy and the
driver bindings but no MLIR (and the runtime needs neither MLIR nor the compiler)."""
import importlib.util
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_runtime():
    try:
        import openprim.runtime
        return openprim.runtime
    except ImportError:
        pass
    pkg = types.ModuleType("openprim")
    pkg.__path__ = [os.path.join(ROOT, "driver")]  # the folder driver/ is the package openprim itself
    sys.modules["openprim"] = pkg
    for sub in ("base", "runtime"):  # the runtime imports openprim.base (errors, dtypes, targets) only
        where = os.path.join(ROOT, sub)
        spec = importlib.util.spec_from_file_location(f"openprim.{sub}", os.path.join(where, "__init__.py"),
                                                      submodule_search_locations=[where])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[f"openprim.{sub}"] = mod
        setattr(pkg, sub, mod)
        spec.loader.exec_module(mod)
    return mod

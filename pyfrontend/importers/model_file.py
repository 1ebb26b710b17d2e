"""A model file: Python that defines `build(**kwargs)` returning a Graph (examples/ has some).

The file is the user's code: whatever it raises becomes one line that names its line in the file.
"""
from __future__ import annotations

import importlib.util
import os
import sys

from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.graph import Graph


def load(path, /, **kwargs) -> Graph:
    """What the file's build(**kwargs) returns."""
    spec = importlib.util.spec_from_file_location("openprim_model", path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(mod)
        if not hasattr(mod, "build"):
            raise OpenPrimError(f"{path}: defines no build() function returning a Graph")
        graph = mod.build(**kwargs)
    except OpenPrimError:
        raise
    except Exception as e:  # the user's file: say where it failed, in one line
        raise OpenPrimError(_where_raised(e, path)) from None
    finally:
        sys.path.pop(0)
    if not isinstance(graph, Graph):
        raise OpenPrimError(f"{path}: build() returned {type(graph).__name__}, not an openprim.pyfrontend.Graph")
    return graph


def _where_raised(e: Exception, path: str) -> str:
    """`file:line: error: Type: message` at the innermost frame of the model file, else `file: ...`."""
    tb, at = e.__traceback__, None
    while tb:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(path):
            at = tb
        tb = tb.tb_next
    where = f"{path}:{at.tb_lineno}: error" if at else f"{path}"
    return f"{where}: {type(e).__name__}: {e}"

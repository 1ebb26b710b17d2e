import contextlib
import os
import sys
import zlib

import numpy as np
import pytest

from openprim.backends.rocdl import compiler as rocdl
from openprim.base.errors import OpenPrimError


def _hub_kernels_from_site_packages():
    """`python -m pytest` puts the checkout on sys.path, where this repository's `kernels/` folder shadows the
    `kernels` package that transformers (5.x) imports from its integrations. Import that one first, from
    site-packages, so the language-model tests see transformers as users have it."""
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != root]
    try:
        with contextlib.suppress(ImportError):
            import kernels  # noqa: F401 - the hub package, cached in sys.modules for transformers
    finally:
        sys.path[:] = saved


_hub_kernels_from_site_packages()


@pytest.fixture
def rng(request):
    """A generator seeded from the test name (parameters included): fixed data per parametrization."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


@pytest.fixture(autouse=True, scope="session")
def _no_user_tuning_db(tmp_path_factory):
    """Compiles in the tests never read the user's tuning database, nor search unless a test asks, nor use
    the compile cache (a hit would hide what a test patched; test_cache.py turns it on in a temporary dir)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENPRIM_USER_DB_PATH", str(tmp_path_factory.mktemp("tuning") / "user.sqlite"))
    mp.setenv("OPENPRIM_CACHE", "0")
    for var in ("OPENPRIM_FIND_MODE", "OPENPRIM_FIND_ENFORCE"):
        mp.delenv(var, raising=False)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def toolchain():
    """llvmlite and ld.lld (these kernels call no device library)."""
    try:
        import llvmlite  # noqa: F401
        rocdl.ld_lld()
    except (ImportError, OpenPrimError) as e:
        pytest.skip(f"AMDGPU toolchain incomplete: {e}")


@pytest.fixture
def assembly(monkeypatch):
    """The assembly of every module rocdl.code_object emits an object from (a clone: codegen edits IR)."""
    import llvmlite.binding as llb
    texts = []
    emit_object = llb.TargetMachine.emit_object

    def recording(tm, module):
        texts.append(tm.emit_assembly(module.clone()))
        return emit_object(tm, module)
    monkeypatch.setattr(llb.TargetMachine, "emit_object", recording)
    return texts

# lit configuration of OpenPrim's FileCheck tests: `lit test/lit -v` (or `ctest` through CMake).
#
# Every test is a .mlir file whose RUN lines call `openprim-opt` and `openprim` (the installed console scripts
# of the `openprim` package) and `filecheck` (the Python FileCheck of the `filecheck` package). Both are found
# next to the Python running lit first, then on PATH, and substituted by absolute paths. Either can be
# overridden: `lit --param filecheck=/path/to/llvm/bin/FileCheck --param openprim_opt=... test/lit`
# (the tests are written to pass with LLVM's FileCheck too).
#
# Layout: one folder per pass (prim-fuse/, prim-select/, prim-tile/, prim-lower/, prim-pipeline/), plus
# dialect/ (parsing, verification, diagnostics) and opt/ (the driver). CHECK lines pin what a pass
# produces (ops, operands, attributes, folded constant values); tunable values chosen by the solver
# heuristics (prim.params, tile sizes, vector widths) are matched by pattern, not pinned.
# Known bugs are tests marked `XFAIL: *` whose header names the bug: once it is fixed the test reports
# XPASS (a failure), and the XFAIL line should be removed.
import os
import shutil
import sys

import lit.formats

config.name = "OpenPrim"
config.suffixes = [".mlir"]
config.excludes = ["Output"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = config.test_source_root  # Output/ folders are git-ignored
# lit's internal shell: builtins such as `not` work without an external `not` binary.
config.test_format = lit.formats.ShTest(execute_external=False)

_search = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


def _tool(name, module, param):
    """--param `param`, else the absolute path of console script `name`, else `python -m module`."""
    if lit_config.params.get(param):
        return lit_config.params[param]
    path = shutil.which(name, path=_search)
    if path:
        return path
    lit_config.note(f"{name} not found on PATH; using {sys.executable} -m {module}")
    return f"{sys.executable} -m {module}"


# Word-bounded patterns, so `openprim-opt` inside a file name or a CHECK line is left alone.
config.substitutions.append((r"(?<![\w/.-])openprim-opt(?![\w.-])", _tool("openprim-opt", "openprim.opt", "openprim_opt")))
config.substitutions.append((r"(?<![\w/.-])filecheck(?![\w.-])", _tool("filecheck", "filecheck", "filecheck")))
config.substitutions.append((r"(?<![\w/.-])openprim(?![\w.-])", _tool("openprim", "openprim.cli", "openprim")))

# Deterministic runs: lit passes only a few variables through, and never a solver forced from the
# environment (tests that want one set it with `env OPENPRIM_SOLVER=...`).
# Nor a find mode, and never the user's tuning database (a test that wants one makes it in its RUN lines).
for _var in ("OPENPRIM_SOLVER", "OPENPRIM_FIND_MODE", "OPENPRIM_FIND_ENFORCE"):
    config.environment.pop(_var, None)
config.environment["OPENPRIM_USER_DB_PATH"] = os.path.join(config.test_exec_root, "Output", "no-user-db.sqlite")


def _amdgpu_toolchain():
    """`REQUIRES: amdgpu-toolchain`: llvmlite, ld.lld and the ROCm device libraries (CI installs them)."""
    try:
        import llvmlite  # noqa: F401
        from openprim.backends.rocdl import compiler as rocdl
        rocdl.ld_lld(), rocdl.device_libs()
    except Exception as e:  # ImportError or OpenPrimError: the tests that need it report UNSUPPORTED
        lit_config.note(f"AMDGPU tests unsupported: {e}")
        return False
    return True


if _amdgpu_toolchain():
    config.available_features.add("amdgpu-toolchain")

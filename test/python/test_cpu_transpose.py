"""Transposes (kernels/cpu/transpose.py on the CPU): the canonical form (dims of size 1 dropped, runs merged),
and random permutations of random shapes against numpy, bit for bit, in every element type it takes: rows
copied where the last dim stays last, register tiles where it moves (ragged tiles masked at both ends),
threaded when large."""
from __future__ import annotations

import numpy as np
import pytest

import openprim
from openprim.base.dtypes import from_storage, to_storage
from openprim.kernels.cpu.transpose import canonical
from openprim.pyfrontend import Graph

from helpers import TARGET, run_on_gpu


@pytest.mark.parametrize("shape,perm,want", [
    ((3, 3, 512, 512), (2, 3, 0, 1), ([9, 262144], [1, 0])),
    ((8, 3, 224, 224), (0, 2, 3, 1), ([8, 3, 50176], [0, 2, 1])),
    ((1, 512, 9, 512), (2, 1, 0, 3), ([512, 9, 512], [1, 0, 2])),
    ((1, 1), (1, 0), ([1], [0])),
    ((4, 1, 5), (2, 1, 0), ([4, 5], [1, 0])),
    ((2, 3, 4), (0, 1, 2), ([24], [0]))])
def test_canonical(shape, perm, want):
    assert canonical(list(shape), list(perm)) == want


CASES = [((37, 19), (1, 0)), ((5, 7, 3), (2, 0, 1)), ((2, 17, 33, 5), (0, 3, 1, 2)), ((4, 6, 10), (1, 0, 2)),
         ((1, 12, 197, 64), (0, 2, 1, 3)), ((3, 3, 40, 24), (2, 3, 0, 1)), ((16, 32), (1, 0)),
         ((2, 3, 5, 7, 11), (4, 2, 0, 3, 1)), ((300, 257), (1, 0)), ((9, 1, 130), (2, 1, 0))]


@pytest.mark.parametrize("shape,perm", CASES)
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i64", "i32"])
def test_transpose_exact(shape, perm, dtype):
    rng = np.random.default_rng(len(shape) * 31 + sum(shape))
    if dtype in ("i64", "i32"):
        x = rng.integers(-2 ** 30, 2 ** 30, shape).astype({"i64": np.int64, "i32": np.int32}[dtype])
    else:
        x = from_storage(to_storage(rng.standard_normal(shape), dtype), dtype)
    g = Graph(dtype=dtype if dtype[0] in "fb" else "f32")
    g.output(g.transpose(g.input("x", shape, dtype), list(perm)))
    got = run_on_gpu(g, [x])[2] if TARGET != "cpu" else openprim.compile(g)(x)
    np.testing.assert_array_equal(np.asarray(got), np.transpose(x, perm))

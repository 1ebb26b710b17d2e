"""The IR contract attributes (dialect/contract.py): every writer reads back through its reader, the text
writers parse to what the readers expect, and no compiler module spells a contract attribute itself."""
from __future__ import annotations

import ast
import os
import re

import pytest
from mlir import ir

from openprim import dialect
from openprim.dialect import contract

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PACKAGES = ("base", "dialect", "pyfrontend", "kernels", "solvers", "passes", "backends", "tuning", "runtime", "driver")
NAMES = [v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)]


def _function(text: str):
    """(module, its first function): the module too, which keeps the function alive."""
    module = ir.Module.parse(text)
    return module, module.body.operations[0].operation


@pytest.fixture
def fn():
    with dialect.new_context(), ir.Location.unknown():
        module, f = _function("func.func @f() { return }")
        yield f


def test_readers_default_when_absent(fn):
    assert [contract.solver(fn), contract.problem(fn), contract.choice(fn), contract.measured_us(fn),
            contract.batch_chunks(fn), contract.input_names(fn), contract.scratch_bytes(fn)] == [None] * 7
    assert contract.in_place(fn) == ()
    assert contract.params(fn) == {} and not contract.is_fused(fn) and contract.element_strides(fn, 3) == [1, 1, 1]


def test_writers_round_trip(fn):
    contract.set_solver(fn, "conv_direct")
    contract.set_params(fn, {"ft": 16, "wt": 4})
    contract.set_problem(fn, "conv2d-1x8x8x8")
    contract.set_choice(fn, "heuristic")
    contract.set_measured_us(fn, 12.5)
    contract.mark_fused(fn)
    contract.set_batch_chunks(fn, 4)
    contract.set_input_names(fn, ["x", "r"])
    contract.set_scratch_bytes(fn, 4096)
    contract.set_kernel_op(fn, "conv2d")
    contract.mark_kernel(fn)
    assert (contract.solver(fn), contract.params(fn), contract.problem(fn), contract.choice(fn),
            contract.measured_us(fn), contract.is_fused(fn), contract.batch_chunks(fn), contract.input_names(fn),
            contract.scratch_bytes(fn)) == \
        ("conv_direct", {"ft": 16, "wt": 4}, "conv2d-1x8x8x8", "heuristic", 12.5, True, 4, ["x", "r"], 4096)
    # the printed form the lit tests pin
    printed = str(fn)
    for text in ('prim.solver = "conv_direct"', "prim.params = {ft = 16 : i64, wt = 4 : i64}", "prim.fused",
                 "prim.batch_chunks = 4 : i64", 'prim.input_names = ["x", "r"]', 'prim.op = "conv2d"', "prim.kernel",
                 "openprim.scratch_bytes = 4096 : i64", 'prim.choice = "heuristic"'):
        assert text in printed, (text, printed)


def test_text_writers_parse_to_the_readers():
    attrs = ", ".join([contract.in_place_text(2), contract.element_strides_text((1, 2, 2, 1)),
                       contract.role_text("epilogue"), contract.aux_text(3)])
    with dialect.new_context():
        module, f = _function(f"func.func @k() attributes {{{attrs}}} {{ return }}")
        assert contract.in_place(f) == (2,) and contract.element_strides(f, 4) == [1, 2, 2, 1]
        assert ir.StringAttr(f.attributes[contract.ROLE]).value == "epilogue"
        assert ir.IntegerAttr(f.attributes[contract.AUX]).value == 3


def _docstrings(tree) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _spellings() -> dict[str, list[str]]:
    """{file: the contract attribute names its string literals (docstrings aside) spell}."""
    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in NAMES) + r")(?!\w)")
    found = {}
    for package in PACKAGES:
        for dirpath, _, filenames in os.walk(os.path.join(ROOT, package)):
            for name in filenames:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
                if not name.endswith(".py") or rel == "dialect/contract.py":
                    continue
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), filename=rel)
                skip = _docstrings(tree)
                hits = sorted({m for node in ast.walk(tree) if isinstance(node, ast.Constant)
                               and isinstance(node.value, str) and id(node) not in skip
                               for m in pattern.findall(node.value)})
                if hits:
                    found[rel] = hits
    return found


def test_contract_attributes_are_spelled_only_in_the_contract():
    found = _spellings()
    assert not found, f"contract attributes spelled outside dialect/contract.py (use its writers/readers): {found}"

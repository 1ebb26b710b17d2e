"""prim-gpu-map's grid forms computed, not only printed: loop nests mapped onto (block_x, thread_x) and then run on
the CPU (an scf.parallel with a mapping is still a loop nest: lowered to loops and JIT-compiled by MLIR's
ExecutionEngine), against numpy. No GPU is needed: what is checked is that every form (a thread per element,
several elements T apart, runs of consecutive innermost iterations) visits each iteration exactly once with
its own indices, lower bounds and steps included; the lit tests (test/lit/prim-gpu-map) check the forms' IR.

Cases: runs of 8 i16 (16 bytes) over an NHWC-like map with a broadcast operand, runs of 4 f32 with a lower
bound and a step, runs of 16 i8, a grid whose last block is partly empty, an innermost count that no run
divides (the other forms), and a nest with a loop of its own (a sum per output: no runs).
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from mlir import ir, passmanager
from mlir.execution_engine import ExecutionEngine
from mlir.runtime import get_ranked_memref_descriptor

from openprim import passes
from openprim.dialect import new_context

TO_LLVM = ("builtin.module(convert-scf-to-cf,expand-strided-metadata,finalize-memref-to-llvm,convert-arith-to-llvm,"
           "convert-cf-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts)")
NUMPY = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "f32": np.float32}


def run_mapped(text: str, arrays: list[np.ndarray]) -> str:
    """Map `text`'s @k with prim-gpu-map, run it on the CPU on `arrays` (written in place); the mapped IR."""
    with new_context():
        module = ir.Module.parse(text)
        passes.run(module, "prim-gpu-map")
        mapped = str(module)
        passmanager.PassManager.parse(TO_LLVM).run(module.operation)
        engine = ExecutionEngine(module, opt_level=2)
        engine.invoke("k", *[ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))) for a in arrays])
    return mapped


def elementwise(shape, dtype, lbs=None, steps=None, bcast_last=False) -> str:
    """@k(a, b, c): c[i] = a[i] + b[i] (b[i_last] when bcast_last) over lbs..shape step steps."""
    n = len(shape)
    lbs, steps = lbs or [0] * n, steps or [1] * n
    t = f"memref<{'x'.join(map(str, shape))}x{dtype}>"
    bt = f"memref<{shape[-1]}x{dtype}>" if bcast_last else t
    consts = sorted(set(lbs + steps + list(shape)))
    ivs = [f"%i{d}" for d in range(n)]
    add = "arith.addf" if dtype.startswith("f") else "arith.addi"
    return f"""
func.func @k(%a: {t}, %b: {bt}, %c: {t}) attributes {{llvm.emit_c_interface}} {{
  {chr(10).join(f'%c{v} = arith.constant {v} : index' for v in consts)}
  scf.parallel ({', '.join(ivs)}) = ({', '.join(f'%c{v}' for v in lbs)}) to ({', '.join(f'%c{v}' for v in shape)})
      step ({', '.join(f'%c{v}' for v in steps)}) {{
    %x = memref.load %a[{', '.join(ivs)}] : {t}
    %y = memref.load %b[{ivs[-1] if bcast_last else ', '.join(ivs)}] : {bt}
    %s = {add} %x, %y : {dtype}
    memref.store %s, %c[{', '.join(ivs)}] : {t}
    scf.reduce
  }}
  return
}}"""


CASES = [  # id, shape (upper bounds), dtype, lower bounds, steps, broadcast, the mapped form (form_of)
    ("nhwc_i16_runs8_bcast", (2, 6, 5, 16), "i16", None, None, True, "runs"),
    ("f32_lb_step_no_run", (3, 20), "f32", [1, 2], [1, 2], False, "elements"),  # 2 x 9: 9 % 4 != 0
    ("f32_runs4_lb_step_even", (3, 33), "f32", [0, 1], [1, 2], False, "runs"),  # 3 x 16: runs of 4
    ("i8_runs16", (5, 48), "i8", None, None, False, "runs"),
    ("partial_last_block", (7, 3, 40), "f32", None, None, False, "runs"),       # 210 runs: one block of 224
    ("no_run_divides", (4, 10, 10), "f32", None, None, True, "elements"),
    ("outer_lb_step", (9, 33), "f32", [1, 1], [2, 2], False, "runs"),           # 4 x 16: lower bounds, steps
    ("t_apart", (1024, 6), "f32", None, None, False, "apart"),                  # 4 elements 256 apart
    ("i32_runs4", (8, 256), "i32", None, None, False, "runs"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_iteration_once(case):
    what, shape, dtype, lbs, steps, bcast, form = case
    rng = np.random.default_rng(len(what))
    a = (rng.standard_normal(shape) * 50).astype(NUMPY[dtype])
    b = (rng.standard_normal(shape[-1:] if bcast else shape) * 50).astype(NUMPY[dtype])
    c = np.full(shape, 77, NUMPY[dtype])
    mapped = run_mapped(elementwise(shape, dtype, lbs, steps, bcast), [a, b, c])
    want = np.full(shape, 77, NUMPY[dtype])
    region = tuple(slice(lo, None, st) for lo, st in zip(lbs or [0] * len(shape), steps or [1] * len(shape)))
    want[region] = (a + b)[region]          # iterations outside lb..ub step s are never written
    np.testing.assert_array_equal(c, want)
    assert form_of(mapped) == form, mapped


def form_of(mapped: str) -> str:
    """Which grid form prim-gpu-map chose: "runs" (a guarded loop over a run), "apart" (an unguarded loop
    over elements T apart) or "elements" (a guarded element per thread)."""
    guarded, loop = "scf.if" in mapped, "scf.for" in mapped
    return "runs" if guarded and loop else "apart" if loop else "elements"


def test_nest_with_its_own_loop():
    """A sum per output row keeps one thread per output (no runs) and stays right."""
    text = """
func.func @k(%a: memref<16x100xi32>, %out: memref<16xi32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c100 = arith.constant 100 : index
  %zero = arith.constant 0 : i32
  scf.parallel (%i) = (%c0) to (%c16) step (%c1) {
    %sum = scf.for %k = %c0 to %c100 step %c1 iter_args(%acc = %zero) -> (i32) {
      %x = memref.load %a[%i, %k] : memref<16x100xi32>
      %y = arith.addi %acc, %x : i32
      scf.yield %y : i32
    }
    memref.store %sum, %out[%i] : memref<16xi32>
    scf.reduce
  }
  return
}"""
    a = np.random.default_rng(0).integers(-1000, 1000, (16, 100)).astype(np.int32)
    out = np.zeros(16, np.int32)
    mapped = run_mapped(text, [a, out])
    np.testing.assert_array_equal(out, a.sum(1))
    assert mapped.count("scf.for") == 1, mapped

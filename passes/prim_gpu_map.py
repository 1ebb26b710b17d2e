"""prim-gpu-map: every loop nest of a bufferized kernel onto a GPU grid, one launch per nest.

After `convert-linalg-to-parallel-loops`, a kernel function is a sequence of top-level `scf.parallel`
nests (one per linalg op, reductions as `scf.for` inside) between buffer allocations. Each nest
becomes a 2-d `scf.parallel` mapped to (block_x, thread_x) that `convert-parallel-loops-to-gpu`
turns into one `gpu.launch`:

    scf.parallel (%i, %j, %k) = (0, 0, 0) to (A, B, C)        // any rank
 => scf.parallel (%b, %t) = (0, 0) to (ceil(A*B*C / T), T) {   // mapping = [block_x, thread_x]
      %lin = %b * T + %t
      scf.if %lin < A*B*C { %i, %j, %k = delinearize(%lin); <body> }
    }

or, when A*B*C divides by T*F, F elements per thread, T apart (several loads in flight per thread):

 => scf.parallel (%b, %t) = (0, 0) to (A*B*C / (T*F), T) {
      scf.for %f = 0 to F { %lin = (%b * F + %f) * T + %t; <delinearize; body> }
    }

or, when the body has no loop of its own and C divides by F, a run of F consecutive innermost iterations
per thread (F: 16 bytes of the narrowest element loaded, 8 f16), its indices delinearized once:

 => scf.parallel (%b, %t) = (0, 0) to (ceil(A*B*C / F / T), T) {
      scf.if %lin < A*B*C / F { %i, %j, %c = delinearize(%lin) over (A, B, C / F)
                                scf.for %f = 0 to F { %k = %c * F + %f; <body> } }
    }

LLVM unrolls the run and its load-store vectorizer merges the run's accesses where the operands are
contiguous along that dimension (an NHWC add of f16 maps: one 16-byte load per operand and one store per
thread, where the other forms issued eight 2-byte ones and delinearized each element with 64-bit
divisions). The innermost loop dimension is the fastest-varying one in %lin, so consecutive threads touch
consecutive addresses (coalesced). Kernel parameters are marked noalias and 16-byte aligned
(prim-lower), so LLVM may issue the F iterations' loads before their stores. Serial code left at the
top level (a reduction whose parallel dimensions were all of size 1) runs in a one-thread launch. Kernels written directly in the gpu
dialect (prim.solver GEMM kernels) are left alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, scf

from openprim.backends.gpu_common import constant_int
from openprim.base.errors import OpenPrimError
from openprim.dialect import kernels_module

NAME = "prim-gpu-map"
HOST_OPS = ("arith.constant", "memref.alloc", "memref.dealloc", "memref.get_global", "func.return", "gpu.launch",
            "memref.cast", "memref.collapse_shape", "memref.reinterpret_cast",  # views
            "nvgpu.tma.create.descriptor",  # TMA maps
            "llvm.mlir.undef")  # constant-like: canonicalization hoists it, outlining sinks it back


def _index(v: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), v).result


def _const(v: ir.Value) -> int:
    return constant_int(v, "prim-gpu-map: a loop bound (kernels have static shapes)")


def _mapping(processors: list[str]) -> ir.Attribute:
    dims = ", ".join(f"#gpu.loop_dim_map<processor = {p}, map = (d0) -> (d0), bound = (d0) -> (d0)>"
                     for p in processors)
    return ir.Attribute.parse(f"[{dims}]")


def _grid_loop(total: int, threads: int):
    """The (block_x, thread_x) scf.parallel over ceil(total / threads) x threads, and its body block."""
    idx = ir.IndexType.get()
    c0, c1 = _index(0), _index(1)
    op = ir.Operation.create(
        "scf.parallel", results=[], operands=[c0, c0, _index(math.ceil(total / threads)), _index(threads), c1, c1],
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([2, 2, 2, 0]),
                    "mapping": _mapping(["block_x", "thread_x"])}, regions=1)
    block = op.regions[0].blocks.append(idx, idx)
    with ir.InsertionPoint(block):
        ir.Operation.create("scf.reduce", operands=[], regions=0)
    return op, block


def _thread_body(block, total: int, threads: int, per_thread: int):
    """In `block` of a grid loop: the element index `lin` and the point where the body goes.

    per_thread == 1: one element, `scf.if lin < total`. Otherwise each thread takes per_thread elements
    `threads` apart (total divides evenly, so no guard): independent loads in flight per thread, and
    each step still coalesced across the block."""
    terminator = block.operations[len(block.operations) - 1]
    with ir.InsertionPoint(terminator):
        b, t = block.arguments
        if per_thread == 1:
            lin = arith.AddIOp(arith.MulIOp(b, _index(threads)).result, t).result
            inside = arith.CmpIOp(arith.CmpIPredicate.ult, lin, _index(total)).result
            region = scf.IfOp(inside)
            body = region.then_block
        else:
            region = scf.ForOp(_index(0), _index(per_thread), _index(1))
            body = region.body
    with ir.InsertionPoint(body):
        end = scf.YieldOp([])
    if per_thread > 1:
        with ir.InsertionPoint(end):
            chunk = arith.AddIOp(arith.MulIOp(b, _index(per_thread)).result, region.induction_variable).result
            lin = arith.AddIOp(arith.MulIOp(chunk, _index(threads)).result, t).result
    return lin, end


def _threads(total: int, limit: int) -> int:
    return min(limit, max(32, (total + 31) // 32 * 32))


def _narrowest_load_bytes(loop: ir.Operation) -> int:
    """Bytes of the narrowest element the loop body loads (4 when it loads nothing narrower)."""
    widths = [4]

    def visit(op):
        if op.name == "memref.load":
            t = op.operands[0].type.element_type
            widths.append(max(1, getattr(t, "width", 32) // 8))
        return ir.WalkResult.ADVANCE
    loop.walk(visit)
    return max(1, min(widths))


def _delinearized(lin: ir.Value, counts: list[int]) -> list[ir.Value]:
    """The iteration numbers of each dimension of `lin` (row-major over counts: the innermost fastest)."""
    rest, out = lin, [None] * len(counts)
    for d in reversed(range(len(counts))):
        out[d] = arith.RemUIOp(rest, _index(counts[d])).result if d else rest
        rest = arith.DivUIOp(rest, _index(counts[d])).result if d else rest
    return out


def _indices(numbers: list[ir.Value], lbs: list[int], steps: list[int]) -> list[ir.Value]:
    """The loop indices lb + number * step of each dimension."""
    out = []
    for i, lb, step in zip(numbers, lbs, steps):
        if step != 1:
            i = arith.MulIOp(i, _index(step)).result
        out.append(arith.AddIOp(i, _index(lb)).result if lb else i)
    return out


def _has_loops(loop: ir.Operation) -> bool:
    """Whether the nest's body runs loops of its own (a reduction per element): each would then run `run`
    times in a row in one thread, so the runs' fewer threads would be slower, not faster."""
    found = []

    def visit(op):
        if op.name in ("scf.for", "scf.while") or (op.name == "scf.parallel" and op != loop):
            found.append(op)
        return ir.WalkResult.ADVANCE
    loop.walk(visit)
    return bool(found)


def _runs(loop: ir.Operation, counts: list[int], lbs: list[int], steps: list[int], threads: int, run: int):
    """The grid for a loop-free nest whose innermost count divides by `run`: each thread `run` consecutive innermost
    iterations (an scf.for, unrolled by LLVM), the indices delinearized once per run, not per element; a
    warp covers 32 runs in a row, and where the operands are contiguous along that dimension LLVM's
    load-store vectorizer merges a run's accesses (16 bytes: 8 f16 or 4 f32). Returns (the point where
    the body goes, the loop indices)."""
    total = math.prod(counts) // run
    threads = _threads(total, threads)
    with ir.InsertionPoint(loop), loop.location:
        grid, block = _grid_loop(total, threads)
        lin, anchor = _thread_body(block, total, threads, 1)
        with ir.InsertionPoint(anchor):
            numbers = _delinearized(lin, counts[:-1] + [counts[-1] // run])
            first = arith.MulIOp(numbers[-1], _index(run)).result
            outer = _indices(numbers[:-1], lbs[:-1], steps[:-1])
            each = scf.ForOp(_index(0), _index(run), _index(1))
            with ir.InsertionPoint(each.body):
                end = scf.YieldOp([])
            with ir.InsertionPoint(end):
                inner = _indices([arith.AddIOp(first, each.induction_variable).result], lbs[-1:], steps[-1:])
    return end, outer + inner


def map_parallel(loop: ir.Operation, threads: int, per_thread: int = 4) -> None:
    """Replace one top-level scf.parallel by its (block_x, thread_x) form."""
    n = len(loop.regions[0].blocks[0].arguments)
    lbs = [_const(v) for v in list(loop.operands)[:n]]
    ubs = [_const(v) for v in list(loop.operands)[n:2 * n]]
    steps = [_const(v) for v in list(loop.operands)[2 * n:3 * n]]
    counts = [max(0, -(-(u - lo) // s)) for lo, u, s in zip(lbs, ubs, steps)]
    total = math.prod(counts)
    if total == 0:
        loop.erase()
        return
    per_thread *= 4 // _narrowest_load_bytes(loop)   # 16 bytes in flight per thread and load stream
    if per_thread > 1 and counts[-1] % per_thread == 0 and not _has_loops(loop):
        anchor, ivs = _runs(loop, counts, lbs, steps, threads, per_thread)
    else:
        threads = _threads(total, threads)
        per_thread = next(f for f in (per_thread, 4, 2, 1) if f == 1 or total % (threads * f) == 0)
        with ir.InsertionPoint(loop), loop.location:
            grid, block = _grid_loop(total // per_thread if per_thread > 1 else total, threads)
            lin, anchor = _thread_body(block, total, threads, per_thread)
            with ir.InsertionPoint(anchor):
                ivs = _indices(_delinearized(lin, counts), lbs, steps)
    old = loop.regions[0].blocks[0]
    for arg, iv in zip(old.arguments, ivs):
        arg.replace_all_uses_with(iv)
    for op in list(old.operations)[:-1]:  # all but scf.reduce
        op.operation.move_before(anchor)
    loop.erase()


def _within(op, ops) -> bool:
    while op is not None and op.name != "func.func":
        if op in ops:
            return True
        op = op.parent
    return False


def wrap_serial(fn: ir.Operation) -> None:
    """Runs of top-level ops that are neither buffers nor loop nests go into a one-iteration parallel
    loop (a one-thread launch): the host side of a kernel only allocates and launches."""
    block = fn.regions[0].blocks[0]
    runs, cur = [], []
    for op in [o.operation for o in block.operations]:
        if op.name in HOST_OPS or op.name == "scf.parallel":
            if cur:
                runs.append(cur)
            cur = []
        else:
            cur.append(op)
    for run in runs + ([cur] if cur else []):
        inside = set(run)
        for op in run:
            for r in op.results:
                if not all(_within(u.owner, inside) for u in r.uses):
                    raise OpenPrimError(f"prim-gpu-map: serial op '{op.name}' defines a value used by a launch")
        with ir.InsertionPoint(run[0]), run[0].location:
            c0, c1 = _index(0), _index(1)
            loop = ir.Operation.create(
                "scf.parallel", results=[], operands=[c0, c1, c1],
                attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 1, 0])}, regions=1)
            body = loop.regions[0].blocks.append(ir.IndexType.get())
            with ir.InsertionPoint(body):
                red = ir.Operation.create("scf.reduce", operands=[])
        for op in run:
            op.move_before(red)


@dataclass
class Options:
    NAME = NAME
    threads: int = 256        # threads per block of the generic mapping
    per_thread: int = 4       # elements per thread where the loop nest divides evenly

    def entries(self):
        return [(NAME, self.run)]

    def run(self, module_op):
        root = kernels_module(module_op) or module_op  # the kernels, never the graph
        with module_op.context, ir.Location.unknown():
            fns = []
            root.walk(lambda o: (fns.append(o) if o.name == "func.func" and len(o.regions[0].blocks) else None,
                                      ir.WalkResult.ADVANCE)[1])
            for fn in fns:
                wrap_serial(fn)
                for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
                    if op.name == "scf.parallel" and "mapping" not in op.attributes:
                        map_parallel(op, self.threads, self.per_thread)

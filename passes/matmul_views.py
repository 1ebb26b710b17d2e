"""Moving the view ops (reshape, transpose, slice) around a row-wise matmul, so that the chains of copies
an exported nn.MultiheadAttention leaves around its projections become one transpose each, or none.

A row-wise matmul y = act(x @ W + b) with a constant 2-D W computes every row of y from the same row of x
alone, and every column from one column of W and b. So
  - permuting the rows of y is permuting the rows of x:  rows_p(matmul(x)) == matmul(rows_p(x));
  - taking some columns of y is a matmul with those columns of W and b:  y[..., C] == matmul(x, W[:, C]).
torch.export writes MHA (batch_first) as: transpose [B,S,E] -> [S,B,E], one packed in-projection to 3E,
unflatten/transpose/select of q, k, v (slices: copies), a view [S, B*H, D] and a transpose per operand,
attention on [B,H,S,D], then a permute back to [S,B,H,D], the out-projection and a transpose to [B,S,E].
Every transpose and slice is a kernel.

Both rewrites work on index maps computed with numpy: the chain of view ops is replayed on the flat
positions of its source (arange), which says exactly which source element each result element is. That map
is then written as reshape -> transpose -> reshape when it is one (`as_one_transpose`: the positions are
an affine function of the result's index with the strides of some order of its axes), so no case analysis
of the ops in the chain is needed and a rewrite happens only when the new chain is provably the same map.
  split:  the uses of a matmul are view chains (q, k, v of a packed projection). Each becomes a matmul
          with the columns of W and b it reads, on the lhs before its row permutation (a transpose of the
          leading axes), followed by at most one transpose.
  rows:   a matmul whose only use is a view chain that permutes whole rows (the transpose back to
          [B,S,E]), and whose lhs is a view chain of another value (the heads merged from [B,H,S,D]): the
          permutation moves to the lhs chain, and both collapse into one transpose, or else one gather of
          whole rows (Swin's window reverse and roll back: the GEMM's result is then in the map's order,
          where the residual add becomes its epilogue).
A gather by constant indices (torch.roll) is a view op here too.
Each fires only when it leaves fewer transposes and slices than it removes, and split only when no column is
computed twice (the GEMMs together do the work of the one they replace).
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import dialect

from .rewrite import constant, create, index_constant, new_constant, producer, reshape, transpose

VIEWS = ("prim.reshape", "prim.transpose", "prim.slice")
# The largest matmul result whose views are replayed: the maps are numpy arrays of its size (int32), built
# per chain. ViT-B/16 at batch 32 (14.5 M positions per packed projection) spends about 8 s of its compile
# here on the 2-core machine; larger ones keep their view chains (a stride-based form of the maps would
# lift this).
MAX_POSITIONS = 1 << 25
COPIES = ("prim.transpose", "prim.slice", "prim.gather")  # the view ops that are kernels


def constant_gather(op: ir.Operation) -> np.ndarray | None:
    """The indices of a gather by a 1-d constant in range (torch.roll's), else None: a view op too."""
    if op.name != "prim.gather" or (const := producer(op.operands[1], "prim.constant")) is None:
        return None
    idx = dialect.to_numpy(const.attributes["value"])
    size = op.operands[0].type.shape[dialect.op_attrs(op)["axis"] % len(op.operands[0].type.shape)]
    return idx if idx.ndim == 1 and idx.size and 0 <= idx.min() and idx.max() < size else None


def is_view(op: ir.Operation) -> bool:
    return op.name in VIEWS or constant_gather(op) is not None


def replay(op: ir.Operation, idx: np.ndarray) -> np.ndarray:
    """The view op applied to an array of positions."""
    if op.name == "prim.reshape":
        return idx.reshape(op.result.type.shape)
    a = dialect.op_attrs(op)
    if op.name == "prim.transpose":
        return idx.transpose(a["perm"])
    if op.name == "prim.gather":
        return np.take(idx, constant_gather(op), axis=a["axis"] % idx.ndim)
    return idx[tuple(slice(s, e, st) for s, e, st in zip(a["starts"], a["ends"], a["steps"]))]


def as_row_gather(pos: np.ndarray, width: int, size: int) -> tuple[int, int, np.ndarray] | None:
    """(batches, rows per batch P, idx) when pos, positions in a source of `size` elements, takes whole rows
    of `width` and the same rows idx in every batch of P rows: the map is the source as [batches, P, width],
    gathered along axis 1 by idx (the most batches, the shortest idx), else None."""
    if pos.size % width or size % width:
        return None
    rows = pos.reshape(-1, width)
    first = rows[:, 0]
    if (first % width).any() or not np.array_equal(rows, first[:, None] + np.arange(width, dtype=rows.dtype)):
        return None
    src_rows, first = size // width, first // width
    batches = int(np.gcd(src_rows, len(first)))
    for nb in sorted((d for d in range(1, batches + 1) if batches % d == 0), reverse=True):
        p = src_rows // nb
        per = first.reshape(nb, -1) - (np.arange(nb, dtype=first.dtype) * p)[:, None]
        if (per == per[0]).all() and per.min() >= 0 and per.max() < p:
            return nb, p, per[0]
    return None


def emit_row_gather(v: ir.Value, gather: tuple[int, int, np.ndarray], width: int, out_shape, loc) -> ir.Value:
    nb, p, idx = gather
    flat = v if list(v.type.shape) == [nb, p, width] else reshape(v, [nb, p, width], loc)
    taken = create("gather", [flat, index_constant(idx, loc)], [nb, len(idx), width], v, {"axis": 1}, loc)
    return taken if list(out_shape) == [nb, len(idx), width] else reshape(taken, out_shape, loc)


def _view_chains(v: ir.Value):
    """[(ops, end)] for every path of view ops from v to a value used by something else, or None when a
    value on the way also has a non-view use (then the chain cannot be dropped)."""
    chains = []
    for use in v.uses:
        op = use.owner
        if not is_view(op):
            return None
        if all(is_view(u.owner) for u in op.result.uses) and len(list(op.result.uses)) > 0:
            sub = _view_chains(op.result)
            if sub is None:
                return None
            chains += [([op] + ops, end) for ops, end in sub]
        elif any(is_view(u.owner) for u in op.result.uses):
            return None
        else:
            chains.append(([op], op.result))
    return chains


def source_chain(v: ir.Value, accept=is_view, single_use: bool = False):
    """(source, ops) with v = ops applied in order to source, following back from v the ops that accept(op)
    says are views (single_use: and whose result has no other use)."""
    ops = []
    while (op := producer(v)) is not None and accept(op) and (not single_use or len(list(op.result.uses)) == 1):
        ops.insert(0, op)
        v = op.operands[0]
    return v, ops


def _index_type(size: int):
    """int32 positions where they fit: a third of the time of int64 on ViT-B/16's 14.5 M-position maps."""
    return np.int32 if size < 2**31 else np.int64


def positions(shape, ops) -> np.ndarray:
    size = int(np.prod(shape))
    idx = np.arange(size, dtype=_index_type(size)).reshape(shape)
    for op in ops:
        idx = replay(op, idx)
    return idx


def as_one_transpose(pos: np.ndarray):
    """(shape, perm) with pos == arange(pos.size).reshape(shape).transpose(perm).reshape(pos.shape) after
    dropping size-1 axes, or None when the map is not one transpose of a reshape."""
    flat = pos.reshape([d for d in pos.shape if d != 1])
    axis = 0
    while axis < flat.ndim:  # split an axis whose positions jump after every f steps into (d / f, f)
        steps = np.diff(flat[(0,) * axis + (slice(None),) + (0,) * (flat.ndim - axis - 1)])
        f = int(np.argmax(steps != steps[0])) + 1 if (steps != steps[0]).any() else flat.shape[axis]
        if 1 < f < flat.shape[axis] and flat.shape[axis] % f == 0:  # the outer factor may split again
            flat = flat.reshape(flat.shape[:axis] + (flat.shape[axis] // f, f) + flat.shape[axis + 1:])
        else:
            axis += 1
    base = int(flat.flat[0]) if flat.size else 0
    strides = [int(flat[(0,) * a + (1,) + (0,) * (flat.ndim - a - 1)]) - base for a in range(flat.ndim)]
    order = sorted(range(flat.ndim), key=lambda a: -strides[a])
    shape = [flat.shape[a] for a in order]
    expect = np.arange(flat.size, dtype=flat.dtype).reshape(shape).transpose(np.argsort(order))
    if base != 0 or not np.array_equal(expect, flat):
        return None
    return shape, [int(p) for p in np.argsort(order)]


def emit_views(v: ir.Value, shape, perm, out_shape, loc) -> ir.Value:
    if perm == sorted(perm):            # no move: one reshape
        return v if list(v.type.shape) == list(out_shape) else reshape(v, out_shape, loc)
    if list(v.type.shape) != list(shape):
        v = reshape(v, shape, loc)
    v = transpose(v, perm, loc)
    if list(v.type.shape) != list(out_shape):
        v = reshape(v, out_shape, loc)
    return v


def copies(ops) -> int:
    return sum(op.name in COPIES for op in ops)


def _row_matmul(op: ir.Operation):
    """(W, bias) as float64 [K, N] and [N] (bias None) of a matmul with constant 2-D weights and no
    residual, else None."""
    if op.name != "prim.matmul" or len(op.operands) > 3:
        return None
    w = constant(op.operands[1])
    if w is None or w.ndim != 2:
        return None
    if dialect.op_attrs(op).get("transpose_rhs", 0):
        w = w.T
    bias = constant(op.operands[2]) if len(op.operands) == 3 else None
    if len(op.operands) == 3 and (bias is None or bias.size != w.shape[1]):
        return None
    return w, None if bias is None else bias.reshape(-1)


def _new_matmul(op: ir.Operation, lhs: ir.Value, w: np.ndarray, bias, out_shape, loc) -> ir.Value:
    """A copy of matmul `op` on lhs with weights w [K, N] (stored as op stores them) and bias [N]."""
    stored = w.T if dialect.op_attrs(op).get("transpose_rhs", 0) else w
    operands = [lhs, new_constant(np.ascontiguousarray(stored), op.operands[1], loc),
                None if bias is None else new_constant(bias, op.operands[2], loc), None]
    attrs = {k: op.attributes[k] for k in op.attributes}
    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([v is not None for v in operands])
    return ir.Operation.create(op.name, results=[ir.RankedTensorType.get(list(out_shape), op.result.type.element_type)],
                               operands=[v for v in operands if v is not None], attributes=attrs, loc=loc).result


def erase_dead(ops) -> None:
    for op in reversed(ops):
        if not list(op.result.uses):
            op.erase()


def _replayable(op: ir.Operation) -> bool:
    return op.name == "prim.matmul" and int(np.prod(op.result.type.shape)) <= MAX_POSITIONS


def split_columns(op: ir.Operation) -> bool:
    """matmul whose uses are view chains -> one matmul per chain on the columns it reads, its lhs without
    a row-permuting transpose, then at most one transpose."""
    chains = _view_chains(op.result) if _replayable(op) else None
    if not chains:
        return False
    lhs, removed = op.operands[0], []
    lt = producer(lhs, "prim.transpose")
    if lt is not None and dialect.op_attrs(lt)["perm"][-1] == len(lhs.type.shape) - 1:
        lhs, removed = lt.operands[0], [lt]
    wb = _row_matmul(op) if copies(removed) + sum(copies(ops) for ops, _ in chains) else None
    if wb is None:
        return False
    w, bias = wb
    itype = _index_type(int(np.prod(op.result.type.shape)))
    rows = np.arange(int(np.prod(op.result.type.shape[:-1])), dtype=itype).reshape(op.result.type.shape[:-1])
    if removed:  # row r of the new lhs is row rows_in_old[r] of the old one
        rows = rows.transpose(np.argsort(dialect.op_attrs(lt)["perm"][:-1]))
    n = w.shape[1]
    new_row = np.empty(rows.size, dtype=itype)   # old row -> its row in the new lhs order
    new_row[rows.ravel()] = np.arange(rows.size, dtype=itype)
    plans = []
    for ops, end in chains:
        pos = positions(op.result.type.shape, ops)
        row, col = np.divmod(pos, n)
        cols = np.flatnonzero(np.bincount(col.ravel(), minlength=n))  # the columns read, sorted
        if pos.size != rows.size * len(cols):
            return False  # not every (row, column read) once
        # new result [lhs rows..., len(cols)]: element (r, j) is old (rows[r], cols[j])
        new_col = np.zeros(n, dtype=itype)
        new_col[cols] = np.arange(len(cols), dtype=itype)
        new_pos = new_row[row] * len(cols) + new_col[col]
        views = as_one_transpose(new_pos)
        if views is None:
            return False
        plans.append((ops, end, cols, views))
    if sum(len(cols) for _, _, cols, _ in plans) > n:  # chains reading the same columns: GEMM work twice
        return False
    before = copies(removed) + sum(copies(ops) for ops, _, _, _ in plans)
    after = sum(perm != sorted(perm) for _, _, _, (_, perm) in plans)
    if after >= before:
        return False
    loc = op.location
    with ir.InsertionPoint(op), loc:
        for ops, end, cols, (shape, perm) in plans:
            y = _new_matmul(op, lhs, w[:, cols], None if bias is None else bias[cols],
                            list(lhs.type.shape[:-1]) + [len(cols)], loc)
            end.replace_all_uses_with(emit_views(y, shape, perm, end.type.shape, loc))
    for ops, _, _, _ in plans:
        erase_dead(ops)
    erase_dead([*removed, op])
    return True


def permute_rows(op: ir.Operation) -> bool:
    """matmul whose only use is a view chain permuting its rows, on an lhs that is a view chain of another
    value -> the permutation folded into the lhs chain, which becomes at most one transpose."""
    chains = _view_chains(op.result) if _replayable(op) else None
    if not chains or len(chains) != 1 or not copies(chains[0][0]):
        return False
    (ops, end), = chains
    source, lhs_ops = source_chain(op.operands[0])
    wb = _row_matmul(op)
    if wb is None or any(len(list(o.result.uses)) != 1 for o in lhs_ops):
        return False
    n = op.result.type.shape[-1]
    pos = positions(op.result.type.shape, ops)
    if pos.shape[-1] != n or not np.array_equal(pos.reshape(-1, n) % n, np.broadcast_to(np.arange(n), (pos.size // n, n))):
        return False
    row_of = pos.reshape(-1, n)[:, 0] // n  # new row r is old row row_of[r]
    k = op.operands[0].type.shape[-1]
    lhs_pos = positions(source.type.shape, lhs_ops).reshape(-1, k)[row_of]
    lhs_shape = list(end.type.shape[:-1]) + [k]
    views = as_one_transpose(lhs_pos.reshape(lhs_shape))
    before = copies(ops) + copies(lhs_ops)
    gather = None
    if views is None or int(views[1] != sorted(views[1])) >= before:
        # else one gather of the lhs rows: fewer copies, or one no wider than the result's rows, moved
        # before the GEMM so that what reads the result in the map's order (a residual add) can fuse
        gather = as_row_gather(lhs_pos, k, int(np.prod(source.type.shape))) if before > 1 or k <= n else None
        if gather is None:
            return False
    w, bias = wb
    loc = op.location
    with ir.InsertionPoint(op), loc:
        lhs = emit_views(source, views[0], views[1], lhs_shape, loc) if gather is None else \
            emit_row_gather(source, gather, k, lhs_shape, loc)
        end.replace_all_uses_with(_new_matmul(op, lhs, w, bias, end.type.shape, loc))
    erase_dead([*lhs_ops, op, *ops])
    return True


def rewrite_views(fn) -> bool:
    """One sweep of both rewrites over the matmuls of graph function fn, in program order."""
    changed = False
    for op in [o.operation for o in fn.regions[0].blocks[0].operations if o.operation.name == "prim.matmul"]:
        changed = split_columns(op) or permute_rows(op) or changed
    return changed

"""Attention written out as separate ops, found in an imported Graph and replaced by one `attention` op.

Exporters spell attention as its parts: ONNX files (and traced modules such as BERT's self-attention) hold

    MatMul(Q, Transpose(K)) -> (Div | Mul by a scalar constant) -> (Add mask) -> Softmax(-1) -> MatMul(V)

or with the scale split over the operands, as PyTorch's TorchScript exporter writes scaled_dot_product_attention
(and so nn.MultiheadAttention): MatMul(Mul(Q, sqrt(scale)), Mul(Transpose(K), sqrt(scale))); the scale is the
product of every scalar factor found.

`match_attention(graph)` rewrites every such chain, whose intermediates have no other use, into
`graph.attention(q, k, v, mask, scale=...)` in place: the final MatMul's node becomes the attention node (its
result tensor, which later nodes use, stays), K's transpose is undone (a transpose whose perm swaps the last
two axes is dropped; another gets the swapped perm; so is a chain of reshapes and transposes that moves K's
elements as one transpose would, as torch.onnx's Reshape [B*H, S, D] -> Transpose -> Reshape [B, H, D, S]),
and the nodes left without uses are removed. On a target with a flash-attention kernel that keeps the S x S
scores out of memory; elsewhere prim-decompose expands it again into the same ops.

torch.onnx writes scaled_dot_product_attention with a NaN guard between the Softmax and the last MatMul,
Where(IsNaN(p), 0, p) (the ONNX importer's where(ne(p, p), 0, p)): a query row whose keys are all masked
(-inf) is 0 rather than NaN. The chain takes it, and the same guard goes on the attention's result instead
(a row of NaN there is such a row; the result is the same but where V itself holds NaN or inf).

torch.export spells a 4-d matmul as reshapes to 3-d around a batched one (aten.matmul -> view, bmm, view);
`merge_batched_matmuls` puts the 4-d matmul back first, so the chains are found on that path too.

Swin's shifted windows add a second mask through a 5-d view of the scores: reshape the [B nW, H, Sq, Sk]
scores to [B, nW, H, Sq, Sk], add the windows' mask [1, nW, 1, Sq, Sk], reshape back. That mask depends on
the window, b mod nW for batch row b, which prim.attention's mask expresses by tiling the batch (a mask
[nW, ..]): the relative-position bias and the windows' mask add into one constant [nW, H, Sq, Sk] (0.46 M
values for Swin-T's first stage) when both are constants, and q, k, v stay as they are.
"""
from __future__ import annotations

import itertools

import numpy as np

from openprim.base import ops as spec
from openprim.base.dtypes import from_storage, host_to_storage

from .graph import Graph, Node, Tensor


def _producers(graph: Graph) -> dict[int, Node]:
    return {id(n.result): n for n in graph.nodes}


def _consumers(graph: Graph) -> dict[int, list[Node]]:
    users: dict[int, list[Node]] = {}
    for n in graph.nodes:
        for o in n.operands:
            if o is not None:
                users.setdefault(id(o), []).append(n)
    return users


def _uses(graph: Graph) -> dict[int, int]:
    uses: dict[int, int] = {}
    for t in [o for n in graph.nodes for o in n.operands if o is not None] + list(graph.outputs):
        uses[id(t)] = uses.get(id(t), 0) + 1
    return uses


def _scalar(node: Node | None) -> float | None:
    """The value of a one-element constant node, else None."""
    if node is None or node.op != "constant" or node.value.size != 1:
        return None
    return float(from_storage(node.value, node.result.dtype).reshape(()))


def _plain_matmul(node: Node | None) -> bool:
    return node is not None and node.op == "matmul" and node.operands[2] is None and node.operands[3] is None \
        and node.attrs["activation"] == "none"


def _unscale(x: Tensor, prod: dict, uses: dict) -> tuple[Tensor, float, list[Node]]:
    """(x0, c, [its node]) when x = x0 * c or x0 / c for a scalar constant c and x has no other use, else
    (x, 1.0, [])."""
    node = prod.get(id(x))
    if node is None or node.op not in ("div", "mul") or uses[id(x)] != 1:
        return x, 1.0, []
    x0, c = node.operands[0], _scalar(prod.get(id(node.operands[1])))
    if c is None and node.op == "mul":  # c * x0
        x0, c = node.operands[1], _scalar(prod.get(id(node.operands[0])))
    if c is None or (node.op == "div" and c == 0) or x0.shape != x.shape:
        return x, 1.0, []
    return x0, 1.0 / c if node.op == "div" else c, [node]


def _nan_guard(node: Node | None, prod: dict, uses: dict):
    """(the guarded tensor's producer, [the guard's nodes], the zero) when node is where(ne(p, p), 0, p)
    and the guard is the only use of p and of its condition, else None."""
    if node is None or node.op != "where":
        return None
    cond, zero, p = node.operands
    test = prod.get(id(cond))
    if test is None or test.op != "compare" or test.attrs["kind"] != "ne" or \
            test.operands[0] is not p or test.operands[1] is not p or uses[id(cond)] != 1 or uses[id(p)] != 3 or \
            _scalar(prod.get(id(zero))) != 0.0 or tuple(p.shape) != tuple(node.result.shape):
        return None
    return prod.get(id(p)), [node, test], zero


def _moved_like_transpose(x: Tensor, prod: dict, uses: dict):
    """(k0, perm, [nodes]) when x is a tensor k0 (4-d) moved by a chain of at most 4 reshapes and transposes,
    each result used only by the next, that together are transpose(k0, perm); the longest such chain, or None.
    The chain is replayed on the positions of k0's elements."""
    chain, found, t = [], None, x
    for _ in range(4):
        node = prod.get(id(t))
        if node is None or node.op not in ("reshape", "transpose") or uses[id(t)] != 1:
            break
        chain.append(node)
        t = node.operands[0]
        if t.ndim != 4:
            continue
        moved = np.arange(int(np.prod(t.shape))).reshape(t.shape)
        for n in reversed(chain):
            moved = moved.reshape(n.result.shape) if n.op == "reshape" else moved.transpose(n.attrs["perm"])
        flat = moved.reshape(-1)
        for perm in itertools.permutations(range(4)):
            if tuple(t.shape[p] for p in perm) == tuple(x.shape) and \
                    np.array_equal(np.arange(flat.size).reshape(t.shape).transpose(perm).reshape(-1), flat):
                found = (t, list(perm), list(chain))
                break
    return found


def _batch_split(x: Tensor, prod: dict, uses: dict) -> Tensor | None:
    """x4 when x (3-d) is reshape(x4) of a 4-d x4 [P, Q, a, b] to [P Q, a, b] used only here, else None."""
    node = prod.get(id(x))
    if node is None or node.op != "reshape" or uses[id(x)] != 1:
        return None
    x4 = node.operands[0]
    ok = x4.ndim == 4 and tuple(x4.shape[2:]) == tuple(x.shape[1:]) and x4.shape[0] * x4.shape[1] == x.shape[0]
    return x4 if ok else None


def merge_batched_matmuls(graph: Graph) -> int:
    """Rewrite reshape(matmul(reshape(a4), reshape(b4)) -> [P, Q, m, n]) of 4-d a4, b4 with equal leading
    dims [P, Q] into matmul(a4, b4), in place; returns how many."""
    merged = 0
    prod, uses, users = _producers(graph), _uses(graph), _consumers(graph)
    for mm in list(graph.nodes):
        if not _plain_matmul(mm) or mm.result.ndim != 3 or uses.get(id(mm.result)) != 1 or \
                len(users.get(id(mm.result), ())) != 1:
            continue
        back = users[id(mm.result)][0]
        a4, b4 = (_batch_split(o, prod, uses) for o in mm.operands[:2])
        if back.op != "reshape" or a4 is None or b4 is None or tuple(a4.shape[:2]) != tuple(b4.shape[:2]) or \
                tuple(back.result.shape) != tuple(a4.shape[:2]) + tuple(mm.result.shape[1:]):
            continue
        dead = {id(mm)} | {id(prod[id(o)]) for o in mm.operands[:2]}
        back.op, back.operands, back.attrs = "matmul", [a4, b4, None, None], mm.attrs
        graph.nodes = [n for n in graph.nodes if id(n) not in dead]
        prod, uses, users = _producers(graph), _uses(graph), _consumers(graph)
        merged += 1
    return merged


def _windows(x: Tensor, prod: dict, uses: dict):
    """(x4, the windows' mask constant [1, nW|1, H|1, Sq|1, Sk|1], [their nodes]) when x = reshape(add(
    reshape(x4 [B nW, H, Sq, Sk] -> [B, nW, H, Sq, Sk]), that constant) -> [B nW, H, Sq, Sk]), else None."""
    back = prod.get(id(x))
    if back is None or back.op != "reshape" or uses[id(x)] != 1 or x.ndim != 4:
        return None
    y = back.operands[0]
    add = prod.get(id(y))
    if add is None or add.op != "add" or uses[id(y)] != 1 or y.ndim != 5:
        return None
    for r5, m5 in (add.operands, add.operands[::-1]):
        split, const = prod.get(id(r5)), prod.get(id(m5))
        if split is None or split.op != "reshape" or uses[id(r5)] != 1 or const is None or const.op != "constant":
            continue
        x4 = split.operands[0]
        B, nW, H, Sq, Sk = y.shape
        if tuple(x4.shape) == tuple(x.shape) == (B * nW, H, Sq, Sk) and tuple(r5.shape) == tuple(y.shape) and \
                m5.ndim == 5 and m5.shape[0] == 1:
            return x4, const, [back, add, split]
    return None


def _window_mask(bias: Node | None, windows: Node, nW: int, H: int, Sq: int, Sk: int) -> np.ndarray | None:
    """bias (a constant broadcast to [1, H, Sq, Sk], or none) plus the windows' mask [1, nW, H, Sq, Sk] as one
    [nW, H, Sq, Sk] array in float64 (tiling the batch), or None when the bias is not such a constant."""
    total = from_storage(windows.value, windows.result.dtype).astype(np.float64).reshape(windows.result.shape)
    if bias is not None:
        if bias.op != "constant" or bias.result.ndim > 4 or (bias.result.ndim == 4 and bias.result.shape[0] != 1):
            return None
        try:
            b = np.broadcast_to(from_storage(bias.value, bias.result.dtype).reshape(bias.result.shape), (1, H, Sq, Sk))
        except ValueError:
            return None
        total = total + b.astype(np.float64)[:, None]
    return np.broadcast_to(total, (1, nW, H, Sq, Sk)).reshape(nW, H, Sq, Sk)


def _match(pv: Node, prod: dict, uses: dict):
    """(q, k or (k0, perm), v, mask, scale, dead nodes, the NaN guard's zero or None) when `pv` ends an
    attention chain, else None."""
    if not _plain_matmul(pv) or pv.attrs["transpose_rhs"] or pv.result.ndim != 4:
        return None
    soft, dead, zero = prod.get(id(pv.operands[0])), [], None
    guard = _nan_guard(soft, prod, uses) if uses[id(pv.operands[0])] == 1 else None
    if guard is not None:
        soft, dead, zero = guard
    if soft is None or soft.op != "softmax" or soft.attrs["axis"] % 4 != 3 or \
            uses[id(soft.result)] != (1 if zero is None else 3):
        return None
    dead, x, mask, scale = dead + [soft], soft.operands[0], None, 1.0
    windows = _windows(x, prod, uses) if zero is None else None
    if windows is not None:
        x, window_mask, window_nodes = windows
        dead += window_nodes
    node = prod.get(id(x))
    if node is not None and node.op == "add" and uses[id(x)] == 1:
        inner = [o for o in node.operands if prod.get(id(o)) is not None and prod[id(o)].op in ("div", "mul", "matmul")]
        if inner:
            x = inner[0]
            mask = node.operands[1] if node.operands[0] is x else node.operands[0]
            dead.append(node)
            node = prod.get(id(x))
    x, scale, scaled = _unscale(x, prod, uses)
    dead += scaled
    node = prod.get(id(x))
    if not _plain_matmul(node) or uses[id(x)] != 1 or node.result.ndim != 4:
        return None
    dead.append(node)
    (q, q_scale, q_scaled), (rhs, k_scale, k_scaled) = (_unscale(o, prod, uses) for o in node.operands[:2])
    scale *= q_scale * k_scale
    dead += q_scaled + k_scaled
    if node.attrs["transpose_rhs"]:
        k = rhs
    else:
        moved = _moved_like_transpose(rhs, prod, uses)
        if moved is None:
            return None
        k0, perm, chain = moved
        perm[-2], perm[-1] = perm[-1], perm[-2]
        k = (k0, perm)
        dead += chain
    v = pv.operands[1]
    k_shape = rhs.shape if node.attrs["transpose_rhs"] else tuple(rhs.shape[:2]) + (rhs.shape[3], rhs.shape[2])
    if windows is not None:   # the masks summed into one constant that tiles the batch
        nW = window_nodes[1].result.shape[1]
        H, Sq, Sk = x.shape[1:]
        bias = None if mask is None else prod.get(id(mask))
        if mask is not None and bias is None:   # a mask given as an input: not a constant to sum
            return None
        mask = _window_mask(bias, window_mask, nW, H, Sq, Sk)
        if mask is None:
            return None
    try:
        spec.infer("attention", [q.shape, k_shape, v.shape, None if mask is None else mask.shape],
                   {"scale": scale, "causal": 0, "layout": "BHSD"})
    except spec.ShapeError:
        return None
    return q, k, v, mask, scale, dead, zero


def match_attention(graph: Graph) -> int:
    """Rewrite every attention chain of `graph` into one attention op, in place; returns how many."""
    found = 0
    prod, uses = _producers(graph), _uses(graph)
    for pv in list(graph.nodes):
        m = _match(pv, prod, uses)
        if m is None:
            continue
        q, k, v, mask, scale, dead, zero = m
        if isinstance(k, tuple):
            k0, perm = k
            if perm == list(range(4)):
                k = k0
            else:
                k = Tensor(graph, tuple(k0.shape[p] for p in perm), k0.dtype, f"%{len(graph.nodes)}")
                graph.nodes.insert(graph.nodes.index(pv), Node("transpose", [k0], {"perm": perm}, k, pv.loc))
        attrs = {"scale": float(np.float64(scale)), "causal": 0, "layout": "BHSD"}
        if isinstance(mask, np.ndarray):   # the windows' summed mask: a new constant
            stored = host_to_storage(mask, q.dtype, "the shifted windows' attention mask")
            mask = Tensor(graph, stored.shape, q.dtype, f"%{len(graph.nodes)}")
            graph.nodes.insert(graph.nodes.index(pv), Node("constant", [], {}, mask, pv.loc, stored))
            graph._values[id(mask)] = stored
        if zero is None:
            pv.op, pv.operands, pv.attrs = "attention", [q, k, v, mask], attrs
        else:   # the NaN guard on the attention's result: pv becomes where(ne(y, y), 0, y)
            y = Tensor(graph, pv.result.shape, pv.result.dtype, f"%{len(graph.nodes)}")
            nan = Tensor(graph, pv.result.shape, "bool", f"%{len(graph.nodes) + 1}")
            at = graph.nodes.index(pv)
            graph.nodes[at:at] = [Node("attention", [q, k, v, mask], attrs, y, pv.loc),
                                  Node("compare", [y, y], {"kind": "ne"}, nan, pv.loc)]
            pv.op, pv.operands, pv.attrs = "where", [nan, zero, y], {}
        gone = {id(n) for n in dead}
        graph.nodes = [n for n in graph.nodes if id(n) not in gone]
        _drop_unused_constants(graph, dead)
        prod, uses = _producers(graph), _uses(graph)
        found += 1
    return found


def _drop_unused_constants(graph: Graph, dead: list) -> None:
    """Remove the scalar constants that only the removed nodes used."""
    uses = _uses(graph)
    inputs = {id(o) for n in dead for o in n.operands if o is not None}
    graph.nodes = [n for n in graph.nodes
                   if not (n.op == "constant" and id(n.result) in inputs and not uses.get(id(n.result)))]

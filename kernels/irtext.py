"""The IR-text builder every kernel emitter shares: MLIR types and affine maps as text, and `KernelText`,
which writes one kernel function (linalg on tensors, destination-passing over memrefs):

    func.func @k(%in0: memref<..>, ..., %out: memref<..>) {
      %t0 = bufferization.to_tensor %in0 restrict ...      // inputs as tensors
      ... linalg on tensors ...                             // the op's emitter (semantics.py, a solver's build)
      bufferization.materialize_in_destination %r in restrict writable %out
    }

so every kernel has the same C ABI after bufferization (one pointer per buffer, output last).
"""
from __future__ import annotations

import math

import numpy as np

from openprim.base.dtypes import FLOATS, MLIR_TYPE
from openprim.dialect import contract


PAD_BLOCK = 1024  # elements copied per insert_slice when padding (one vector of at most 64 registers)


def elem(dtype) -> str:
    """The IR element type of a dtype (a bool is an i8; base/dtypes.MLIR_TYPE)."""
    return MLIR_TYPE.get(dtype, dtype)


def ttype(shape, dtype) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{elem(dtype)}>"


def mtype(shape, dtype) -> str:
    return f"memref<{''.join(f'{d}x' for d in shape)}{elem(dtype)}>"


def _loop_ranges(operands: list, maps: list, ndim: int) -> list[int]:
    """Static loop ranges of a generic: each loop dim read off an operand where it indexes alone."""
    ranges = [1] * ndim
    for v, m in zip(operands, maps):
        for pos, expr in enumerate(m.split("-> (")[1].rstrip(")>").split(", ")):
            expr = expr.strip()
            if expr.startswith("d") and expr[1:].isdigit():
                ranges[int(expr[1:])] = v.shape[pos]
    return ranges


def amap(ndim: int, exprs) -> str:
    dims = ", ".join(f"d{i}" for i in range(ndim))
    return f"affine_map<({dims}) -> ({', '.join(exprs)})>"


INF_BITS = {"f32": ("0x7F800000", "0xFF800000"), "f16": ("0x7C00", "0xFC00"), "bf16": ("0x7F80", "0xFF80")}


def flit(v: float, dtype: str = "f32") -> str:
    """A literal of `dtype` that MLIR parses exactly (hex bits for float infinities; integers as integers)."""
    if dtype not in FLOATS and dtype in MLIR_TYPE:
        return str(int(v))
    if math.isinf(v):
        return INF_BITS[dtype][0 if v > 0 else 1]
    return repr(float(np.float32(v)))


class V:
    """An SSA tensor value in the kernel being built: name, shape, element type."""

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, tuple(shape), dtype

    @property
    def type(self):
        return ttype(self.shape, self.dtype)


class KernelText:
    """Accumulates the body of one kernel function."""

    def __init__(self, pad_block: int = PAD_BLOCK):
        self.pad_block = pad_block        # GPU targets: one block (the grid mapping wants one loop nest)
        self.lines: list[str] = []
        self.n = 0
        self.aux: list[list[int]] = []   # iteration domain of each op tagged `prim.aux = i`
        self.generics: dict[str, tuple] = {}  # result name -> (aux index, domain, iterator types)
        self.result = ""                  # the name of the kernel's result tensor

    def tag(self, role: str | None, domain) -> str:
        """The discardable attribute that names an op's role for the schedule (see schedules.py)."""
        if role:
            return contract.role_text(role)
        self.aux.append([int(d) for d in domain])
        return contract.aux_text(len(self.aux) - 1)

    def fresh(self, hint="v"):
        self.n += 1
        return f"%{hint}{self.n}"

    def emit(self, line):
        self.lines.append("    " + line)

    # ----------------------------------------------------------------- tensor helpers
    def empty(self, shape, dtype) -> V:
        n = self.fresh("e")
        self.emit(f"{n} = tensor.empty() : {ttype(shape, dtype)}")
        return V(n, shape, dtype)

    def filled(self, shape, dtype, value: float, role: str | None = None) -> V:
        e = self.empty(shape, dtype)
        c, n = self.fresh("c"), self.fresh("f")
        self.emit(f"{c} = arith.constant {flit(value, dtype)} : {elem(dtype)}")
        self.emit(f"{n} = linalg.fill {{{self.tag(role, shape)}}} ins({c} : {elem(dtype)}) outs({e.name} : {e.type}) -> {e.type}")
        return V(n, shape, dtype)

    def generic(self, ins: list, maps: list, out: V, out_map: str, iterators: list, body, role=None) -> V:
        """linalg.generic; body(args: list[str], kt) -> str (the yielded scalar), args = block arguments."""
        args = [self.fresh("a") for _ in ins] + [self.fresh("o")]
        n = self.fresh("g")
        its = ", ".join(f'"{i}"' for i in iterators)
        all_maps = ", ".join(maps + [out_map])
        ins_txt = f"ins({', '.join(v.name for v in ins)} : {', '.join(v.type for v in ins)}) " if ins else ""
        domain = _loop_ranges(ins + [out], maps + [out_map], len(iterators))
        tag = self.tag(role, domain)
        if role is None:
            self.generics[n] = (len(self.aux) - 1, domain, list(iterators))
        self.emit(f"{n} = linalg.generic {{indexing_maps = [{all_maps}], iterator_types = [{its}], {tag}}} "
                  f"{ins_txt}outs({out.name} : {out.type}) {{")
        self.emit(f"^bb0({', '.join(f'{a}: {elem(v.dtype)}' for a, v in zip(args, ins + [out]))}):")
        res = body(args, self)
        self.emit(f"  linalg.yield {res} : {elem(out.dtype)}")
        self.emit(f"}} -> {out.type}")
        return V(n, out.shape, out.dtype)

    def scalar(self, op: str, *operands, ty="f32", attrs="") -> str:
        n = self.fresh("s")
        self.emit(f"  {n} = {op} {', '.join(operands)}{attrs} : {ty}")
        return n

    def const(self, v: float, ty="f32") -> str:
        n = self.fresh("k")
        literal = flit(v) if ty in ("f32", "f16", "bf16") else str(int(v))
        self.emit(f"  {n} = arith.constant {literal} : {ty}")
        return n

    def to_f32(self, a: str, dtype: str) -> str:
        if dtype == "f32":
            return a
        n = self.fresh("x")
        self.emit(f"  {n} = arith.extf {a} : {dtype} to f32")
        return n

    def from_f32(self, a: str, dtype: str) -> str:
        if dtype == "f32":
            return a
        n = self.fresh("t")
        self.emit(f"  {n} = arith.truncf {a} : f32 to {dtype}")
        return n

    def pad(self, x: V, low, high, value: float) -> V:
        """x inside a `value`-filled tensor (copied by insert_blocks).

        Not tensor.pad: an insert_slice stops producer fusion, so a tiled consumer reads a
        materialized padded input."""
        if not any(low) and not any(high):
            return x
        shape = [d + lo + hi for d, lo, hi in zip(x.shape, low, high)]
        return self.insert_blocks(x, self.filled(shape, x.dtype, value), low)

    def insert_blocks(self, x: V, dest: V, offsets) -> V:
        """dest with x written at the static `offsets`, in blocks of x's trailing dims of at most
        pad_block elements, one per iteration of scf.for loops over the leading dims: the vectorized
        copy stays a few registers wide and the code one loop nest, however large the tensors."""
        R = len(x.shape)
        k = next(k for k in range(R) if math.prod(x.shape[k:]) <= self.pad_block or k == R - 1)
        block = [1] * k + list(x.shape[k:])
        ones = ", ".join(["1"] * R)
        loops = []
        acc = dest.name
        for d in range(k):
            n, arg, iv = self.fresh("pl"), self.fresh("pa"), self.fresh("i")
            c0, cn, c1 = self.fresh("c"), self.fresh("c"), self.fresh("c")
            self.emit(f"{c0} = arith.constant 0 : index")
            self.emit(f"{cn} = arith.constant {x.shape[d]} : index")
            self.emit(f"{c1} = arith.constant 1 : index")
            self.emit(f"{n} = scf.for {iv} = {c0} to {cn} step {c1} iter_args({arg} = {acc}) -> ({dest.type}) {{")
            loops.append((iv, n))
            acc = arg
        dst_off = []
        for d, (iv, _) in enumerate(loops):
            if offsets[d]:
                o = self.fresh("o")
                self.emit(f"{o} = affine.apply affine_map<(d0) -> (d0 + {offsets[d]})>({iv})")
                dst_off.append(o)
            else:
                dst_off.append(iv)
        dst_off += [str(offsets[d]) for d in range(k, R)]
        sl, ins = self.fresh("blk"), self.fresh("ins")
        sizes = ", ".join(map(str, block))
        blk_t = ttype(block, x.dtype)
        self.emit(f"{sl} = tensor.extract_slice {x.name}[{', '.join([iv for iv, _ in loops] + ['0'] * (R - k))}] "
                  f"[{sizes}] [{ones}] : {x.type} to {blk_t}")
        self.emit(f"{ins} = tensor.insert_slice {sl} into {acc}[{', '.join(dst_off)}] [{sizes}] [{ones}] : "
                  f"{blk_t} into {dest.type}")
        result = ins
        for iv, n in reversed(loops):
            self.emit(f"scf.yield {result} : {dest.type}")
            self.emit("}")
            result = n
        return V(result, dest.shape, x.dtype)

    def reshape(self, x: V, shape) -> V:
        """Any reshape of a contiguous tensor: collapse to 1-d, expand to the target."""
        shape = tuple(shape)
        if shape == x.shape:
            return x
        flat = x
        if len(x.shape) != 1:
            n = self.fresh("r")
            groups = f"[[{', '.join(map(str, range(len(x.shape))))}]]" if x.shape else "[]"
            self.emit(f"{n} = tensor.collapse_shape {x.name} {groups} : {x.type} into {ttype((math.prod(x.shape),), x.dtype)}")
            flat = V(n, (math.prod(x.shape),), x.dtype)
        if len(shape) == 1:
            return flat
        n = self.fresh("r")
        groups = f"[[{', '.join(map(str, range(len(shape))))}]]" if shape else "[]"
        out = ", ".join(map(str, shape))
        self.emit(f"{n} = tensor.expand_shape {flat.name} {groups} output_shape [{out}] : {flat.type} into {ttype(shape, x.dtype)}")
        return V(n, shape, x.dtype)

    def constant_tensor(self, data: np.ndarray) -> V:
        n = self.fresh("cst")
        vals = ", ".join(flit(v) for v in data.ravel())
        self.emit(f"{n} = arith.constant dense<[{vals}]> : tensor<{data.size}xf32>")
        return self.reshape(V(n, (data.size,), "f32"), data.shape) if data.ndim != 1 else V(n, data.shape, "f32")

    def text(self, name: str, inputs: list, output: tuple, attrs: str = "") -> str:
        """The function text; inputs = [(shape, dtype)], output = (shape, dtype)."""
        params = [f"%in{i}: {mtype(s, d)}" for i, (s, d) in enumerate(inputs)] + [f"%out: {mtype(*output)}"]
        return "\n".join([f"func.func @{name}({', '.join(params)}){attrs} {{", *self.lines, "    return", "}"])

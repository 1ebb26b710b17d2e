"""conv_implicit_gemm (CPU): a hand-structured implicit-GEMM convolution kernel on memrefs, vector dialect.

One GEMM per group g:  out[m, g*Kg + k] = sum over (r, s, c) of A[m, (r, s, c)] * filter[r, s, c, g*Kg + k]
with M = output pixels, N = Kg = K/groups output channels, K = R*S*Cg (Cg = C/groups). A is never built
(no im2col, no padded copy, no layout transposes): A[m, (r, s, c)] is the input pixel at
(ih, iw) = (oh*sh - pt + r*dh, ow*sw - pl + s*dw), zero outside the image. The filter is RSCK (prim-select
re-lays out constant filters at compile time), so a filter tap's output channels are contiguous; a
constant one is packed further in blocks of FT channels ("KRSC<FT>k", [K/FT, R, S, Cg, FT]), so that a
tile's whole filter slice is one contiguous stream instead of Cg*R*S rows K apart (deep layers: 2 KB
apart, each row a new page-crossing line that the prefetcher does not follow).

    scf.forall over the (n, oh, group) rows          the threads (OpenMP); when the filter outweighs the
      [r_lo, r_hi): filter rows inside the image     input: over the (group, FT-channel tile)s instead,
      for each tile of FT channels and WT columns:   each looping over the rows (its filter slice read once)
        acc[...] = 0                                 f32 accumulators, in registers (loop-carried)
        for r, s, c:  acc = vector.fma(a, b, acc)    the register tile's outer product
        epilogue: + bias[k] + residual, activation, cast to the output type, one store per vector

The register tile has its vector lanes along the output channels or the output columns:
  k lanes   WT accumulators vector<FTxf32>: per c, one vector load of FT filter values, WT scalar input
            loads broadcast, WT FMAs (loops r, s, c). NHWC always; NCHW with params lanes=1 (16+ channels
            per group), the tile then transposed so that the stores run along ow.
  ow lanes  NCHW, lanes=0: FT accumulators vector<WTxf32>: per c, one vector load of WT input pixels along w
            (strided: the covering span loaded once and shuffled), FT filter scalars broadcast, FT FMAs
            (loops c, r, s: one channel plane at a time); stores contiguous along ow.
Padding costs nothing inside the image: the filter rows that fall outside are cut from the r loop's
bounds; the column tiles are split at compile time into interior tiles (a loop, no checks) and border
tiles (emitted one by one, with the taps that fall outside the image left out: every shape is static).
Tails (OW % WT columns, Kg % FT channels) are tiles of the exact smaller width. Every memref is viewed
as 1-d (memref.reinterpret_cast) so an access is one add of a constant to an offset hoisted out of
the c loop. f16/bf16 operands are extended to f32 on load and the result rounded once, at the store.
"""
from __future__ import annotations

import math

from openprim.base.ops import filter_block
from openprim.dialect import contract
from openprim.kernels.cpu import vmath
from openprim.kernels.irtext import flit
from openprim.kernels.semantics import activation


class Body:
    """Lines of the kernel function; index arithmetic on Python ints is folded, constants are
    emitted once at the top of the function."""

    def __init__(self):
        self.lines: list[str] = []
        self.consts: dict[tuple, str] = {}
        self.const_lines: list[str] = []
        self.n = 0
        self.depth = 1

    def fresh(self, hint="v") -> str:
        self.n += 1
        return f"%{hint}{self.n}"


    def function(self, name: str, signature: list[tuple[str, str]], residual: tuple[str, str] | None = None) -> str:
        """The text of `func.func @name(signature)`: the hoisted constants, the body, a return. A kernel that
        reads each element of its `residual` argument just before it writes the output element at the same
        index (and no other) names it in `prim.in_place`: the memory plan may then give the output the
        residual's buffer (driver/plan.py), saving a stream of memory traffic."""
        sig = ", ".join(f"{a}: {t}" for a, t in signature)
        attrs = f" attributes {{{contract.in_place_text(signature.index(residual))}}}" if residual else ""
        return "\n".join([f"func.func @{name}({sig}){attrs} {{", *self.const_lines, *self.lines, "  return", "}"])

    def narrow(self, y: str, width: int, dtype: str) -> str:
        """A vector<width x f32> (width 0: an f32) rounded to dtype (to nearest even; f32 as it is)."""
        if dtype == "f32":
            return y
        n = self.fresh("t")
        ft, et = (f"vector<{width}xf32>", f"vector<{width}x{dtype}>") if width else ("f32", dtype)
        self.emit(f"{n} = arith.truncf {y} : {ft} to {et}")
        return n

    def load_f32(self, buf: tuple[str, str], at, width: int, elem: str, mask: str | None = None) -> str:
        """buf[at : at + width] (a 1-d memref of `elem`) widened to vector<width x f32>; with a mask
        (vector<width x i1>), a masked load whose other lanes are 0."""
        et, n = f"vector<{width}x{elem}>", self.fresh("ld")
        if mask:
            self.emit(f"{n} = vector.maskedload {buf[0]}[{self.idx(at)}], {mask}, {self.const(0.0, et)} "
                      f": {buf[1]}, vector<{width}xi1>, {et} into {et}")
        else:
            self.emit(f"{n} = vector.load {buf[0]}[{self.idx(at)}] : {buf[1]}, {et}")
        if elem == "f32":
            return n
        w = self.fresh("x")
        self.emit(f"{w} = arith.extf {n} : {et} to vector<{width}xf32>")
        return w

    def flat(self, arg: tuple[str, str]) -> tuple[str, str]:
        """A 1-d view of a kernel argument (name, memref type)."""
        name, mtype = arg
        *shape, elem = mtype[len("memref<"):-1].split("x")
        if len(shape) == 1:
            return name, mtype
        size = math.prod(int(d) for d in shape)
        flat_t = f"memref<{size}x{elem}>"
        n = self.fresh("flat")
        self.emit(f"{n} = memref.reinterpret_cast {name} to offset: [0], sizes: [{size}], strides: [1] "
                  f": {mtype} to {flat_t}")
        return n, flat_t
    def emit(self, line: str):
        self.lines.append("  " * self.depth + line)

    def const(self, value, ty="index") -> str:
        """A constant of type ty (a float vector type gives a splat)."""
        key = (type(value), value, ty)
        if key not in self.consts:
            n = self.fresh("c")
            literal = flit(value) if isinstance(value, float) else str(value)
            if ty.startswith("vector"):
                literal = f"dense<{literal}>"
            self.const_lines.append(f"  {n} = arith.constant {literal} : {ty}")
            self.consts[key] = n
        return self.consts[key]

    def idx(self, v) -> str:
        return self.const(v) if isinstance(v, int) else v

    def add(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if b == 0:
            return a
        if a == 0:
            return b
        n = self.fresh("i")
        self.emit(f"{n} = arith.addi {self.idx(a)}, {self.idx(b)} : index")
        return n

    def mul(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        if a == 1:
            return b
        if b == 1:
            return a
        if a == 0 or b == 0:
            return 0
        n = self.fresh("i")
        self.emit(f"{n} = arith.muli {self.idx(a)}, {self.idx(b)} : index")
        return n

    def op(self, name: str, a, b, ty="index") -> str:
        n = self.fresh("i")
        self.emit(f"{n} = {name} {self.idx(a)}, {self.idx(b)} : {ty}")
        return n

    def loop(self, lo, hi, carried: list[str], ty: str | None, types: list[str] | None = None):
        """Open `scf.for iv = lo to hi` carrying `carried` (all of type ty, or of `types` one by one);
        returns (iv, args, results)."""
        iv, res = self.fresh("iv"), self.fresh("acc")
        args = [self.fresh("a") for _ in carried]
        inits = ", ".join(f"{a} = {v}" for a, v in zip(args, carried))
        self.emit(f"{res}:{len(carried)} = scf.for {iv} = {self.idx(lo)} to {self.idx(hi)} step {self.const(1)} "
                  f"iter_args({inits}) -> ({', '.join(types or [ty] * len(carried))}) {{")
        self.depth += 1
        return iv, args, [f"{res}#{i}" for i in range(len(carried))]

    def open_for(self, lo, hi) -> str:
        """Open `scf.for iv = lo to hi` with nothing carried (closed by close()); returns iv."""
        iv = self.fresh("iv")
        self.emit(f"scf.for {iv} = {self.idx(lo)} to {self.idx(hi)} step {self.const(1)} {{")
        self.depth += 1
        return iv

    def close(self):
        self.depth -= 1
        self.emit("}")

    def open_thread_shares(self, items: int, parts: int) -> str:
        """`scf.forall` over `parts` threads, each looping over its share [t*items/parts, (t+1)*items/parts)
        of `items`; returns the loop index (close() twice ends both)."""
        t = self.fresh("it")
        self.emit(f"scf.forall ({t}) in ({parts}) {{")
        self.depth += 1
        lo = self.op("arith.divui", self.mul(t, items), parts)
        hi = self.op("arith.divui", self.add(self.mul(t, items), items), parts)
        return self.open_for(lo, hi)

    def end_loop(self, values: list[str], ty: str | None, types: list[str] | None = None):
        self.emit(f"scf.yield {', '.join(values)} : {', '.join(types or [ty] * len(values))}")
        self.depth -= 1
        self.emit("}")


def kernel_arguments(signature: list[tuple[str, str]], epilogue: str):
    """(input, weights, bias or None, residual or None, output) of a conv/matmul kernel's signature, whose
    optional arguments are there as the problem's epilogue ("bias+residual+...") says."""
    epi = epilogue.split("+")
    names = iter(signature)
    x, w = next(names), next(names)
    bias = next(names) if "bias" in epi else None
    residual = next(names) if "residual" in epi else None
    return x, w, bias, residual, next(names)


VECTOR_MATH = {"math.exp": vmath.exp, "math.erf": vmath.erf, "math.tanh": vmath.tanh}


class VectorOps:
    """What semantics.activation needs (scalar, const, fresh, emit) on vector<WIDTHxf32> values, so
    the activation written for scalars is emitted once per vector; exp, erf and tanh as vector polynomials
    (kernels/cpu/vmath.py), not a libm call per lane."""

    def __init__(self, body: Body, width: int):
        self.body, self.width, self.vt = body, width, f"vector<{width}xf32>"
        self.mask_t = f"vector<{width}xi1>"

    def fresh(self, hint="v"):
        return self.body.fresh(hint)

    def const(self, v, ty="f32"):
        return self.body.const(float(v), self.vt)

    def scalar(self, op, *operands, ty="f32", attrs=""):
        if op in VECTOR_MATH:
            return VECTOR_MATH[op](self.body, operands[0], self.width)
        n = self.body.fresh("s")
        self.body.emit(f"{n} = {op} {', '.join(operands)}{attrs} : {self.vt}")
        return n

    def emit(self, line):
        """activation's own compare and select lines, retyped for vectors."""
        line = line.strip()
        if " arith.select " in line:
            line = line.replace(": f32", f": {self.mask_t}, {self.vt}")
        else:
            line = line.replace(": f32", f": {self.vt}")
        self.body.emit(line)


def _ceil_div(b: Body, a, d: int):
    """ceil(a / d) of an index value, d > 0."""
    return a if d == 1 else b.op("arith.ceildivsi", a, d)


class _Conv:
    """The kernel of one problem (solvers.ConvProblem) with its register tile."""

    def __init__(self, p, params, attrs, signature, threads):
        self.p, self.attrs, self.threads = p, attrs, threads
        self.wt, self.ft = params["wt"], params["ft"]
        self.nchw = p.layout == "NCHW"
        self.k_lanes = not self.nchw or params.get("lanes") == 1   # vector lanes along k, else along ow
        self.cg, self.kg = p.c // p.groups, p.k // p.groups
        (self.sh, self.sw), (self.dh, self.dw) = p.strides, p.dilations
        self.pt, self.pl = p.padding[0], p.padding[1]
        self.dtype = p.dtype
        # the filter: w[r, s, c, k] at wk0(k0) + ((r*S + s)*Cg + c)*wk + (k - k0) for a tile of channels
        # from k0; RSCK: wk = K, wk0(k0) = k0; blocked "KRSC<b>k" (b = FT): wk = b, wk0(k0) = k0*R*S*Cg
        self.block = filter_block(p.filter_layout)
        self.wk = self.block or p.k
        self.b = Body()
        self.x, self.w, self.bias, self.residual, self.out = kernel_arguments(signature, p.epilogue)
        self.signature = signature
        # element strides of the input / output ([n, c, h, w] and [n, k, oh, ow] in elements)
        if self.nchw:
            self.xs = (p.c * p.h * p.w, p.h * p.w, p.w, 1)
            self.ys = (p.k * p.oh * p.ow, p.oh * p.ow, p.ow, 1)
        else:
            self.xs = (p.h * p.w * p.c, 1, p.w * p.c, p.c)
            self.ys = (p.oh * p.ow * p.k, 1, p.ow * p.k, p.k)

    # ------------------------------------------------------------------ memory
    def widen(self, v: str, ty: str) -> str:
        if self.dtype == "f32":
            return v
        n = self.b.fresh("x")
        self.b.emit(f"{n} = arith.extf {v} : {ty.replace('f32', self.dtype)} to {ty}")
        return n

    def load(self, buf, offset, width: int = 0) -> str:
        """buf[offset] (width 0) or buf[offset : offset + width], as f32."""
        n = self.b.fresh("ld")
        name, mtype = buf
        if width:
            vt = f"vector<{width}x{self.dtype}>"
            self.b.emit(f"{n} = vector.load {name}[{self.b.idx(offset)}] : {mtype}, {vt}")
            return self.widen(n, f"vector<{width}xf32>")
        self.b.emit(f"{n} = memref.load {name}[{self.b.idx(offset)}] : {mtype}")
        return self.widen(n, "f32")

    def splat(self, scalar: str, width: int) -> str:
        n = self.b.fresh("bc")
        self.b.emit(f"{n} = vector.broadcast {scalar} : f32 to vector<{width}xf32>")
        return n

    def fma(self, a: str, b: str, acc: str, width: int) -> str:
        n = self.b.fresh("fma")
        self.b.emit(f"{n} = vector.fma {a}, {b}, {acc} : vector<{width}xf32>")
        return n

    def lanes(self, base, lanes: list[int], width: int) -> str:
        """vector<width x f32> whose lane j is x[base + j*sw] for j in `lanes` (consecutive) and 0
        elsewhere: the span covering them is loaded once and shuffled into place (NCHW)."""
        first, last = lanes[0], lanes[-1]
        span = (last - first) * self.sw + 1
        v = self.load(self.xf, self.b.add(base, first * self.sw), span)
        if first == 0 and span == width and self.sw == 1:   # every lane, in place
            return v
        zero = self.b.const(0.0, f"vector<{width}xf32>")
        picks = [(j - first) * self.sw if j in lanes else span for j in range(width)]
        n = self.b.fresh("sh")
        self.b.emit(f"{n} = vector.shuffle {v}, {zero} [{', '.join(map(str, picks))}] : "
                    f"vector<{span}xf32>, vector<{width}xf32>")
        return n

    # ------------------------------------------------------------------ the register tile
    def column_taps(self, ow0: int, wt: int) -> list[list[int]]:
        """For a tile at a static column ow0: per filter column s, the tile columns inside the image."""
        return [[j for j in range(wt) if 0 <= (ow0 + j) * self.sw - self.pl + s * self.dw < self.p.w]
                for s in range(self.p.s)]

    def tile(self, n, oh, r_lo, r_hi, ow0, k0, wt: int, ft: int, taps):
        """One register tile of wt output columns from ow0 and ft output channels from k0 (a global
        channel index); taps None: every tap lands inside the image (an interior tile, ow0 dynamic),
        else taps[s] = the tile columns inside the image at filter column s (a border tile, ow0 static)."""
        if self.k_lanes:
            zeros = [self.b.const(0.0, f"vector<{ft}xf32>")] * wt
            accs = self.reduce_k_lanes(r_lo, r_hi, ow0, k0, wt, ft, taps, zeros)
            if self.nchw:
                accs = self.transpose(accs, wt, ft)
        else:
            zeros = [self.b.const(0.0, f"vector<{wt}xf32>")] * ft
            accs = self.reduce_w_lanes(r_lo, r_hi, ow0, k0, wt, ft, taps, zeros)
        self.store(n, oh, ow0, k0, wt, ft, accs)

    def transpose(self, accs, wt: int, ft: int) -> list[str]:
        """wt vectors along k -> ft vectors along ow (NCHW with k lanes: rows of the output)."""
        rows = []
        for f in range(ft):
            lanes = []
            for acc in accs:
                e = self.b.fresh("e")
                self.b.emit(f"{e} = vector.extract {acc}[{f}] : f32 from vector<{ft}xf32>")
                lanes.append(e)
            row = self.b.fresh("row")
            self.b.emit(f"{row} = vector.from_elements {', '.join(lanes)} : vector<{wt}xf32>")
            rows.append(row)
        return rows

    def reduce_k_lanes(self, r_lo, r_hi, ow0, k0, wt, ft, taps, accs):
        """Loops r, s, c (c innermost: NHWC's contiguous input channels; the filter rows are contiguous
        either way). Per c: one vector of ft filter values, one broadcast input value per tile column,
        wt FMAs."""
        b, p, vt = self.b, self.p, f"vector<{ft}xf32>"
        r, args, res = b.loop(r_lo, r_hi, accs, vt)
        xrow = b.add(self.xn_c0, b.mul(b.add(b.mul(r, self.dh), self.ih0), self.xs[2]))  # x[n, c0, ih, 0]
        wrow = b.add(b.mul(r, p.s * self.cg * self.wk), self.wk0(k0))                  # w[r, 0, 0, k0]

        def channels(xcol, wtap, lanes, accs):
            c, args, res = b.loop(0, self.cg, accs, vt)
            xc, out = b.add(xcol, b.mul(c, self.xs[1])), list(args)
            wv = self.load(self.wf, b.add(wtap, b.mul(c, self.wk)), ft)
            for j in lanes:
                xj = self.load(self.xf, b.add(xc, j * self.sw * self.xs[3]))
                out[j] = self.fma(self.splat(xj, ft), wv, out[j], ft)
            b.end_loop(out, vt)
            return res

        if taps is None:
            s, sargs, sres = b.loop(0, p.s, args, vt)
            col = b.add(b.mul(ow0, self.sw), b.add(b.mul(s, self.dw), -self.pl))
            out = channels(b.add(xrow, b.mul(col, self.xs[3])), b.add(wrow, b.mul(s, self.cg * self.wk)), range(wt),
                           sargs)
            b.end_loop(out, vt)
            out = sres
        else:
            out = args
            for s, lanes in enumerate(taps):
                if lanes:
                    col = ow0 * self.sw + s * self.dw - self.pl
                    out = channels(b.add(xrow, col * self.xs[3]), b.add(wrow, s * self.cg * self.wk), lanes, out)
        b.end_loop(out, vt)
        return res

    def wk0(self, k0):
        """Where the filter of the tile of channels from k0 starts."""
        return self.b.mul(k0, self.p.r * self.p.s * self.cg) if self.block else k0

    def reduce_w_lanes(self, r_lo, r_hi, ow0, k0, wt, ft, taps, accs):
        """Loops c, r and the s taps unrolled (c outermost: a channel plane is read whole before the
        next, a few pages at a time). Per tap: one vector of wt input columns, ft broadcast filter
        values, ft FMAs."""
        b, p, vt = self.b, self.p, f"vector<{wt}xf32>"
        c, cargs, cres = b.loop(0, self.cg, accs, vt)
        xplane = b.add(self.xn_c0, b.mul(c, self.xs[1]))            # x[n, c0 + c, 0, 0]
        wc = b.add(self.wk0(k0), b.mul(c, self.wk))                 # w[0, 0, c, k0]
        r, out, rres = b.loop(r_lo, r_hi, cargs, vt)
        xrow = b.add(xplane, b.mul(b.add(b.mul(r, self.dh), self.ih0), self.xs[2]))  # x[n, c0 + c, ih, 0]
        wrow = b.add(wc, b.mul(r, p.s * self.cg * self.wk))              # w[r, 0, c, k0]
        out = list(out)
        for s in range(p.s):
            lanes = list(range(wt)) if taps is None else taps[s]
            if not lanes:
                continue
            xv = self.lanes(b.add(xrow, b.add(b.mul(ow0, self.sw), s * self.dw - self.pl)), lanes, wt)
            wtap = b.add(wrow, s * self.cg * self.wk)
            for f in range(ft):
                out[f] = self.fma(xv, self.splat(self.load(self.wf, b.add(wtap, f)), wt), out[f], wt)
        b.end_loop(out, vt)
        b.end_loop(rres, vt)
        return cres

    def store(self, n, oh, ow0, k0, wt, ft, accs):
        """The epilogue of a tile: + bias + residual, activation, rounding, one store per vector."""
        b = self.b
        vw = wt if self.nchw else ft
        ops = VectorOps(b, vw)
        yrow = b.add(b.mul(n, self.ys[0]), b.mul(oh, self.ys[2]))
        bias = None
        if self.bias is not None and not self.nchw:
            bias = self.load(self.biasf, k0, ft)
        for i, acc in enumerate(accs):
            ow, k = (ow0, b.add(k0, i)) if self.nchw else (b.add(ow0, i), k0)
            at = b.add(yrow, b.add(b.mul(k, self.ys[1]), b.mul(ow, self.ys[3])))
            y = acc
            if self.bias is not None:
                y = ops.scalar("arith.addf", y, bias if bias else self.splat(self.load(self.biasf, k), vw))
            if self.residual is not None:
                y = ops.scalar("arith.addf", y, self.load(self.resf, at, vw))
            y = activation(ops, self.attrs["activation"], self.attrs["activation_params"], y)
            y = b.narrow(y, vw, self.dtype)
            b.emit(f"vector.store {y}, {self.outf[0]}[{b.idx(at)}] : {self.outf[1]}, vector<{vw}x{self.dtype}>")

    # ------------------------------------------------------------------ the whole kernel
    def column_tiles(self):
        """(ow0, width, taps) of the static tiles and (first, end) of the interior tiles' loop:
        interior tiles read every tap inside the image."""
        p, wt = self.p, self.wt
        full = p.ow // wt
        inside = [t for t in range(full)
                  if t * wt * self.sw >= self.pl and (t * wt + wt - 1) * self.sw - self.pl + (p.s - 1) * self.dw < p.w]
        first, end = (inside[0], inside[-1] + 1) if inside else (full, full)
        static = [(t * wt, wt) for t in list(range(first)) + list(range(end, full))]
        if p.ow % wt:
            static.append((full * wt, p.ow % wt))
        return [(ow0, w, self.column_taps(ow0, w)) for ow0, w in static], (first, end)

    def channel_tiles(self, g_k0, part):
        """(k0, width) of the channel tiles of a group starting at channel g_k0: a loop of full tiles
        (k0 dynamic) when there are several, then the tail. With the channels split between threads
        (self.parts > 1, no tail), the `part`-th share of the full tiles."""
        b, full, tail = self.b, self.kg // self.ft // self.parts, self.kg % self.ft
        first = b.mul(part, full)
        if full == 1:
            yield b.add(g_k0, b.mul(first, self.ft)), self.ft
        elif full > 1:
            kt = b.open_for(first, b.add(first, full))
            yield b.add(g_k0, b.mul(kt, self.ft)), self.ft
            b.close()
        if tail:
            yield b.add(g_k0, self.kg - tail), tail

    def row(self, n_oh, g):
        """Output row n_oh = n*OH + oh of group g: sets the input offset of its group (xn_c0) and first
        filter row's input row (ih0); returns (n, oh, r_lo, r_hi), the filter rows inside the image."""
        b, p = self.b, self.p
        n, oh = b.op("arith.divui", n_oh, p.oh), b.op("arith.remui", n_oh, p.oh)
        self.ih0 = b.add(b.mul(oh, self.sh), -self.pt)         # 0 <= ih0 + r*dh < H
        neg = b.mul(self.ih0, -1)
        r_lo = b.op("arith.maxsi", _ceil_div(b, neg, self.dh), 0)
        r_hi = b.op("arith.minsi", _ceil_div(b, b.add(neg, p.h), self.dh), p.r)
        self.xn_c0 = b.add(b.mul(n, self.xs[0]), b.mul(b.mul(g, self.cg), self.xs[1]))
        return n, oh, r_lo, r_hi

    def columns(self, n, oh, r_lo, r_hi, k0, ft: int):
        """Every column tile of one output row for ft channels from k0: the border and tail tiles, then
        the loop of interior tiles."""
        static, (first, end) = self.column_tiles()
        for ow0, wt, taps in static:
            self.tile(n, oh, r_lo, r_hi, ow0, k0, wt, ft, taps)
        if end > first:
            t = self.b.open_for(first, end)
            self.tile(n, oh, r_lo, r_hi, self.b.mul(t, self.wt), k0, self.wt, ft, None)
            self.b.close()

    def filter_major(self) -> bool:
        """Threads over the (group, channel tile)s, each looping over every output row, when the filter
        outweighs the input (deep layers: 512 x 3x3 x 512 filters on 7x7 images): each filter slice is
        read from memory once instead of once per row. Needs whole channel tiles that the threads share evenly."""
        p = self.p
        tiles = self.p.groups * (self.kg // self.ft)
        return self.kg % self.ft == 0 and (tiles % self.threads == 0 or tiles >= 4 * self.threads) and \
            p.r * p.s * self.cg * p.k > p.n * p.h * p.w * p.c

    def kernel(self, name: str) -> str:
        b, p = self.b, self.p
        self.xf, self.wf, self.outf = self.b.flat(self.x), self.b.flat(self.w), self.b.flat(self.out)
        self.biasf = self.b.flat(self.bias) if self.bias else None
        self.resf = self.b.flat(self.residual) if self.residual else None
        rows = p.n * p.oh
        it = b.fresh("it")
        if self.filter_major():
            tiles = self.kg // self.ft
            b.emit(f"scf.forall ({it}) in ({p.groups * tiles}) {{")
            b.depth += 1
            g = b.op("arith.divui", it, tiles)
            k0 = b.add(b.mul(g, self.kg), b.mul(b.op("arith.remui", it, tiles), self.ft))
            n_oh = b.open_for(0, rows)
            self.columns(*self.row(n_oh, g), k0, self.ft)
            b.close()
        else:
            # rows that do not split evenly between the threads: their channel tiles do
            self.parts = self.threads if (rows * p.groups) % self.threads and \
                self.kg % (self.ft * self.threads) == 0 else 1
            b.emit(f"scf.forall ({it}) in ({rows * p.groups * self.parts}) {{")
            b.depth += 1
            row, part = (b.op("arith.divui", it, self.parts), b.op("arith.remui", it, self.parts)) \
                if self.parts > 1 else (it, 0)
            g = b.op("arith.remui", row, p.groups)
            n, oh, r_lo, r_hi = self.row(b.op("arith.divui", row, p.groups), g)
            for k0, ft in self.channel_tiles(b.mul(g, self.kg), part):
                self.columns(n, oh, r_lo, r_hi, k0, ft)
        b.depth -= 1
        b.emit("}")
        return b.function(name, self.signature, self.residual)


def conv_kernel(name: str, signature: list[tuple[str, str]], problem, params: dict, attrs: dict,
                threads: int) -> str:
    """The kernel function text: signature = [(argument, memref type)] in kernel order (input,
    filter, [bias], [residual], output)."""
    return _Conv(problem, params, attrs, signature, threads).kernel(name)

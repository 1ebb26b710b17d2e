"""Random graphs over every op of the Graph frontend, seeded and reproducible, as Python source.

A Case is data: the graph layout and dtype, the layout option of the compile, and a list of steps. A step
names its op, its tensor operands (earlier steps, by name) and its attributes in a form that does not fix
the operands' shapes ("groups: depthwise", "reshape: merge axes 1 and 2", "a per-channel parameter"), so
that shrinking an input dimension or dropping a step leaves a case that still means something.

render(case) turns a Case into Python source, one line per graph call and one per float64 reference
call, and executes it line by line: the shapes of what was built so far decide the literal shapes of the
next weights. The source is what ran, so a failing case prints as a test (shrink.py) that builds exactly
the same graph from exactly the same data (one numpy generator seeded with the case's seed, drawn in
order). The frontend's shape rules decide what is valid: a step they reject (an OpenPrimError) or that the
reference cannot compute makes the case Invalid, and generate() draws another step.

Values are kept in ranges where float16 is meaningful: weights scaled by 1/sqrt(fan-in), exp of clamped
values, log/sqrt/div/pow of |x| + c. Each reference result is rounded to the case's dtype, as the compiled
graph stores it between kernels; the tolerance grows with the longest chain of reductions behind an output.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

import numpy as np

import fuzzing  # noqa: F401 - test/python on sys.path
from fuzzing import refops
from helpers import rounded
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend import Graph

DTYPES = ("f32", "f16", "bf16")
LAYOUTS = ("NCHW", "NHWC")
MAX_ELEMENTS = 60_000          # per value: keeps the float64 reference fast
MAX_MACS = 4_000_000           # per conv/matmul reference
SIZES = tuple(range(1, 18))   # image sides, matrix and sequence lengths
CHANNELS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 17)
ACTIVATIONS = (("none", ()), ("none", ()), ("relu", ()), ("leaky_relu", (0.1,)), ("clamp", (-0.5, 1.5)),
               ("sigmoid", ()), ("tanh", ()), ("gelu", ()), ("gelu_tanh", ()), ("silu", ()), ("elu", (0.7,)))


class Invalid(Exception):
    """A case the frontend (or the reference) rejects: not a finding, the generator draws again."""


@dataclass
class Case:
    seed: int
    dtype: str
    layout: str                       # the Graph's layout (conv, pools, norms)
    compile_layout: str               # openprim.compile's layout option: "NHWC" or "keep"
    steps: list = field(default_factory=list)   # dicts: name, op, src (names), attributes
    outputs: list = field(default_factory=list)  # step names

    def copy(self, **changes) -> "Case":
        return replace(self, **{"steps": [dict(s) for s in self.steps], "outputs": list(self.outputs), **changes})

    def ops(self) -> list[str]:
        return [s["op"] for s in self.steps if s["op"] != "input"]


@dataclass
class Rendered:
    """A case's source and what executing it made: the Graph, its feeds, the references and the `reduction`
    of helpers.assert_close for each output."""
    source: list
    graph: Graph
    feeds: list
    want: list
    reductions: list


# ------------------------------------------------------------------------------------------------ rendering
class _Renderer:
    def __init__(self, case: Case):
        self.case, self.lines, self.red = case, [], {}
        self.macs = 0
        self.ns = {"np": np, "Graph": Graph, "fref": refops, "rounded": rounded}
        self.emit(f"rng = np.random.default_rng({case.seed})")
        self.emit(f"g = Graph(layout={case.layout!r}, dtype={case.dtype!r})")
        self.emit("feeds = []")

    def emit(self, line: str):
        self.lines.append(line)
        try:
            exec(line, self.ns)
        except OpenPrimError as e:
            raise Invalid(f"{line}: {e}") from None
        except (ValueError, TypeError, AssertionError, IndexError, ZeroDivisionError, FloatingPointError) as e:
            raise Invalid(f"{line}: reference: {type(e).__name__}: {e}") from None

    def shape(self, name: str) -> tuple:
        return tuple(self.ns[f"t_{name}"].shape)

    def channel_axis(self, rank: int) -> int:
        return 1 if self.case.layout == "NCHW" else rank - 1

    def data(self, var: str, shape, kind="normal", scale=1.0):
        """kind "keys": an attention mask, 0 on the first `scale` keys (the last axis) and -inf after."""
        shape = tuple(int(d) for d in shape)
        draw = {"normal": f"rng.standard_normal({shape}) * {scale!r}",
                "positive": f"rng.uniform(0.5, 2.0, {shape})",
                "exponent": f"rng.uniform(-1.5, 1.5, {shape})",
                "keys": f"np.where(np.arange({shape[-1]}) < {scale!r}, 0.0, -np.inf) + np.zeros({shape})"}[kind]
        self.emit(f"{var} = rounded({draw}, {self.case.dtype!r})")
        return var

    def param(self, var: str, shape, kind="normal", scale=1.0) -> tuple[str, str]:
        """(graph expression, reference expression) of a new weight."""
        self.data(var, shape, kind, scale)
        return f'g.param("{var}", {var})', var

    def graph_input(self, var: str, shape, kind="normal", scale=1.0) -> tuple[str, str]:
        self.data(var, shape, kind, scale)
        self.emit(f"feeds.append({var}.astype(np.float32))")
        self.emit(f't_{var} = g.input("{var}", {var}.shape)')
        return f"t_{var}", var

    def result(self, step, graph_expr: str, ref_expr: str, reduction: int = 1):
        name = step["name"]
        self.emit(f"t_{name} = {graph_expr}")
        self.emit(f"r_{name} = rounded({ref_expr}, {self.case.dtype!r})")
        shape = self.shape(name)
        if math.prod(shape) > MAX_ELEMENTS:
            raise Invalid(f"{name}: {shape} is too large for the fuzzer")
        ref = self.ns[f"r_{name}"]
        if tuple(ref.shape) != shape:
            raise Invalid(f"{name}: the reference's shape {ref.shape} differs from {shape}")
        if not np.all(np.isfinite(ref)):   # e.g. a dilated max pool window wholly in the padding: -inf
            raise Invalid(f"{name}: the reference has values that are not finite")
        behind = max((self.red[s] for s in step["src"]), default=1)
        self.red[name] = behind + reduction - 1 if reduction > 1 else behind


def render(case: Case) -> Rendered:
    """Execute the case's source; Invalid if the frontend or the reference rejects a step."""
    r = _Renderer(case)
    for step in case.steps:
        if step["op"] == "input":
            r.graph_input(step["name"], step["shape"])
            r.emit(f"r_{step['name']} = {step['name']}")
            r.red[step["name"]] = 1
        else:
            try:
                RENDER[step["op"]](r, step, *[f"t_{s}" for s in step["src"]])
            except (ZeroDivisionError, ValueError, IndexError) as e:   # attributes a shrink made meaningless
                raise Invalid(f"{step['name']}: {type(e).__name__}: {e}") from None
            if r.macs > MAX_MACS:
                raise Invalid(f"{step['name']}: {r.macs} multiply-adds is too many for the fuzzer")
    if not case.outputs:
        raise Invalid("no outputs")
    r.emit(f"outputs = [{', '.join(f't_{o}' for o in case.outputs)}]")
    r.emit(f"want = [{', '.join(f'r_{o}' for o in case.outputs)}]")
    r.emit(f"reductions = {[r.red[o] for o in case.outputs]}")
    r.emit("g.output(*outputs)")
    return Rendered(r.lines, r.ns["g"], r.ns["feeds"], r.ns["want"], r.ns["reductions"])


# ------------------------------------------------------------------------------------------------ the ops
# Each renderer: (renderer, step, graph variable of each operand) -> emits the step's lines.

def _r(t: str) -> str:
    return "r_" + t[2:]


def _activation(step) -> tuple[str, str]:
    act, params = step.get("act", ("none", ()))
    if act == "none":
        return "", ""
    g = f", activation={act!r}, activation_params={tuple(params)!r}"
    return g, f", activation_name={act!r}, activation_params={tuple(params)!r}"


def _conv2d(r, s, x):
    shape = r.shape(s["src"][0])
    if len(shape) != 4:
        raise Invalid("conv2d needs a 4-d input")
    c = shape[r.channel_axis(4)]
    if s["groups"] == "depthwise":
        groups, k = c, c * s["multiplier"]
    else:
        divisors = [d for d in range(1, c + 1) if c % d == 0]
        groups = divisors[s["groups"] % len(divisors)]
        k = -(-s["k"] // groups) * groups
    kr, ks = s["kernel"]
    wshape = (k, c // groups, kr, ks) if r.case.layout == "NCHW" else (k, kr, ks, c // groups)
    fan_in = c // groups * kr * ks
    gw, rw = r.param(f"w_{s['name']}", wshape, scale=round(1 / math.sqrt(fan_in), 4))
    gb, rb = r.param(f"b_{s['name']}", (k,), scale=0.5) if s["bias"] else ("None", "None")
    ga, ra = _activation(s)
    attrs = f"stride={tuple(s['stride'])}, padding={tuple(s['padding'])}, dilation={tuple(s['dilation'])}, " \
            f"groups={groups}"
    r.result(s, f"g.conv2d({x}, {gw}, {gb}, {attrs}{ga})",
             f"fref.conv2d({_r(x)}, {rw}, {rb}, {attrs}, layout={r.case.layout!r}{ra})", fan_in)
    r.macs += math.prod(r.shape(s["name"])) * fan_in


def _matmul(r, s, a):
    shape = r.shape(s["src"][0])
    kdim = shape[-1]
    act_graph, act_ref = _activation(s)
    gb = rb = "None"
    mode = s["mode"]
    if mode == "self":
        n = shape[-2]
        gw, rw, t = a, _r(a), True
    else:
        n, t = s["n"], mode in ("nt", "linear")
        wshape = (n, kdim) if t else (kdim, n)
        if mode == "batched":
            wshape = tuple(shape[:-2]) + wshape
        gw, rw = r.param(f"w_{s['name']}", wshape, scale=round(1 / math.sqrt(kdim), 4))
    if s["bias"]:
        gb, rb = r.param(f"b_{s['name']}", (n,), scale=0.5)
    if mode == "linear" and not act_graph:
        graph = f"g.linear({a}, {gw}, {gb})"
    else:
        graph = f"g.matmul({a}, {gw}, {gb}, transpose_rhs={t}{act_graph})"
    r.result(s, graph, f"fref.matmul({_r(a)}, {rw}, {rb}, transpose_rhs={t}{act_ref})", kdim)
    r.macs += math.prod(r.shape(s["name"])) * kdim


def _batch_norm(r, s, x):
    shape = r.shape(s["src"][0])
    if len(shape) != 4:
        raise Invalid("batch_norm needs a 4-d input")
    c = (shape[r.channel_axis(4)],)
    n = s["name"]
    parts = [r.param(f"{p}_{n}", c, kind, scale) for p, kind, scale in
             (("scale", "normal", 1.0), ("shift", "normal", 0.5), ("mean", "normal", 0.5), ("var", "positive", 1))]
    r.result(s, f"g.batch_norm({x}, {', '.join(p[0] for p in parts)}, eps={s['eps']!r})",
             f"fref.batch_norm({_r(x)}, {', '.join(p[1] for p in parts)}, eps={s['eps']!r}, "
             f"layout={r.case.layout!r})")


def _norm_input(r, s, x) -> tuple[str, str]:
    """(graph, reference) of a row norm's input: x, or x + a residual (prim-fuse folds it into the norm)."""
    if len(s["src"]) == 1:
        return x, _r(x)
    t = f"t_{s['src'][1]}"
    return f"g.add({x}, {t})", f"fref.add({_r(x)}, {_r(t)})"


def _layer_norm(r, s, x, *_):
    shape = r.shape(s["src"][0])
    nd = min(s["ndim"], len(shape))
    gs = rs = gh = rh = "None"
    if s["affine"]:
        gs, rs = r.param(f"scale_{s['name']}", shape[-nd:])
        gh, rh = r.param(f"shift_{s['name']}", shape[-nd:], scale=0.5)
    gx, rx = _norm_input(r, s, x)
    r.result(s, f"g.layer_norm({gx}, {gs}, {gh}, eps={s['eps']!r}, normalized_ndim={nd})",
             f"fref.layer_norm({rx}, {rs}, {rh}, eps={s['eps']!r}, normalized_ndim={nd})",
             math.prod(shape[-nd:]))


def _rms_norm(r, s, x, *_):
    shape = r.shape(s["src"][0])
    nd = min(s["ndim"], len(shape))
    gs, rs = r.param(f"scale_{s['name']}", shape[-nd:]) if s["affine"] else ("None", "None")
    gx, rx = _norm_input(r, s, x)
    r.result(s, f"g.rms_norm({gx}, {gs}, eps={s['eps']!r}, normalized_ndim={nd})",
             f"fref.rms_norm({rx}, {rs}, eps={s['eps']!r}, normalized_ndim={nd})", math.prod(shape[-nd:]))


def _group_norm(r, s, x):
    shape = r.shape(s["src"][0])
    if len(shape) != 4:
        raise Invalid("group_norm needs a 4-d input")
    c = shape[r.channel_axis(4)]
    divisors = [d for d in range(1, c + 1) if c % d == 0]
    groups = divisors[s["groups"] % len(divisors)]
    gs, rs = r.param(f"scale_{s['name']}", (c,))
    gh, rh = r.param(f"shift_{s['name']}", (c,), scale=0.5)
    r.result(s, f"g.group_norm({x}, {groups}, {gs}, {gh}, eps={s['eps']!r})",
             f"fref.group_norm({_r(x)}, {groups}, {rs}, {rh}, eps={s['eps']!r}, layout={r.case.layout!r})",
             c // groups * math.prod(shape) // shape[0] // c)


def _attention(r, s, q):
    """q: the 4-d value; keys and values: q itself ("self") or inputs/parameters of a drawn length; a mask
    (broadcast over some axes) of random values or of -inf past a drawn number of keys."""
    shape = r.shape(s["src"][0])
    if len(shape) != 4:
        raise Invalid("attention needs a 4-d query")
    bshd = s["layout"] == "BSHD"
    swap = (0, 2, 1, 3) if bshd else (0, 1, 2, 3)
    B, H, Sq, D = (shape[i] for i in swap)
    n = s["name"]
    if s["keys"] == "self":
        (gk, rk), (gv, rv), Sk = (q, _r(q)), (q, _r(q)), Sq
    else:
        Sk = s["keys"]
        if Sk < 1:
            raise Invalid("no keys")
        kv = tuple((B, H, Sk, D)[i] for i in swap)
        new = r.graph_input if s["kv"] == "input" else r.param
        (gk, rk), (gv, rv) = new(f"k_{n}", kv), new(f"v_{n}", kv)
    gm = rm = "None"
    if s["mask"] != "none":
        mshape = {"full": (B, H, Sq, Sk), "keys": (Sk,), "rows": (Sq, Sk), "heads": (1, H, 1, Sk),
                  "batch": (B, 1, Sq, Sk)}[s["mask"]]
        kind, keep = ("keys", max(1, min(s["keep"], Sk))) if s["mask_kind"] == "keys" else ("normal", 1.0)
        new = r.graph_input if s["mask_from"] == "input" else r.param
        gm, rm = new(f"m_{n}", mshape, kind, keep)
    args = f"causal={s['causal']}, scale={s['scale']!r}, layout={s['layout']!r}"
    r.result(s, f"g.attention({q}, {gk}, {gv}, {gm}, {args})",
             f"fref.attention({_r(q)}, {rk}, {rv}, {rm}, {args})", max(D, Sk))
    r.macs += 2 * B * H * Sq * Sk * D


def _unary(r, s, x):
    args = "".join(f", {a!r}" for a in s.get("args", ()))
    op = s["op"]
    if op == "exp":        # exp of [-4, 4]: no float16 overflow
        r.result(s, f"g.exp(g.clamp({x}, -4.0, 4.0))", f"fref.exp(fref.clamp({_r(x)}, -4.0, 4.0))")
    elif op in ("log", "sqrt"):   # of |x| + c: defined, and away from the pole
        c = 0.5 if op == "log" else 0.1
        r.result(s, f"g.{op}(g.add(g.abs({x}), {c}))", f"fref.{op}(fref.abs({_r(x)}) + {c})")
    else:
        kw = f", approximate={s['approximate']!r}" if op == "gelu" else ""
        r.result(s, f"g.{op}({x}{args}{kw})", f"fref.{op}({_r(x)}{args}{kw})")


def _other_operand(r, s, shape) -> tuple[str, str]:
    """The second operand of a binary step: (graph expression, reference expression)."""
    kind = s["other"]
    if kind in ("scalar", "scalar_left"):
        return repr(s["value"]), repr(s["value"])
    if kind == "value":
        t = f"t_{s['src'][1]}"
        return t, _r(t)
    oshape = [1 if m else d for m, d in zip(s["mask"][-len(shape):], shape)][s.get("drop", 0):]
    exponent = s["op"] == "pow"
    if kind == "input" and not exponent:
        return r.graph_input(f"in_{s['name']}", oshape)
    return r.param(f"p_{s['name']}", oshape, "exponent" if exponent else "normal")


def _binary(r, s, a, *_):
    shape = r.shape(s["src"][0])
    gb, rb = _other_operand(r, s, shape)
    op, ga, ra = s["op"], a, _r(a)
    if op == "div":            # the denominator is |b| + 0.5 (a scalar: its own value, of magnitude >= 0.5)
        if s["other"] == "scalar_left":
            ga, ra, gb, rb = gb, rb, f"g.add(g.abs({a}), 0.5)", f"(fref.abs({_r(a)}) + 0.5)"
        elif s["other"] != "scalar":
            gb, rb = f"g.add(g.abs({gb}), 0.5)", f"(fref.abs({rb}) + 0.5)"
    elif op == "pow":          # (|a| + 0.5) ** b: b a parameter in [-1.5, 1.5], or a scalar from -1 to 3
        ga, ra = f"g.add(g.abs({a}), 0.5)", f"(fref.abs({_r(a)}) + 0.5)"
    elif s["other"] == "scalar_left":
        ga, ra, gb, rb = gb, rb, ga, ra
    if op in ("add", "sub", "mul", "div") and s.get("operator"):
        sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[op]
        graph = f"({ga} {sym} {gb})"
    else:
        graph = f"g.{op}({ga}, {gb})"
    r.result(s, graph, f"fref.{op}({ra}, {rb})")


def _pool(r, s, x):
    shape = r.shape(s["src"][0])
    if len(shape) != 4:
        raise Invalid("pools need a 4-d input")
    kh, kw = s["kernel"]
    pad = tuple(min(p, k // 2) for p, k in zip(s["padding"], (kh, kw, kh, kw)))
    stride = None if s["stride"] is None else tuple(s["stride"])
    common = f"({kh}, {kw}), stride={stride}, padding={pad}"
    if s["op"] == "max_pool2d":
        common += f", dilation={tuple(s['dilation'])}, ceil_mode={s['ceil_mode']}"
    else:
        common += f", ceil_mode={s['ceil_mode']}, count_include_pad={s['count_include_pad']}"
    r.result(s, f"g.{s['op']}({x}, {common})", f"fref.{s['op']}({_r(x)}, {common}, layout={r.case.layout!r})",
             kh * kw if s["op"] == "avg_pool2d" else 1)


def _global_avg_pool(r, s, x):
    shape = r.shape(s["src"][0])
    if len(shape) != 4:
        raise Invalid("global_avg_pool needs a 4-d input")
    r.result(s, f"g.global_avg_pool({x})", f"fref.global_avg_pool({_r(x)}, layout={r.case.layout!r})",
             math.prod(shape) // shape[0] // shape[r.channel_axis(4)])


def _softmax(r, s, x):
    shape = r.shape(s["src"][0])
    axis = s["axis"] % len(shape) - (len(shape) if s["axis"] < 0 else 0)
    r.result(s, f"g.{s['op']}({x}, axis={axis})", f"fref.{s['op']}({_r(x)}, axis={axis})", shape[axis])


def _reshape(r, s, x):
    shape = list(r.shape(s["src"][0]))
    j = s["axis"] % len(shape)
    how = s["how"]
    if how == "flatten":
        start = max(1, min(j, len(shape) - 1)) if len(shape) > 1 else 0
        r.result(s, f"g.flatten({x}, {start})", f"fref.flatten({_r(x)}, {start})")
        return
    if how == "merge":
        if j + 1 >= len(shape):
            raise Invalid("merge needs two axes")
        new = shape[:j] + [shape[j] * shape[j + 1]] + shape[j + 2:]
    else:                                   # split axis j into (f, -1) by one of its divisors
        divisors = [d for d in range(2, shape[j]) if shape[j] % d == 0]
        if not divisors or len(shape) >= 5:
            raise Invalid("no axis to split")
        f = divisors[s["factor"] % len(divisors)]
        new = shape[:j] + [f, -1] + shape[j + 1:]
    r.result(s, f"g.reshape({x}, {tuple(new)})", f"fref.reshape({_r(x)}, {tuple(new)})")


def _transpose(r, s, x):
    rank = len(r.shape(s["src"][0]))
    perm = tuple(sorted(range(rank), key=lambda i: s["keys"][i % len(s["keys"])] + i * 1e-3))
    r.result(s, f"g.transpose({x}, {perm})", f"fref.transpose({_r(x)}, {perm})")


def _concat(r, s, x, *rest):
    shape = r.shape(s["src"][0])
    axis = s["axis"] % len(shape) - (len(shape) if s["axis"] < 0 else 0)
    if s["with"] == "self":
        g2, r2 = x, _r(x)
    elif s["with"] == "value":
        g2, r2 = rest[0], _r(rest[0])
    else:
        other = list(shape)
        other[axis] = s["length"]
        g2, r2 = r.param(f"p_{s['name']}", other)
    r.result(s, f"g.concat([{x}, {g2}], axis={axis})", f"fref.concat([{_r(x)}, {r2}], axis={axis})")


def _pad(r, s, x):
    rank = len(r.shape(s["src"][0]))
    pads = [s["pads"][i % len(s["pads"])] for i in range(rank)] + \
        [s["pads"][(i + rank) % len(s["pads"])] for i in range(rank)]
    r.result(s, f"g.pad({x}, {pads}, {s['value']!r})", f"fref.pad({_r(x)}, {pads}, {s['value']!r})")


def _slice(r, s, x):
    rank = len(r.shape(s["src"][0]))
    axes = [a for a in s["axes"] if -rank <= a < rank]
    if not axes:
        raise Invalid("no axis to slice")
    n = len(axes)
    args = f"{s['starts'][:n]}, {s['ends'][:n]}, axes={axes}, steps={s['steps'][:n]}"
    r.result(s, f"g.slice({x}, {args})", f"fref.slice({_r(x)}, {args})")


def _reduce(r, s, x):
    shape = r.shape(s["src"][0])
    axes = sorted({a % len(shape) for a in s["axes"]})
    axes = [a - len(shape) if s["negative"] else a for a in axes]
    count = math.prod(shape[a] for a in axes) if s["kind"] in ("sum", "mean") else 1
    r.result(s, f"g.reduce({x}, {s['kind']!r}, {axes}, keepdims={s['keepdims']})",
             f"fref.reduce({_r(x)}, {s['kind']!r}, {axes}, keepdims={s['keepdims']})", count)


def _resize(r, s, x):
    rank = len(r.shape(s["src"][0]))
    scales = [s["scales"][i % len(s["scales"])] for i in range(rank)]
    r.result(s, f"g.resize_nearest({x}, {scales})", f"fref.resize_nearest({_r(x)}, {scales})")


UNARY = ("relu", "sigmoid", "tanh", "silu", "leaky_relu", "elu", "clamp", "relu6", "gelu", "exp", "log", "sqrt",
         "abs", "erf", "hardswish", "hardsigmoid")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "pow")
RENDER = {"conv2d": _conv2d, "matmul": _matmul, "batch_norm": _batch_norm, "layer_norm": _layer_norm,
          "rms_norm": _rms_norm, "group_norm": _group_norm, "attention": _attention,
          **{op: _unary for op in UNARY}, **{op: _binary for op in BINARY},
          "max_pool2d": _pool, "avg_pool2d": _pool, "global_avg_pool": _global_avg_pool, "softmax": _softmax,
          "log_softmax": _softmax, "reshape": _reshape, "transpose": _transpose, "concat": _concat, "pad": _pad,
          "slice": _slice, "reduce": _reduce, "resize_nearest": _resize}
FOUR_D = {"conv2d", "batch_norm", "group_norm", "max_pool2d", "avg_pool2d", "global_avg_pool", "attention"}
# How often each op is drawn: conv2d and matmul most (they are where the solvers differ), then the other
# ops of 4-d values (drawn only while the value is 4-d).
WEIGHTS = {op: 3 if op in FOUR_D else 1 for op in RENDER} | {"conv2d": 10, "matmul": 6}


# ------------------------------------------------------------------------------------------------ generation
def _draw_step(rng: random.Random, op: str, name: str, src: str, shape: tuple, values: dict) -> dict:
    """Random attributes of `op` on a value of `shape` (values: every earlier value's shape, for operands)."""
    s = {"name": name, "op": op, "src": [src]}
    pick = rng.choice
    if op == "conv2d":
        s.update(k=pick((1, 2, 3, 4, 5, 7, 8, 13, 16, 17)), kernel=(pick((1, 1, 2, 3, 3, 5)), pick((1, 1, 2, 3, 3, 5))),
                 stride=pick(((1, 1), (1, 1), (2, 2), (1, 2), (3, 3), (2, 1))),
                 dilation=pick(((1, 1), (1, 1), (1, 1), (2, 2), (1, 2))),
                 padding=pick(((0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 0, 1), (2, 2, 2, 2), (1, 0, 2, 1))),
                 # groups: "depthwise", or an index into the divisors of the channels (0: 1 group)
                 groups=pick((0, 0, 0, 0, 1, 2, 3, "depthwise", "depthwise")), multiplier=pick((1, 1, 2)),
                 bias=rng.random() < 0.5, act=pick(ACTIVATIONS))
    elif op == "matmul":
        s.update(n=pick((1, 2, 3, 5, 7, 8, 16, 17, 31, 33)), mode=pick(("nn", "nn", "nt", "linear", "batched", "self")),
                 bias=rng.random() < 0.4, act=pick(ACTIVATIONS))
        if s["mode"] == "batched" and len(shape) < 3:
            s["mode"] = "nn"
    elif op == "batch_norm":
        s["eps"] = pick((1e-5, 1e-3))
    elif op in ("layer_norm", "rms_norm"):
        s.update(ndim=pick((1, 1, 2)), affine=rng.random() < 0.7, eps=pick((1e-5, 1e-3)))
        same = [n for n, shp in values.items() if n != src and shp == shape]
        if same and rng.random() < 0.4:
            s["src"].append(pick(same))
    elif op == "attention":
        s.update(layout=pick(("BHSD", "BHSD", "BSHD")), keys=pick(("self", "self") + SIZES),
                 kv=pick(("input", "param")), mask=pick(("none", "none", "full", "keys", "rows", "heads", "batch")),
                 mask_kind=pick(("normal", "keys")), mask_from=pick(("input", "param")), keep=rng.randint(1, 17),
                 causal=rng.random() < 0.5, scale=pick((None, None, 0.3)))
    elif op == "group_norm":
        s.update(groups=rng.randrange(8), eps=pick((1e-5, 1e-3)))
    elif op in ("leaky_relu", "elu"):
        s["args"] = (pick((0.01, 0.2, 1.5)),)
    elif op == "hardsigmoid":
        s["args"] = pick(((0.2, 0.5), (0.1667, 0.5), (0.5, 0.25)))
    elif op == "clamp":
        s["args"] = pick(((-1.0, 1.0), (0.0, 0.5), (-0.25, 2.0)))
    elif op == "gelu":
        s["approximate"] = pick(("none", "tanh"))
    elif op in BINARY:
        kinds = ["param", "param", "scalar", "scalar_left", "input"]
        same = [n for n, shp in values.items() if n != src and _broadcasts(shp, shape)]
        if same and op != "pow":
            kinds += ["value", "value"]
        s.update(other=pick(kinds), mask=[rng.random() < 0.4 for _ in range(6)], drop=pick((0, 0, 0, 1)),
                 value=pick((0.5, -1.25, 2.0, 3.0)) if op != "pow" else pick((2.0, 0.5, -1.0, 3.0)),
                 operator=rng.random() < 0.3)
        if s["other"] == "scalar_left" and op == "pow":
            s["other"] = "scalar"
        if s["other"] == "value":
            s["src"].append(pick(same))
    elif op in ("max_pool2d", "avg_pool2d"):
        s.update(kernel=(pick((1, 2, 3, 3, 5)), pick((1, 2, 3, 3, 5))), stride=pick((None, None, (1, 1), (2, 2), (1, 2), (3, 2))),
                 padding=pick(((0, 0, 0, 0), (1, 1, 1, 1), (1, 0, 0, 1), (2, 2, 2, 2))),
                 dilation=pick(((1, 1), (1, 1), (2, 1))), ceil_mode=rng.random() < 0.3,
                 count_include_pad=rng.random() < 0.5)
    elif op in ("softmax", "log_softmax"):
        s["axis"] = rng.randrange(-len(shape), len(shape))
    elif op == "reshape":
        s.update(how=pick(("flatten", "merge", "split")), axis=rng.randrange(len(shape)), factor=rng.randrange(4))
    elif op == "transpose":
        s["keys"] = [rng.random() for _ in range(len(shape))]
    elif op == "concat":
        same = [n for n, shp in values.items() if len(shp) == len(shape)]
        s.update(axis=rng.randrange(-len(shape), len(shape)), length=pick((1, 2, 3)),
                 **{"with": pick(("self", "param", "param") + (("value",) if same else ()))})
        if s["with"] == "value":
            s["src"].append(pick(same))
    elif op == "pad":
        s.update(pads=[pick((0, 0, 1, 2)) for _ in range(2 * len(shape))], value=pick((0.0, 1.5, -2.0)))
    elif op == "slice":
        n = rng.choice((1, 1, 2))
        axes = rng.sample(range(len(shape)), min(n, len(shape)))
        s.update(axes=[a - len(shape) if rng.random() < 0.3 else a for a in axes],
                 starts=[rng.randrange(-shape[a], shape[a]) for a in axes],
                 ends=[rng.choice((shape[a], shape[a] + 3, -1, rng.randrange(1, shape[a] + 1))) for a in axes],
                 steps=[pick((1, 1, 2, 3)) for _ in axes])
    elif op == "reduce":
        axes = rng.sample(range(len(shape)), rng.randrange(1, len(shape) + 1))
        s.update(kind=pick(("sum", "mean", "max", "min")), axes=axes, keepdims=rng.random() < 0.5,
                 negative=rng.random() < 0.3)
    elif op == "resize_nearest":
        s["scales"] = [pick((1, 1, 2, 3)) for _ in range(len(shape))]
    return s


def _broadcasts(a: tuple, b: tuple) -> bool:
    """Does `a` broadcast to `b` (b's shape unchanged)?"""
    return len(a) <= len(b) and all(x in (1, y) for x, y in zip(reversed(a), reversed(b)))


def generate(seed: int, max_ops: int = 5) -> Case:
    """The case of `seed`: one random input (4-d image or 2/3-d matrix), 1..max_ops ops, one or two outputs.
    The first op is the frontend's op number seed % len(RENDER) (when it can be drawn on the input), so any
    len(RENDER) consecutive seeds draw every op; the others are random."""
    rng = random.Random(seed)
    first = list(RENDER)[seed % len(RENDER)]
    case = Case(seed, rng.choice(DTYPES), rng.choice(LAYOUTS), "NHWC")
    if case.layout == "NCHW" and rng.random() < 0.4:
        case.compile_layout = "keep"
    if rng.random() < 0.75 or first in FOUR_D:
        n, c, h, w = rng.choice((1, 1, 2, 3)), rng.choice(CHANNELS), rng.choice(SIZES), rng.choice(SIZES)
        shape = (n, c, h, w) if case.layout == "NCHW" else (n, h, w, c)
    else:
        shape = tuple(rng.choice(SIZES + (19, 23, 32)) for _ in range(rng.choice((2, 3))))
    case.steps.append({"name": "x0", "op": "input", "src": [], "shape": shape})
    shapes = {"x0": shape}
    for i in range(1, rng.randint(1, max_ops) + 1):
        name = f"v{i}"
        for attempt in range(40):
            src = f"v{i - 1}" if i > 1 and rng.random() < 0.75 else rng.choice(list(shapes))
            shape = shapes[src]
            if not shape:      # a scalar (a reduce over every axis): the ops here want an axis
                continue
            ops = [op for op in WEIGHTS if op not in FOUR_D or len(shape) == 4]
            op = first if i == 1 and attempt < 20 else rng.choices(ops, [WEIGHTS[o] for o in ops])[0]
            step = _draw_step(rng, op, name, src, shape, shapes)
            trial = case.copy(outputs=[name])
            trial.steps.append(step)
            try:
                rendered = render(trial)
            except Invalid:
                continue
            case.steps.append(step)
            shapes[name] = tuple(rendered.graph.outputs[0].shape)
            break
    ops = [s["name"] for s in case.steps if s["op"] != "input"]
    if not ops:
        raise Invalid(f"seed {seed}: no valid op drawn")
    case.outputs = [ops[-1]]
    if len(ops) > 1 and rng.random() < 0.2:
        case.outputs.append(rng.choice(ops[:-1]))
    return case


def case_text(case: Case) -> str:
    """One line: seed, dtype, layouts, the input shape and the ops."""
    x0 = next(s for s in case.steps if s["op"] == "input")["shape"]
    return (f"seed {case.seed}: {case.dtype} {case.layout} (compile layout {case.compile_layout}) "
            f"x0 {'x'.join(map(str, x0))}: {' -> '.join(case.ops())}")

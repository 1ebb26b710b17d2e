"""Input fuzzing (issue 16): mutated .onnx and .mlir files, bad .npy inputs, and what runs them.

The property: whatever a user hands in ends in a correct result or one OpenPrimError (one line; the
commands exit nonzero with it), never another exception, a traceback, an abort, a signal or a hang.

Mutators (seeded random.Random, so a mutant is named by its kind and seed):
  onnx_mutants  bit flips and truncations of the serialized protobuf, wrong attributes (types, zeros,
                negatives, huge values, wrong lengths), wrong input shapes and element types, initializers
                removed, retyped or cut short, nodes deleted, renamed inputs, unknown op types
  mlir_mutants  bit flips, truncations, deleted/duplicated/swapped lines, swapped tokens, numbers replaced,
                random bytes and random text

The harness runs the items in a worker process (`python test/fuzzing/inputs.py ITEMS.json`) that prints
one JSON line per item; an item that kills the worker (a signal, an abort) or takes longer than the
timeout is recorded as a crash or a hang, and the worker restarts after it. Items:
  {"call": "cli" | "opt", "argv": [...]}     openprim.cli.main / openprim.opt.main: the return code (or
                                              SystemExit's) and what the command printed on stderr
  {"call": "onnx", "path": P}                 importer.import_model; when it imports, compiled on the CPU and
                                              compared with onnx's ReferenceEvaluator on the same input
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import select
import subprocess
import sys
import time
import traceback

WORKER = os.path.abspath(__file__)


# ------------------------------------------------------------------------------------------------ ONNX
def onnx_model():
    """A small valid model: Conv(+bias) -> Relu -> MaxPool -> Flatten -> Gemm -> Softmax, opset 17."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name) for name, shape in
             (("W", (4, 3, 3, 3)), ("B", (4,)), ("W2", (5, 64)), ("B2", (5,)))]
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "W2", "B2"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["Y"], axis=-1)]
    graph = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


ONNX_KINDS = ("bitflip", "truncate", "attribute", "shape", "elem_type", "initializer", "node")


def _flip(data: bytes, rng: random.Random, max_bits: int = 8) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, max_bits)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def onnx_mutant(kind: str, seed: int) -> bytes:
    """The serialized mutant of onnx_model() of this kind and seed."""
    from onnx import AttributeProto, TensorProto, helper
    rng = random.Random(f"onnx-{kind}-{seed}")
    model = onnx_model()
    g = model.graph
    if kind == "bitflip":
        return _flip(model.SerializeToString(), rng)
    if kind == "truncate":
        data = model.SerializeToString()
        return data[:rng.randrange(len(data))]
    if kind == "attribute":
        node = rng.choice([n for n in g.node if n.attribute])
        attr = rng.choice(node.attribute)
        bad = rng.choice(("float", "string", "zero", "negative", "huge", "empty", "long", "drop"))
        values = {"zero": 0, "negative": -3, "huge": 2 ** 40}
        if bad == "drop":
            node.attribute.remove(attr)
        elif bad == "float":
            new = helper.make_attribute(attr.name, 1.5)
            attr.CopyFrom(new)
        elif bad == "string":
            attr.CopyFrom(helper.make_attribute(attr.name, "SAME_WHAT"))
        elif attr.type == AttributeProto.INTS:
            n = {"empty": 0, "long": 7}.get(bad, len(attr.ints))
            attr.CopyFrom(helper.make_attribute(attr.name, [values.get(bad, 1)] * n, attr_type=AttributeProto.INTS))
        elif bad in values:
            attr.CopyFrom(helper.make_attribute(attr.name, values[bad]))
        else:
            attr.CopyFrom(helper.make_attribute(attr.name, [1, 2, 3]))
    elif kind == "shape":
        dims = g.input[0].type.tensor_type.shape.dim
        how = rng.choice(("zero", "negative", "huge", "symbolic", "drop", "add"))
        i = rng.randrange(len(dims))
        if how == "drop":
            del dims[i]
        elif how == "add":
            dims.add().dim_value = rng.choice((1, 2))
        elif how == "symbolic":
            dims[i].dim_param = "N"
        else:
            dims[i].dim_value = {"zero": 0, "negative": -2, "huge": 10 ** 9}[how]
    elif kind == "elem_type":
        t = rng.choice((TensorProto.INT64, TensorProto.STRING, TensorProto.UNDEFINED, TensorProto.DOUBLE,
                        TensorProto.FLOAT16, TensorProto.BOOL, 99))
        if rng.random() < 0.5:
            g.input[0].type.tensor_type.elem_type = t
        else:
            rng.choice(g.initializer).data_type = t
    elif kind == "initializer":
        init = rng.choice(g.initializer)
        how = rng.choice(("remove", "short", "dims"))
        if how == "remove":
            g.initializer.remove(init)
        elif how == "short":
            init.raw_data = init.raw_data[:rng.randrange(len(init.raw_data))]
        else:
            init.dims[rng.randrange(len(init.dims))] += rng.choice((-1, 1, 5))
    elif kind == "node":
        node = rng.choice(g.node)
        how = rng.choice(("delete", "rename_input", "unknown_op", "duplicate_output"))
        if how == "delete":
            g.node.remove(node)
        elif how == "rename_input":
            node.input[rng.randrange(len(node.input))] = "nowhere"
        elif how == "unknown_op":
            node.op_type = "FrobnicateV9"
        else:
            node.output[0] = g.node[0].output[0]
    return model.SerializeToString()


def run_onnx(path: str) -> tuple[str, str]:
    """Import; if it imports, compile on the CPU and compare with onnx's ReferenceEvaluator."""
    import numpy as np
    import onnx
    import openprim
    from onnx.reference import ReferenceEvaluator
    from openprim.base.errors import OpenPrimError
    from openprim.pyfrontend.onnx.importer import import_model
    try:
        graph = import_model(path)
        exe = openprim.compile(graph, target="cpu", cache=False)
    except OpenPrimError as e:
        return _error(str(e))
    x = np.random.default_rng(1).standard_normal(graph.inputs[0].shape).astype(np.float32)
    got = exe(x)
    got = got[0] if isinstance(got, tuple) else got
    try:
        want = ReferenceEvaluator(onnx.load(path)).run(None, {graph.inputs[0].name: x})[0]
    except Exception as e:  # noqa: BLE001 - onnx itself rejects the mutant: nothing to compare with
        return "ok", f"imported and ran; onnx's evaluator: {type(e).__name__}"
    if np.shape(got) != np.shape(want) or not np.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True):
        return "bad", f"wrong result: max |err| {np.max(np.abs(got - want)) if np.shape(got) == np.shape(want) else 'shape'}"
    return "ok", "imported, compiled and matches onnx's evaluator"


# ------------------------------------------------------------------------------------------------ MLIR
MLIR_KINDS = ("bitflip", "truncate", "lines", "tokens", "numbers", "bytes", "text")


def mlir_mutant(text: str, kind: str, seed: int) -> bytes:
    rng = random.Random(f"mlir-{kind}-{seed}")
    data = text.encode()
    if kind == "bitflip":
        return _flip(data, rng)
    if kind == "truncate":
        return data[:rng.randrange(len(data))]
    if kind == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
    if kind == "text":
        return "".join(rng.choice("%^@{}()<>[]:=,.x0123456789 \nabcdfiprmt\"'#!-") for _ in range(rng.randrange(1, 400))).encode()
    lines = text.splitlines()
    if kind == "lines":
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        how = rng.choice(("delete", "duplicate", "swap"))
        if how == "delete":
            del lines[i]
        elif how == "duplicate":
            lines.insert(j, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines).encode()
    tokens = re.split(r"(\s+|[(),<>{}\[\]:=])", text)
    words = [i for i, t in enumerate(tokens) if t.strip() and not re.fullmatch(r"[(),<>{}\[\]:=]", t)]
    if kind == "tokens":
        for _ in range(rng.randint(1, 3)):
            i, j = rng.choice(words), rng.choice(words)
            tokens[i], tokens[j] = tokens[j], tokens[i]
    else:   # numbers
        nums = [i for i in words if re.fullmatch(r"-?\d+", tokens[i])] or words
        for _ in range(rng.randint(1, 3)):
            tokens[rng.choice(nums)] = str(rng.choice((0, -1, -7, 2 ** 31, 2 ** 63, 10 ** 30, 3)))
    return "".join(tokens).encode()


# ------------------------------------------------------------------------------------------------ the worker
def _error(message: str) -> tuple[str, str]:
    """An OpenPrimError: fine when it is one line."""
    return ("error" if message.strip() and "\n" not in message.strip() else "bad"), message


def run_command(call: str, argv: list[str]) -> tuple[str, str]:
    """openprim.cli.main / openprim.opt.main in this process: ok (0), error (nonzero, one line on stderr),
    bad (an exception, or not one line)."""
    if call == "cli":
        from openprim.cli import main
    else:
        from openprim.opt import main
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as e:   # argparse: its usage line and one error line, status 2
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            lines = err.getvalue().strip().splitlines()
            return ("error" if rc else "ok"), (lines[-1] if lines else f"SystemExit({e.code})")
    if rc == 0:
        return "ok", out.getvalue()[-200:]
    return _error(err.getvalue())


def _worker(items_path: str) -> None:
    with open(items_path) as f:
        items = json.load(f)
    start = int(os.environ.get("FUZZ_START", "0"))
    for i in range(start, len(items)):
        item = items[i]
        print(json.dumps({"start": i}), flush=True)
        try:
            if item["call"] == "onnx":
                outcome, detail = run_onnx(item["path"])
            else:
                outcome, detail = run_command(item["call"], item["argv"])
        except Exception as e:  # noqa: BLE001 - what the property forbids: record it
            from openprim.base.errors import OpenPrimError
            if isinstance(e, OpenPrimError):
                outcome, detail = _error(str(e))
            else:
                outcome, detail = "bad", "".join(traceback.format_exception(e))[-1500:]
        print(json.dumps({"done": i, "outcome": outcome, "detail": str(detail)[-1500:]}), flush=True)


def run_items(items: list[dict], directory: str, timeout: float = 120.0) -> list[dict]:
    """Each item's {"outcome": ok|error|bad|crash|hang, "detail"}, in order, run in worker processes."""
    path = os.path.join(directory, "items.json")
    with open(path, "w") as f:
        json.dump(items, f)
    results: list[dict | None] = [None] * len(items)
    start = 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(WORKER)),
                                                        os.environ.get("PYTHONPATH", "")])}
    while start < len(items):
        proc = subprocess.Popen([sys.executable, WORKER, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={**env, "FUZZ_START": str(start)}, text=True)
        current, deadline = None, time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                proc.kill()
                proc.wait()
                results[current if current is not None else start] = {"outcome": "hang",
                                                                      "detail": f"no answer in {timeout} s"}
                break
            line = proc.stdout.readline()
            if not line:
                rc = proc.wait()
                stderr = proc.stderr.read()[-1500:]
                if current is not None:
                    results[current] = {"outcome": "crash", "detail": f"worker exit status {rc}: {stderr}"}
                break
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:   # something the worker's native code printed
                continue
            if "start" in msg:
                current, deadline = msg["start"], time.monotonic() + timeout
            else:
                results[msg["done"]] = {"outcome": msg["outcome"], "detail": msg["detail"]}
                current = None
        proc.stdout.close()
        proc.stderr.close()
        done = [i for i, r in enumerate(results) if r is not None]
        start = (max(done) + 1) if done else len(items)
    return [{**item, **(r or {"outcome": "crash", "detail": "never ran"})} for item, r in zip(items, results)]


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(WORKER)), "python"))
    _worker(sys.argv[1])

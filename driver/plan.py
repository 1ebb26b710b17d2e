"""From a lowered module to a launch plan: what runs in which order on which buffers.

After prim-lower, a graph function is a list of `prim.constant`s, `prim.reshape`s (views, no
kernel), `prim.slice`s of one contiguous aligned run (views at an offset into their source: outline's
slice_view_offset) and calls of kernel declarations. `build_plan` turns it into the runtime's JSON-able plan and
a weights blob (a GPU plan's launches come from the target's backend: backends/gpu_common.py); each step
names its kernel and arguments, and for the profiler (runtime/profile.py) its op kind, layer location and,
where prim-select chose one, the solver, parameters, problem descriptor and FLOPs;
`assign_offsets` is the static memory plan: each intermediate gets a byte range of one arena, shared
with any value whose lifetime does not overlap (greedy first-fit, biggest first).

Weights as values (compile(weights="values")): the graph function's last arguments are its parameters
(`prim.param_names`). The plan lists them in "params" ({name, value}, beside "inputs"); their values have
storage "param", at aligned offsets of a params region of "params_bytes" that the executable holds and
`load_weights` replaces. A parameter stored permuted (passes/param_layouts.py) has a "perm": its value is
transpose(what the caller gives, perm), which load_weights applies on the host. Their initial data
(`params_blob`) is the artifact's params.bin. Such a plan has version PARAMS_VERSION; a plan without
parameters is exactly what it was before (version 3).

State (Graph.carry, `prim.state`: a KV cache): an input whose next value a result is. The plan lists it in
"state" ({name, value, next}) instead of "inputs", and that result not in "outputs"; its value has storage
"state" in a region of "state_bytes" that the executable holds between calls (zeros at first). Where the
step computing `next` may write into its input's buffer (`prim.in_place`: index_copy writing only its rows)
and the old state is read by no later step, `next` takes the state's buffer and the update is in place;
otherwise the runtime copies `next` into the state after a run ("copy": true). Version STATE_VERSION.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import __version__, dialect
from openprim.backends import aligned
from openprim.backends.registry import for_target
from openprim.base.errors import OpenPrimError
from openprim.base.target import Target
from openprim.dialect import body, contract, graph_functions, kernels_module
from openprim.passes.outline import slice_view_offset
from openprim.runtime.executor import value_nbytes
from openprim.base.dtypes import ITEMSIZE
from openprim.solvers.problem import parse_descriptor

PLAN_VERSION = 3  # 2: views name the value whose storage they share (`view_of`); 3: `batch_chunks`, views
#                   at an offset within their root (a slice's contiguous run)
PARAMS_VERSION = 4  # a plan with "params" (weights as values): storage "param", "params_bytes"
STATE_VERSION = 5  # a plan with "state" (carried between calls): storage "state", "state_bytes"


def assign_offsets(sizes: list[int], lifetimes: list[tuple[int, int]]) -> tuple[list[int], int]:
    """Offsets so that values alive at the same time never overlap; returns (offsets, arena bytes)."""
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    placed, offsets = [], [0] * len(sizes)
    for i in order:
        lo, hi = lifetimes[i]
        busy = sorted((offsets[j], offsets[j] + sizes[j]) for j in placed
                      if not (lifetimes[j][1] < lo or hi < lifetimes[j][0]))
        off = 0
        for b0, b1 in busy:
            if off + sizes[i] <= b0:
                break
            off = max(off, aligned(b1))
        offsets[i] = off
        placed.append(i)
    return offsets, max((offsets[i] + sizes[i] for i in range(len(sizes))), default=0)


def build_plan(module: ir.Module, target: Target) -> tuple[dict, bytes]:
    """The plan (JSON-able) and the weights blob of a module lowered for `target`."""
    fns = graph_functions(module.operation)
    if len(fns) != 1:
        raise OpenPrimError(f"expected exactly one graph function, found {len(fns)}")
    fn = fns[0]
    block = fn.regions[0].blocks[0]
    ids, values, steps = {}, [], []
    roots = []   # per value: the value whose storage it shares (itself, or a reshape's or view slice's source)
    starts = []  # per value: its first byte past its root's (a view slice's offset; 0 for the rest)

    def new_value(v, storage, root=None, offset=0):
        t = v.type
        ids[v] = len(values)
        values.append({"shape": list(t.shape), "dtype": dialect.dtype_name(t.element_type), "storage": storage})
        roots.append(ids[v] if root is None else roots[root])
        starts.append(offset + (0 if root is None else starts[root]))
        return ids[v]

    param_names = contract.param_names(fn)
    args = list(block.arguments)
    n_inputs = len(args) - len(param_names)
    names = contract.input_names(fn) or [f"arg{i}" for i in range(n_inputs)]
    carried = dict(contract.state(fn))   # input index -> result index
    inputs, state, state_off = [], [], 0
    for k, (n, a) in enumerate(zip(names, args[:n_inputs])):
        if k not in carried:
            inputs.append({"name": n, "value": new_value(a, "arena")})
            continue
        i = new_value(a, "state")
        values[i]["offset"] = state_off
        state_off = aligned(state_off + value_nbytes(values[i]))
        state.append({"name": n, "value": i, "result": carried[k]})
    params, params_off = [], 0
    for name, perm, a in zip(param_names, contract.param_perms(fn), args[n_inputs:]):
        i = new_value(a, "param")
        values[i]["offset"] = params_off
        params_off = aligned(params_off + value_nbytes(values[i]))
        params.append({"name": name, "value": i, **({"perm": perm} if perm else {})})
    weight_off = 0
    chunks = []  # the weights blob: each constant's bytes, padded to the next aligned offset
    for op in [o.operation for o in block.operations]:
        if op.name == "prim.constant":
            i = new_value(op.result, "weight")
            data = dialect.to_numpy(op.attributes["value"])
            values[i]["offset"] = weight_off
            end = aligned(weight_off + data.nbytes)
            chunks += [np.ascontiguousarray(data).tobytes(), bytes(end - weight_off - data.nbytes)]
            weight_off = end
        elif op.name == "prim.reshape":
            src = ids[op.operands[0]]
            new_value(op.result, values[src]["storage"], src)
        elif (offset := slice_view_offset(op)) is not None:     # a contiguous run of its source: a view
            src = ids[op.operands[0]]
            new_value(op.result, values[src]["storage"], src, offset * ITEMSIZE[values[src]["dtype"]])
        elif op.name == "func.call":
            args = [ids[a] for a in op.operands]
            out = new_value(op.result, "arena")
            kernel = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            steps.append({"kernel": kernel, "args": args + [out], **_layer(op, kernel)})
        elif op.name == "func.return":
            outputs = [ids[a] for a in op.operands]
        else:
            raise OpenPrimError(f"{dialect.where(op.location)}: error: '{op.name}' was not lowered to a kernel")
    for entry in state:
        entry["next"] = outputs[entry.pop("result")]
    in_place = _in_place_args(module)
    # a step may write into an argument's buffer only where the argument is that whole buffer (no slice view)
    whole = [starts[v] == 0 and value_nbytes(values[v]) == value_nbytes(values[roots[v]])
             for v in range(len(values))]
    _state_in_place(steps, values, roots, in_place, state, whole)
    _outputs_in_place(steps, values, roots, in_place, inputs, outputs, whole)
    # Lifetimes of arena roots, in step indices: inputs from -1, outputs to the end.
    n = len(steps)
    life = {}
    for i, s in enumerate(steps):
        for a in s["args"]:
            r = roots[a]
            lo, hi = life.get(r, (i, i))
            life[r] = (min(lo, i), max(hi, i))
    for spec in inputs:
        r = roots[spec["value"]]
        life[r] = (-1, life.get(r, (-1, -1))[1])
    for o in outputs:
        r = roots[o]
        life[r] = (life.get(r, (n, n))[0], n)
    arena_roots = [r for r in life if values[r]["storage"] == "arena"]
    sizes = [aligned(value_nbytes(values[r])) for r in arena_roots]
    offsets, arena = assign_offsets(sizes, [life[r] for r in arena_roots])
    where = dict(zip(arena_roots, offsets))
    for i, v in enumerate(values):
        if v["storage"] == "arena":
            v["offset"] = where.get(roots[i], 0) + starts[i]
        elif roots[i] != i:
            v["offset"] = values[roots[i]]["offset"] + starts[i]
        if roots[i] != i:
            v["view_of"] = roots[i]   # the runtime binds a caller's buffer to a value and all its views
    checks = contract.checks(fn)   # the last results: read by the runtime after a run, not returned
    if checks:
        plan_checks = [{"value": v, "message": m} for v, m in zip(outputs[len(outputs) - len(checks):], checks)]
        outputs = outputs[:len(outputs) - len(checks)]
    state_results = set(carried.values())
    outputs = [o for k, o in enumerate(outputs) if k not in state_results]
    plan = {"format": "openprim-plan", "version": PLAN_VERSION, "compiler": f"openprim {__version__}",
            "target": str(target), "values": values, "inputs": inputs, "outputs": outputs, "steps": steps,
            "arena_bytes": arena, "weights_bytes": weight_off,
            "naive_bytes": sum(sizes)}
    if checks:
        plan["checks"] = plan_checks
    if params:
        plan.update(version=PARAMS_VERSION, params=params, params_bytes=params_off)
    if state:
        plan.update(version=STATE_VERSION, state=state, state_bytes=state_off)
    if (chunks_of_batch := contract.batch_chunks(fn)) is not None:  # passes/batch_chunks.py: once per chunk
        plan["batch_chunks"] = chunks_of_batch
    km = kernels_module(module.operation)
    if not target.is_gpu and km is not None and (scratch := contract.scratch_bytes(km)) is not None:  # backends/cpu
        plan["scratch_bytes"] = scratch
    if target.is_gpu:
        plan["kernels"], tables = for_target(target).launches(module, weight_off)
        plan["scratch_bytes"] = max((k["scratch_bytes"] for k in plan["kernels"].values()), default=0)
        plan["weights_bytes"] += len(tables)
        chunks.append(tables)
    return plan, b"".join(chunks)


def params_blob(plan: dict, data: dict) -> bytes:
    """The params region's initial bytes (the artifact's params.bin): data {name: stored array} at each
    parameter's offset; b"" for a plan without parameters."""
    if "params" not in plan:
        return b""
    blob = np.zeros(plan["params_bytes"], np.uint8)
    for spec in plan["params"]:
        v = plan["values"][spec["value"]]
        if spec["name"] not in data:
            raise OpenPrimError(f"no initial value for parameter '{spec['name']}' (jit/write_artifact of a module "
                                f"with parameters take params=compiler.initial_params(graph, 'values'))")
        a = np.asarray(data[spec["name"]])
        a = np.ascontiguousarray(a.transpose(spec["perm"]) if "perm" in spec else a)
        if list(a.shape) != v["shape"] or a.dtype.itemsize != ITEMSIZE[v["dtype"]]:
            raise OpenPrimError(f"parameter '{spec['name']}': initial value {a.dtype}{list(a.shape)}, the plan "
                                f"has {v['dtype']}{v['shape']}")
        blob[v["offset"]:v["offset"] + a.nbytes] = np.frombuffer(a.tobytes(), np.uint8)
    return blob.tobytes()


def _layer(call: ir.Operation, kernel: str) -> dict:
    """What a step records for `openprim profile` (runtime/profile.py) beside its kernel and arguments: the op
    kind (a kernel is named `<kind>_<n>`: passes/outline.py), the layer's source location, and where
    prim-select chose a solver (its choice is on the call) the solver, its parameters, the problem descriptor
    and the problem's FLOPs (solvers/problem.py; once per batch chunk)."""
    info = {"op": kernel.rsplit("_", 1)[0]}
    if (loc := dialect.where(call.location)) != "<unknown>":
        info["loc"] = loc
    if (solver := contract.solver(call)) is None:
        return info
    info.update(solver=solver, params=contract.params(call))
    if (problem := contract.problem(call)) is not None:
        info["problem"] = problem
        try:
            info["flops"] = int(parse_descriptor(problem).flops)
        except OpenPrimError:   # a descriptor this compiler does not parse: no FLOPs, the step still runs
            pass
    return info


def _in_place_args(module: ir.Module) -> dict[str, tuple[int, ...]]:
    """{kernel: the arguments whose buffer its output may take} (the kernels' `prim.in_place`)."""
    km = kernels_module(module.operation)
    return {ir.StringAttr(f.attributes["sym_name"]).value: at
            for f in ([] if km is None else body(km).operations) if (at := contract.in_place(f))}


def _state_in_place(steps, values, roots, in_place: dict[str, tuple[int, ...]], state, whole: list[bool]) -> None:
    """Give each state's next value the state's buffer where the step computing it may write into its
    input's (`in_place` names the state there) and no later step reads the old state; mark the others
    "copy" (the runtime copies them in after a run)."""
    last = {}
    for i, s in enumerate(steps):
        for a in s["args"]:
            last[roots[a]] = i
    producer = {roots[s["args"][-1]]: i for i, s in enumerate(steps)}
    for entry in state:
        root, nxt = roots[entry["value"]], roots[entry["next"]]
        if nxt == root:      # carried unchanged
            continue
        i = producer.get(nxt)
        s = steps[i] if i is not None else None
        at = next((j for j in in_place.get(s["kernel"], ()) if roots[s["args"][j]] == root), None) if s else None
        if at is None or not whole[s["args"][at]] or last.get(root) != i or s["args"][-1] != nxt or \
                any(roots[a] == root for j, a in enumerate(s["args"][:-1]) if j != at):
            entry["copy"] = True
            continue
        for v, r in enumerate(roots):
            if r == nxt:
                roots[v] = root
                values[v]["storage"] = "state"


def _outputs_in_place(steps, values, roots, in_place: dict[str, tuple[int, ...]], inputs, outputs,
                      whole: list[bool]) -> None:
    """Give a step's output the buffer of its residual where the kernel allows it (`in_place`) and the
    residual dies there: no later step reads it, no other argument of the step shares its buffer, it is
    neither a graph input nor output, and it has the output's size. A residual convolution then reads and
    writes one buffer, as ONNX Runtime's Sum fusion does: where the output is larger than the caches (ResNet-50
    at batch 8: 25 MB), writing a separate buffer costs a read of each line before the write."""
    fixed = {roots[spec["value"]] for spec in inputs} | {roots[o] for o in outputs}
    last = {}
    for i, s in enumerate(steps):
        for a in s["args"]:
            last[roots[a]] = i
    for i, s in enumerate(steps):
        for at in in_place.get(s["kernel"], ()):
            res, out = roots[s["args"][at]], roots[s["args"][-1]]
            others = {roots[a] for j, a in enumerate(s["args"][:-1]) if j != at}
            if not whole[s["args"][at]] or last[res] != i or res in others or res in fixed or out in fixed or \
                    value_nbytes(values[res]) != value_nbytes(values[out]) or \
                    values[res]["storage"] != "arena" or out != s["args"][-1]:
                continue
            for v, r in enumerate(roots):
                if r == out:
                    roots[v] = res
            last[res] = last[out]
            break

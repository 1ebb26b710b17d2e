"""OpenPrim's passes: Python passes over `prim` (one per file, named like the file) mixed with upstream ones.

A pipeline string is `name{opt=value ...},name,...`, as with mlir-opt. Names in `PASSES` are ours;
any other name is handed to MLIR's own pass parser, so upstream passes mix in freely.
"""
from __future__ import annotations

import dataclasses
import re

from mlir import ir, passmanager

from openprim import dialect
from openprim.base.errors import OpenPrimError
from openprim.base.target import Target, parse_target

from . import (batch_chunks, cpu_vector_math, prim_decompose, prim_fuse, prim_gpu_map, prim_layout, prim_lower,
               prim_pipeline, prim_select, prim_tile)

PASSES = {m.NAME: m for m in (batch_chunks, prim_decompose, prim_fuse, prim_layout, prim_select, prim_tile,
                              prim_lower, prim_gpu_map, prim_pipeline, cpu_vector_math)}


def split_pipeline(text: str) -> list[tuple[str, str]]:
    """'a{x=1},b' -> [('a', 'x=1'), ('b', '')] (commas inside braces kept)."""
    out, depth, cur = [], 0, ""
    for ch in text.strip() + ",":
        if ch == "," and depth == 0:
            if cur.strip():
                nested = re.fullmatch(r"\s*([\w\-.]+\(.*\))\s*", cur, re.S)  # anchor(...): MLIR parses it
                m = re.fullmatch(r"\s*([\w\-.]+)\s*(?:\{(.*)\})?\s*", cur, re.S)
                if nested:
                    out.append((nested.group(1), ""))
                elif m:
                    out.append((m.group(1), m.group(2) or ""))
                else:
                    raise OpenPrimError(f"malformed pass pipeline element '{cur.strip()}'")
            cur = ""
            continue
        depth += ch in "{("
        depth -= ch in "})"
        if depth < 0:
            break
        cur += ch
    if depth != 0:
        raise OpenPrimError(f"malformed pass pipeline '{text}': unbalanced braces or parentheses")
    return out


# Options that are objects, not text (the driver supplies them: the tuner to prim-select, the timings
# dict to prim-tile through prim_pipeline.Options); a pipeline string cannot set them.
SERVICES = ("tuner", "timings")


def _value(kind: type, text: str):
    """An option's text as the type of its field's default: a boolean is 1, true or empty; a Target is
    parsed here, the one place a pass's target text becomes a Target."""
    if kind is bool:
        return text.lower() in ("1", "true", "")
    if kind is Target:
        return parse_target(text)
    return kind(text)


def parse_options(cls, text: str, services: dict | None = None):
    """'a=1 b=x' into the pass's option dataclass (types from the field defaults), plus the services
    (SERVICES) that the dataclass declares."""
    fields = {f.name.replace("_", "-"): f for f in dataclasses.fields(cls) if f.name not in SERVICES}
    values = {k: v for k, v in (services or {}).items() if k in {f.name for f in dataclasses.fields(cls)}}
    for item in text.split():
        key, _, val = item.partition("=")
        if key not in fields:
            raise OpenPrimError(f"unknown option '{key}' for pass '{cls.NAME}'; options: {', '.join(fields) or 'none'}")
        f = fields[key]
        values[f.name] = _value(type(f.default), val)
    return cls(**values)


def _add(pm: passmanager.PassManager, entries) -> None:
    """A pass's entries: upstream pipeline text, or (name, callable on the module operation)."""
    for entry in entries:
        if isinstance(entry, str):
            pm.add(entry)
        else:
            pm.add(lambda op, _p, fn=entry[1]: fn(op), entry[0])


def build(pipeline: str, print_ir_after_all: bool = False, tuner=None) -> passmanager.PassManager:
    """A PassManager for the pipeline, in the current context. tuner: prim-select's source of measured
    choices (openprim.tuning.tuner.Tuner; None: the heuristic only)."""
    pm = passmanager.PassManager("builtin.module")
    for name, opts in split_pipeline(pipeline):
        if name in PASSES:
            _add(pm, parse_options(PASSES[name].Options, opts, {"tuner": tuner}).entries())
        else:
            if name.startswith("builtin.module(") and name.endswith(")"):  # the top module itself, as in mlir-opt
                name = name[len("builtin.module("):-1]
            try:
                pm.add(f"{name}{{{opts}}}" if opts else name)
            except ValueError as e:
                raise OpenPrimError(f"unknown pass or bad options '{name}': {str(e).splitlines()[0]}") from None
    if print_ir_after_all:
        ir.Context.current.enable_multithreading(False)  # MLIR's IR printing requires it
        pm.enable_ir_printing(print_after_all=True, print_module_scope=True, large_elements_limit=16)
    return pm


def run(module: ir.Module, pipeline: str, print_ir_after_all: bool = False, tuner=None) -> ir.Module:
    """Verify the module (MLIR + prim shape rules), then run the pipeline on it in place."""
    with module.context:
        dialect.verify(module)
        _run(build(pipeline, print_ir_after_all, tuner), module)
    return module


def run_stages(module: ir.Module, pipeline: prim_pipeline.Options, stage) -> ir.Module:
    """prim-pipeline one stage at a time (the same passes in the same order), each inside the context
    manager stage(name): how the driver times the stages."""
    with module.context:
        dialect.verify(module)
        for name, options in pipeline.stages():
            pm = passmanager.PassManager("builtin.module")
            _add(pm, options.entries())
            with stage(name):
                _run(pm, module)
    return module


def _run(pm: passmanager.PassManager, module: ir.Module) -> None:
    try:
        pm.run(module.operation)
    except ir.MLIRError as e:
        raise OpenPrimError(dialect.format_mlir_error(e)) from None

"""What keeps the torch.export importer from importing a program, and the table of the ops it maps.

    from openprim.pyfrontend.torch import check
    reports = check.check_file("model.pt2")      # or a .py model file: the programs its build() imports
    for what, ep, import_error in check.load_programs("model.pt2"):
        report = check.check_program(ep, what)   # the unmapped aten ops: count, first node, source line
    print(check.coverage_table())               # docs/frontends.md's table of the torch importer

`openprim torch-check MODEL` (driver/cli.py) prints `report_lines` of each program. A program is checked as
the importer reads it (pyfrontend/torch/importer.py): decomposed to core ATen first (`_decompose`), every
node computed from constants only folded at import whatever its op (pyfrontend/torch/folding.py), every
other call_function node mapped by the importer's handler table (`importer.maps`). Where every op maps,
the import itself runs, and its first refusal (a float64 input, a dynamic shape, an argument a handler
does not take) is reported too.

A `.py` model file is loaded as the importers registry loads it (pyfrontend/importers/model_file.py: its
`build(**options)`), and the programs it passes to `import_exported` on the way are the ones checked.
Like the importer, this module builds no Graph of its own and imports neither the compiler nor MLIR.
"""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field

import openprim.pyfrontend.torch as _package
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.importers import model_file
from openprim.pyfrontend.torch import importer
from openprim.pyfrontend.torch.folding import const_tensors, foldable_nodes

torch = importer.torch

# What a mapped op does not take, or takes only in some form: the notes column of coverage_table().
_NOTES = {
    "_native_batch_norm_legit_no_training": "inference; 2-d, 3-d and 4-d inputs",
    "native_batch_norm": "inference (training=False); 2-d, 3-d and 4-d inputs",
    "batch_norm": "inference (training=False); 2-d, 3-d and 4-d inputs",
    "conv2d": "explicit padding (no 'same'/'valid')",
    "rms_norm": "kept whole by the decomposition (one row kernel)",
    "silu": "kept whole by the decomposition (a conv epilogue)",
    "hardswish": "kept whole by the decomposition (a conv epilogue)",
    "hardsigmoid": "kept whole by the decomposition (a conv epilogue)",
    "scaled_dot_product_attention": "kept whole by the decomposition: prim.attention for 4-d q, k, v of one "
                                    "shape, else matmul-softmax-matmul; float or constant boolean mask, is_causal, "
                                    "scale; no dropout, no broadcast batch dims (GQA)",
    "elu": "scale and input_scale 1 (no selu, celu)",
    "max_pool2d_with_indices": "the values only (reading the indices is an error)",
    "avg_pool2d": "no divisor_override",
    "avg_pool3d": "windows along depth only (kernel (k, 1, 1)): local_response_norm's decomposition",
    "adaptive_avg_pool2d": "output 1x1 (or the input's own size)",
    "_adaptive_avg_pool2d": "output 1x1 (or the input's own size)",
    "mean": "any dims, keepdim", "sum": "any dims, keepdim",
    "addmm": "beta = alpha = 1",
    "matmul": "operands of rank >= 2",
    "split_with_sizes": "any sizes, any dim; an empty part only as a cat operand",
    "split": "any sizes, any dim; an empty part only as a cat operand",
    "expand": "a broadcast",
    "div": "no rounding_mode",
    "dropout": "inference (the identity)", "native_dropout": "inference (the identity)",
    "constant_pad_nd": "negative pads crop (a slice)",
    "as_strided": "a reshape (the whole tensor in row-major order)",
    "as_strided_scatter": "a view of the whole base in row-major order (a reshape of src)",
    "copy": "functional copy_: src broadcast to dst's shape",
    "upsample_nearest2d": ".vec (output size or scale factors) and .default; torch's index rule",
    "upsample_bilinear2d": ".vec and .default, align_corners or not; torch's source coordinates (no antialias)",
    "convolution": "1-d and 2-d (3-d, 4-d input); explicit padding; transposed as the input gradient",
    "group_norm": "any rank >= 3 (as [N, C, prod(spatial), 1])", "native_group_norm": "any rank >= 3",
    "slice": "static bounds, step >= 1; an empty one only as a cat operand",
    "index_put": "constant index tensors, any number, accumulate or not (F.fold's col2im); one 1-d index "
                 "tensor known at run time, accumulate=False (index_copy's decomposition: a KV cache update)",
}


def coverage_table() -> str:
    """The aten ops the torch importer maps (importer.SUPPORTED_OPS, any overload) with notes, as the
    markdown table in docs/frontends.md."""
    ops = sorted(importer.SUPPORTED_OPS, key=lambda op: (op.lstrip("_").lower(), op))
    rows = [f"| {op} | {_NOTES.get(op, '')} |" for op in ops]
    return "\n".join(["| aten op | notes |", "|---|---|", *rows])


# ----------------------------------------------------------------------------- one program
@dataclass
class Report:
    what: str                               # the program: a file, or "file (program 2 of 3)"
    nodes: int                              # call_function nodes of the decomposed program
    folded: int                             # of which computed from constants only (folded at import)
    inputs: list[str]                       # the user inputs: "x float32[1,3,224,224]"
    unmapped: dict[str, list] = field(default_factory=dict)    # fx target -> its nodes, in graph order
    refusal: str | None = None              # every op maps but the import refuses: its error

    @property
    def ok(self) -> bool:
        return not (self.unmapped or self.refusal)


def check_program(ep, what: str = "program", import_error: str | None = None, run_import: bool = True) -> Report:
    """The nodes of the ExportedProgram `ep` that the importer cannot map, by target. Where there is none,
    the import's refusal: `import_error` where the caller ran the import already (None: it imported), else
    the import is run here (unless run_import is False)."""
    program = importer._decompose(ep)
    graph = program.graph_module.graph
    foldable = foldable_nodes(graph, const_tensors(program).__contains__)
    calls = [n for n in graph.nodes if n.op == "call_function"]
    unmapped: dict[str, list] = {}
    for n in calls:
        if n not in foldable and not importer.maps(n.target):
            unmapped.setdefault(str(n.target), []).append(n)
    report = Report(what, len(calls), sum(n in foldable for n in calls), _inputs(program), unmapped)
    if not unmapped:
        if import_error is None and run_import:
            try:
                importer.import_exported(ep)
            except OpenPrimError as e:
                import_error = str(e)
        report.refusal = import_error
    return report


def _inputs(ep) -> list[str]:
    users = set(ep.graph_signature.user_inputs)
    out = []
    for n in ep.graph_module.graph.nodes:
        if n.op == "placeholder" and n.target in users:
            val = n.meta.get("val")
            if isinstance(val, torch.Tensor):
                dims = ",".join(str(d) for d in val.shape)
                out.append(f"{n.target} {str(val.dtype).removeprefix('torch.')}[{dims}]")
            else:
                out.append(f"{n.target} {type(val).__name__}")
    return out


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def where(node) -> str:
    """Where a node comes from, as far as the program recorded it: its module's path in the model and the
    innermost line of Python that made it (`module 'encoder.layer.0.attention',
    transformers/models/bert/modeling_bert.py:123 in forward`; a file under the working directory relative
    to it)."""
    parts = []
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path = list(stack.values())[-1][0]
        if path:
            parts.append(f"module '{path}'")
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if frames:
        file, line, fn = frames[-1]
        if "site-packages" + os.sep in file:           # a library's file: from its package on
            file = file.rsplit("site-packages" + os.sep, 1)[1]
        elif os.path.isabs(file):                       # under the working directory: relative to it
            rel = os.path.relpath(file)
            file = os.path.basename(file) if rel.startswith("..") else rel
        parts.append(f"{file}:{line} in {fn}")
    return ", ".join(parts)


def report_lines(report: Report) -> list[str]:
    """What `openprim torch-check` prints for one program (stdout)."""
    inputs = f"inputs: {', '.join(report.inputs) or 'none'}"
    if report.ok:
        return [f"{report.what}: all {report.nodes} op nodes map ({report.folded} computed from constants, "
                f"folded at import; {inputs})"]
    about = f"{report.nodes} op nodes, {report.folded} computed from constants (folded at import); {inputs}"
    lines = [f"{report.what}: {about}"]
    if report.refusal:
        lines.append(f"not importable: {report.refusal}")
    if report.unmapped:
        n = sum(map(len, report.unmapped.values()))
        lines.append(f"{n} of {report.nodes} op nodes are not mapped ({len(report.unmapped)} aten "
                     f"op{'s' if len(report.unmapped) != 1 else ''}):")
        width = max(map(len, report.unmapped))
        count_width = max(len(str(len(v))) for v in report.unmapped.values())
        for op, nodes in sorted(report.unmapped.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            at = where(nodes[0])
            lines.append(f"  {op:<{width}}  x{len(nodes):<{count_width}}  first: '{nodes[0].name}'"
                         + (f" ({at})" if at else ""))
    return lines


# ----------------------------------------------------------------------------- files
def load_programs(path, /, **options) -> list[tuple[str, object, str | None]]:
    """The torch.export programs of a model file: [(what, ExportedProgram, the import's error or None)].
    A `.pt2` file (torch.export.save) is one program, not yet imported (error None). A `.py` model file is
    loaded as the importers registry loads it (build(**options)), and every program that it imports with
    `import_exported` is returned with that import's error. Anything else is one OpenPrimError."""
    path = os.fspath(path)
    if "\0" in path or not os.path.exists(path):
        raise OpenPrimError(f"{path!r}: no such file")
    if os.path.isdir(path):
        raise OpenPrimError(f"{path}: is a directory; expected a .pt2 program (torch.export.save) or a .py "
                            "model file")
    suffix = os.path.splitext(path)[1]
    if suffix == ".pt2":
        if options:
            raise OpenPrimError(f"{path}: a program saved with torch.export.save takes no option "
                                f"{', '.join(sorted(options))}")
        return [(path, read_pt2(path), None)]
    if suffix == ".py":
        return _model_file_programs(path, options)
    raise OpenPrimError(f"{path}: torch-check reads a .pt2 program (torch.export.save) or a .py model file whose "
                        "build() imports a torch.export program; for an ONNX model: openprim onnx-check")


def read_pt2(path):
    """The ExportedProgram of a .pt2 file, or one OpenPrimError (as importer.import_file reads it)."""
    log = logging.getLogger("torch.export")   # it logs a traceback before trying the older format
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        return torch.export.load(path)
    except Exception as e:  # noqa: BLE001 - any reader failure (zip, pickle, schema version) is one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise OpenPrimError(f"{path}: cannot read as a torch.export program: {type(e).__name__}: {first}") from None
    finally:
        log.setLevel(level)


def _model_file_programs(path, options):
    """The programs a .py model file's build() passes to import_exported (the package's and the importer
    module's name for it are watched while it runs), each with its import's error."""
    found = []
    real = importer.import_exported

    def watched(ep, *args, **kwargs):
        found.append([ep, None])
        try:
            return real(ep, *args, **kwargs)
        except OpenPrimError as e:
            found[-1][1] = str(e)
            raise

    saved = (_package.import_exported, importer.import_exported)
    _package.import_exported = importer.import_exported = watched
    failed = None
    try:
        model_file.load(path, **options)
    except OpenPrimError as e:
        failed = str(e)
    finally:
        _package.import_exported, importer.import_exported = saved
    if not found:
        raise OpenPrimError(failed or f"{path}: build() imports no torch.export program (it calls neither "
                                      "openprim.pyfrontend.torch.import_exported nor import_file); nothing to check")
    programs = [(path if len(found) == 1 else f"{path} (program {i + 1} of {len(found)})", ep, error)
                for i, (ep, error) in enumerate(found)]
    if failed and not any(error for _, _, error in programs):   # build() failed after its imports
        what, ep, _ = programs[-1]
        programs[-1] = (what, ep, failed)
    return programs


def check_file(path, /, **options) -> list[Report]:
    """check_program of every program of a model file (load_programs). A .pt2 program is imported here
    where every op maps; the programs of a .py file were imported by its build()."""
    pt2 = os.fspath(path).endswith(".pt2")
    return [check_program(ep, what, error, run_import=pt2) for what, ep, error in load_programs(path, **options)]

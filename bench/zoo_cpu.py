"""Benchmark: model-zoo networks as ONNX files on the CPU: OpenPrim vs ONNX Runtime vs PyTorch eager.

    python bench/zoo_cpu.py [--models squeezenet1_1,densenet121] [--batches 1,8] [--rounds 5] [--quick]

The models are examples/zoo_models.py's (ResNet-18, ResNet-50, MobileNetV2, SqueezeNet 1.1, ShuffleNetV2 x1.0,
DenseNet-121, GoogLeNet with the paper's LRN, torchvision's GoogLeNet without it, a BERT-base encoder layer at
sequence length 128),
with torchvision's structure and seeded random weights. For each model and batch, fp32:

  1. export to ONNX with PyTorch's TorchScript exporter (opset 11 for the vision models, 20 for BERT)
     into a temporary directory;
  2. coverage, as an `onnx-check` would: the op types in the file, and every node the importer cannot
     map (found by importing with stand-in inputs for the failed nodes' outputs, shapes from ONNX shape
     inference), plus the importer's own error. A model that does not import is a row with its error;
  3. compile (`openprim.compiler.save` into an .oprim artifact with `CompileTimings`): seconds per
     stage (import = the ONNX importer alone, not the export), distinct kernels against launch steps;
  4. run the artifact (openprim.runtime.load: the same code as the JIT), ONNX Runtime (CPU provider,
     intra_op_num_threads = every core, all graph optimizations: bench/timing.ort_session) and PyTorch eager
     (inference_mode, every core: bench/timing.torch_cpu_threads) on the same input, timed in interleaved rounds in this process: each round
     runs each in turn (rotating who goes first), after a 0.3 s sleep and one warm-up call, and takes
     the median of its runs; the result is the median over rounds. Outputs are checked against PyTorch:
     max |out - torch| / max |torch|.

Writes a markdown report to stdout and to bench/zoo_cpu.md (rewritten after every row, so an interrupted
run keeps what it measured): date, machine, versions, the command, and the tables.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import zoo_models  # noqa: E402
from timing import cpu_cores, median_time, ort_session, torch_cpu_threads  # noqa: E402

from openprim import compiler  # noqa: E402
from openprim.base.errors import OpenPrimError  # noqa: E402
from openprim.pyfrontend.onnx import import_model  # noqa: E402
from openprim.runtime import load  # noqa: E402
from openprim.timings import CompileTimings  # noqa: E402

REPORT = os.path.join(HERE, "zoo_cpu.md")
EXTRA_COVERAGE = (("bert_layer", 11), ("bert_layer", 17))  # why bert_layer is exported at opset 20
STAGES = ("import", "emit", "prim-fuse", "prim-select", "prim-tile", "prim-lower", "plan", "llc", "link")


def one_line(e: BaseException, limit: int = 400) -> str:
    s = " ".join(str(e).split())
    return f"{type(e).__name__}: {s}"[:limit] if not isinstance(e, OpenPrimError) else s[:limit]


# ----------------------------------------------------------------------------- coverage
def coverage(path: str) -> dict[str, tuple[int, str]]:
    """Every node of the ONNX file the importer cannot map: {op_type: (count, first message)}. The
    importer runs to the end with a graph input standing in for each output of a failed node; its shape
    is found by running the node alone (onnx's reference evaluator) on zeros of its inputs' shapes."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    from openprim.pyfrontend.onnx import importer as imp

    model = imp._upgrade(onnx.load(path))
    missing: dict[str, tuple[int, str]] = {}

    class Tolerant(imp._Importer):
        def out_shapes(self, node):
            feeds = {i: (self.consts[i] if i in self.consts else np.zeros(self.tensors[i].shape, np.float32))
                     for i in node.input if i}
            vis = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                   for i, v in feeds.items()]
            outs = [o for o in node.output if o]
            m = helper.make_model(helper.make_graph([node], "probe", vis, [helper.make_empty_tensor_value_info(o)
                                                                           for o in outs]),
                                  opset_imports=[helper.make_opsetid("", self.opset)])
            return dict(zip(outs, (np.shape(r) for r in ReferenceEvaluator(m).run(None, feeds))))

        def convert(self, node):
            try:
                return super().convert(node)
            except OpenPrimError as e:
                n, first = missing.get(node.op_type, (0, str(e)))
                missing[node.op_type] = (n + 1, first)
                try:
                    shapes = self.out_shapes(node)
                except Exception as e2:  # noqa: BLE001
                    raise OpenPrimError(f"{e} (its output shapes are unknown: {one_line(e2, 120)}; stopped here)")
                for o, shape in shapes.items():
                    if o not in self.tensors and o not in self.consts:
                        stub = "stub_" + "".join(c if c.isalnum() else "_" for c in o)
                        self.tensors[o] = self.g.input(stub, tuple(shape))

    Tolerant(model, None).run()
    return missing


def onnx_check(path: str) -> str:
    """What `openprim onnx-check` lists (importer.unsupported_nodes: op types without a mapping), as text."""
    try:
        from openprim.pyfrontend.onnx.importer import unsupported_nodes
    except ImportError:
        return "?"
    try:
        found = unsupported_nodes(path)
    except Exception as e:  # noqa: BLE001
        return one_line(e, 200)
    return ", ".join(f"{k} ({len(v)})" for k, v in found.items()) or "none"


def onnx_ops(path: str) -> Counter:
    import onnx
    return Counter(n.op_type for n in onnx.load(path, load_external_data=False).graph.node)


# ----------------------------------------------------------------------------- timing
def interleaved(fns: dict, rounds: int, budget: float) -> dict[str, list[float]]:
    """Seconds per call of each fn in each of `rounds` interleaved rounds: the median of `repeat` runs
    (repeat chosen so a round of one fn takes about `budget` seconds, 3 to 20 runs)."""
    repeat = {}
    for k, fn in fns.items():
        t0 = time.perf_counter()
        fn()
        repeat[k] = int(min(20, max(3, budget / max(time.perf_counter() - t0, 1e-6))))
    names = list(fns)
    times = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            times[k].append(median_time(fns[k], repeat[k], warmup=1))
    return times


def rel_err(y, ref) -> float:
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    if y.shape != ref.shape:
        return float("nan")
    return float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30))


# ----------------------------------------------------------------------------- one row
def bench(name, module, batch, tmp, rounds, budget):
    row = {"model": name, "batch": batch, "opset": zoo_models.opset_of(name)}
    x = zoo_models.example_input(name, batch)
    xn = x.numpy()
    path = os.path.join(tmp, f"{name}_b{batch}.onnx")
    t0 = time.perf_counter()
    zoo_models.to_onnx(name, batch, path, module=module)
    row["export_s"] = time.perf_counter() - t0
    row["ops"] = onnx_ops(path)
    try:
        row["missing"] = coverage(path)
    except Exception as e:  # noqa: BLE001 - the check itself stopped: keep its error
        row["missing"], row["coverage_error"] = None, one_line(e)
    row["onnx_check"] = onnx_check(path)

    fns, outs = {}, {}
    timings = CompileTimings()
    try:
        with timings.stage("import"):
            g = import_model(path)
        row["import"] = "yes"
    except Exception as e:  # noqa: BLE001
        row["import"], row["error"] = "no", one_line(e)
        g = None
    if g is not None:
        try:
            art = os.path.join(tmp, f"{name}_b{batch}.oprim")
            compiler.save(g, art, timings=timings)
            row["stages"] = dict(timings.stages)
            row["compile_s"] = sum(timings.stages.values())
            row["kernels"], row["steps"] = timings.kernel_count, timings.step_count
            row["slowest_kernels"] = sorted(timings.kernels.items(), key=lambda kv: -kv[1])[:3]
            exe = load(art)
            row["chunks"] = exe.plan.get("batch_chunks", 1)
            fns["ours"] = lambda: exe(xn)
        except Exception as e:  # noqa: BLE001
            row["error"] = "compile: " + one_line(e)
            row["stages"] = dict(timings.stages)
            traceback.print_exc(file=sys.stderr)

    sess = ort_session(path)
    in_name = sess.get_inputs()[0].name
    fns["ort"] = lambda: sess.run(None, {in_name: xn})[0]

    def eager():
        with torch.inference_mode():
            return module(x)
    fns["torch"] = eager

    ref = eager().numpy()
    for k in ("ours", "ort"):
        if k in fns:
            try:
                outs[k] = rel_err(fns[k](), ref)
            except Exception as e:  # noqa: BLE001
                row["error"] = f"run ({k}): " + one_line(e)
                fns.pop(k)
    row["err"], row["ort_err"] = outs.get("ours"), outs.get("ort")
    for k, v in interleaved(fns, rounds, budget).items():
        row[k + "_ms"] = 1e3 * float(np.median(v))
        row[k + "_range"] = (1e3 * min(v), 1e3 * max(v))
    if "ours" in fns:  # where OpenPrim's time goes: seconds per kind of kernel (median of 3 runs per step)
        by_kind = Counter()
        for t, step in zip(exe.time_steps(3), exe.plan["steps"]):
            by_kind[step["kernel"].rsplit("_", 1)[0]] += t
        row["by_kind"] = by_kind
    row["load"] = " ".join(open("/proc/loadavg").read().split()[:3])
    return row


# ----------------------------------------------------------------------------- report
def f(v, fmt):
    return "—" if v is None else format(v, fmt)


def ratio(a, b):
    return "—" if a is None or b is None else f"{a / b:.2f}x"


def stage_text(st):
    top = sorted(st.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{k} {v:.1f}" for k, v in top)


def extra_coverage(tmp, models):
    """Coverage of bert_layer exported at lower opsets: [(model, opset, ops, unmapped)]."""
    out = []
    for name, opset in EXTRA_COVERAGE:
        if name not in models:
            continue
        path = os.path.join(tmp, f"{name}_opset{opset}.onnx")
        try:
            zoo_models.to_onnx(name, 1, path, opset)
            ops = ", ".join(f"{k} {v}" for k, v in onnx_ops(path).most_common())
            miss = coverage(path)
            out.append((name, opset, ops, onnx_check(path),
                        ", ".join(f"{k} ({n})" for k, (n, _) in miss.items()) or "none"))
        except Exception as e:  # noqa: BLE001
            out.append((name, opset, "?", "?", one_line(e)))
    return out


def report(rows, args, meta, skipped, extra_cov=()):
    L = ["# Model-zoo networks on the CPU: OpenPrim vs ONNX Runtime vs PyTorch eager", "",
         f"- date: {meta['date']}",
         f"- machine: {meta['cpu']}, {meta['cores']} cores (the process's affinity), {meta['platform']}; "
         f"load average {meta['load0']} at the start, {meta.get('load1', '?')} at the end (the machine is shared)",
         f"- versions: openprim {meta['openprim']} (git {meta['git']}), torch {torch.__version__}, "
         f"onnxruntime {meta['ort']}, onnx {meta['onnx']}, numpy {np.__version__}, Python {platform.python_version()}",
         f"- command: `{meta['command']}`",
         f"- threads: OpenPrim OpenMP default (all cores), ONNX Runtime intra_op_num_threads={meta['cores']}, "
         f"torch.set_num_threads({meta['cores']})",
         f"- timing: {args.rounds} interleaved rounds (rotating order), each the median of 3-20 runs after a 0.3 s "
         "sleep and one warm-up call; the table gives the median over rounds. fp32, NCHW inputs.",
         "- models: examples/zoo_models.py (torchvision's structure and names, seeded random weights; ResNet-18/50 "
         "and MobileNetV2 from examples/torch_models.py), exported "
         "with the TorchScript exporter (dynamo=False); vision models at opset 11 (converted to 13 by the "
         "importer), bert_layer at opset 20 (one LayerNormalization and one Gelu node). googlenet has the "
         "paper's two LRNs (ONNX LRN nodes); googlenet_nolrn is torchvision's variant without them.",
         "", "## Results", "",
         "| model | batch | import ok? | compile s (slowest stages, s) | kernels / steps | batch chunks | ours ms | "
         "ORT ms | torch ms | ORT/ours | torch/ours | max rel err (ours; ORT) |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        comp = (f"{r['compile_s']:.1f} ({stage_text(r['stages'])})" if "compile_s" in r
                else ("failed" if r["import"] == "yes" else "—"))
        ks = f"{r['kernels']} / {r['steps']}" if "kernels" in r else "—"
        ok = r["import"]
        err = (f"{f(r.get('err'), '.1e')}; {f(r.get('ort_err'), '.1e')}")
        L.append(f"| {r['model']} | {r['batch']} | {ok} | {comp} | {ks} | {r.get('chunks', '—')} | "
                 f"{f(r.get('ours_ms'), '.2f')} | "
                 f"{f(r.get('ort_ms'), '.2f')} | {f(r.get('torch_ms'), '.2f')} | "
                 f"{ratio(r.get('ort_ms'), r.get('ours_ms'))} | {ratio(r.get('torch_ms'), r.get('ours_ms'))} | {err} |")
    L += ["", "ORT/ours and torch/ours above 1: OpenPrim is faster. Errors are max |y - y_torch| / max |y_torch|. "
          "*batch chunks*: how many times the plan runs, on that many parts of the batch (passes/batch_chunks.py). "
          "On a loaded machine every runner slows down (the absolute times move with the load average); the "
          "three run in the same process in interleaved rounds, so the ratios compare like with like.", ""]

    errs = [r for r in rows if "error" in r]
    if errs:
        L += ["## Errors", ""]
        for r in errs:
            L.append(f"- {r['model']} batch {r['batch']}: `{r['error']}`")
        L.append("")

    L += ["## Import coverage (unmapped ONNX ops)", "",
          "Every node the importer could not map, found by importing on with stand-ins for the failed nodes' "
          "outputs (one row per model: the ops do not depend on the batch). bert_layer is also checked as "
          "exported at opsets 11 and 17 (why it is run at 20).", "",
          "*onnx-check* is what `openprim onnx-check` lists (op types the importer has no mapping for); "
          "*import failures* also counts nodes of mapped ops that the importer rejected.", "",
          "| model | opset | ONNX ops in the file | onnx-check | import failures (nodes) | first message |",
          "|---|---|---|---|---|---|"]
    seen = set()
    for r in rows:
        if r["model"] in seen:
            continue
        seen.add(r["model"])
        ops = ", ".join(f"{k} {v}" for k, v in r["ops"].most_common())
        if r["missing"] is None:
            miss, msg = "?", f"coverage check stopped: {r['coverage_error']}"
        elif not r["missing"]:
            miss, msg = "none", ""
        else:
            miss = ", ".join(f"{k} ({n})" for k, (n, _) in r["missing"].items())
            msg = "; ".join(m for _, m in r["missing"].values())
        L.append(f"| {r['model']} | {r['opset']} | {ops} | {r.get('onnx_check', '?')} | {miss} | {msg} |")
    for name, opset, ops, check, miss in extra_cov:
        L.append(f"| {name} (coverage only) | {opset} | {ops} | {check} | {miss} | |")
    L.append("")

    L += ["## Timing detail", "",
          "Spread of the per-round medians (min-max, ms), the load average after the row, and where OpenPrim's "
          "time goes (share of the summed per-step medians, by kind of kernel).", "",
          "| model | batch | ours | ORT | torch | load avg | OpenPrim time by kernel kind |",
          "|---|---|---|---|---|---|---|"]
    for r in rows:
        rng = [("—" if r.get(k + "_range") is None else "%.1f-%.1f" % r[k + "_range"])
               for k in ("ours", "ort", "torch")]
        bk = r.get("by_kind")
        kinds = "—" if not bk else ", ".join(f"{k} {100 * v / sum(bk.values()):.0f}%" for k, v in bk.most_common(4))
        L.append(f"| {r['model']} | {r['batch']} | " + " | ".join(rng) + f" | {r.get('load', '?')} | {kinds} |")
    L.append("")

    comp = [r for r in rows if r.get("stages")]
    if comp:
        L += ["## Compile time per stage (s)", "",
              "import is the ONNX importer on the exported file (the export itself is the *export* column, not "
              "part of the compile); llc runs in one process per core.", "",
              "| model | batch | export | " + " | ".join(STAGES) + " | total | slowest kernels to build (prim-tile) |",
              "|---|---|---|" + "---|" * (len(STAGES) + 2)]
        for r in comp:
            st = r["stages"]
            sk = ", ".join(f"{k} {v:.2f}" for k, v in r.get("slowest_kernels", []))
            L.append(f"| {r['model']} | {r['batch']} | {r['export_s']:.1f} | "
                     + " | ".join(f"{st[s]:.2f}" if s in st else "—" for s in STAGES)
                     + f" | {sum(st.values()):.1f} | {sk} |")
        L.append("")
    if skipped:
        L += ["## Skipped", ""] + [f"- {s}" for s in skipped] + [""]
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(zoo_models.MODELS + zoo_models.EXTRA_MODELS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (median kept)")
    ap.add_argument("--quick", action="store_true", help="3 rounds of about 0.3 s per runner")
    ap.add_argument("--output", default=REPORT, help="the markdown report ('' for stdout only)")
    args = ap.parse_args()
    budget = 0.6
    if args.quick:
        args.rounds, budget = min(args.rounds, 3), 0.3
    import onnx
    import onnxruntime
    import openprim
    cores = torch_cpu_threads(cpu_cores())
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    try:
        git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip() or "?"
        dirty = [ln[3:] for ln in subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "-uno"],
                                                 capture_output=True, text=True).stdout.splitlines()]
        if dirty:  # others' uncommitted work is part of what ran
            git += f" + uncommitted changes to {len(dirty)} files: " + ", ".join(dirty[:12])
    except OSError:
        git = "?"
    meta = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"), "cpu": cpu, "cores": cores,
            "platform": f"{platform.system()} {platform.machine()}",
            "load0": " ".join(open("/proc/loadavg").read().split()[:3]),
            "openprim": openprim.__version__, "git": git, "ort": onnxruntime.__version__, "onnx": onnx.__version__,
            "command": "python bench/zoo_cpu.py" + "".join(" " + a for a in sys.argv[1:])}
    rows, skipped = [], []
    t_start = time.perf_counter()
    extra_cov = []
    with tempfile.TemporaryDirectory() as tmp:
        extra_cov = extra_coverage(tmp, args.models.split(","))
        for name in args.models.split(","):
            module = zoo_models.get(name)
            for batch in (int(b) for b in args.batches.split(",")):
                t0 = time.perf_counter()
                print(f"{name} batch {batch}: ...", file=sys.stderr, flush=True)
                try:
                    rows.append(bench(name, module, batch, tmp, args.rounds, budget))
                except Exception as e:  # noqa: BLE001 - a whole row that could not be measured
                    traceback.print_exc(file=sys.stderr)
                    skipped.append(f"{name} batch {batch}: {one_line(e)}")
                r = rows[-1] if rows else {}
                print(f"{name} batch {batch}: {time.perf_counter() - t0:.0f} s "
                      f"(ours {r.get('ours_ms')}, ort {r.get('ort_ms')}, torch {r.get('torch_ms')}, "
                      f"error {r.get('error', '-')})", file=sys.stderr, flush=True)
                if args.output:
                    meta["load1"] = " ".join(open("/proc/loadavg").read().split()[:3])
                    with open(args.output, "w") as fh:
                        fh.write(report(rows, args, meta, skipped, extra_cov) + "\n")
    meta["load1"] = " ".join(open("/proc/loadavg").read().split()[:3])
    text = report(rows, args, meta, skipped, extra_cov) + f"\nWhole run: {time.perf_counter() - t_start:.0f} s.\n"
    print(text)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()

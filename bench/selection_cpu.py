"""Benchmark: algorithm selection on the CPU. Find's choice vs the heuristic's vs PyTorch CPU, per layer.

    python bench/selection_cpu.py                      # both networks, every distinct layer (~15 min on 2 cores)
    python bench/selection_cpu.py --quick              # 3 layers per network, small budgets (~3 min)
    python bench/selection_cpu.py --append bench/RESULTS.md

For the distinct conv2d/matmul layers of ResNet-18 and MobileNetV2 (batch 1, 224x224, fp32, as `openprim tune`
sees them: NHWC after the layout stage, epilogue fused), this runs the project's own find
(`openprim.tuning.find.search`, exactly what `openprim tune` runs per layer, then `find.store`) with a user
database in a temporary directory (OPENPRIM_USER_DB_PATH), and reports per layer:

  * the heuristic's solver and find's solver + parameters, with find's own measured speedup;
  * both configurations re-timed here, interleaved, in this process (median of `--repeat` runs of the
    kernel steps, 3 rounds, median of the rounds), so the speedup is not the min-of-many-noisy-samples of
    the search;
  * PyTorch CPU: torch.nn.functional.conv2d (with bias, groups; the fused ReLU/clamp/residual is *not*
    applied) on an NCHW float32 input of the same shape, every core (bench/timing.torch_cpu_threads), 0.3 s sleep before each
    timing (OpenMP spin, see timing.py). matmul layers: torch.nn.functional.linear.

It also reports the wall clock of tuning each whole network (every distinct layer, conv and matmul, when
--layers is not given) and compares, on a few layers with large spaces, exhaustive search (every
configuration of find.space) with find's random+greedy search at small budgets.
"""
from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))

# the user database must point into a temp directory before anything reads it
_TMP = tempfile.TemporaryDirectory(prefix="openprim-selection-")
os.environ["OPENPRIM_USER_DB_PATH"] = os.path.join(_TMP.name, "tuning.sqlite")

import warnings  # noqa: E402

from timing import cpu_cores, median_time, torch_cpu_threads  # noqa: E402

from openprim import find_worker, tuning_commands  # noqa: E402
from openprim.tuning import db as tuning_db  # noqa: E402
from openprim.tuning import find  # noqa: E402
from openprim.base.target import parse_target  # noqa: E402
from openprim.solvers.problem import problem_of  # noqa: E402

TARGET = parse_target("cpu")
# default strategy layers: large spaces (3x3 with 5 solvers / 1x1 with 4 solvers)
STRATEGY_LAYERS = ["conv2d-1x128x28x28-k128-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-KRSC-f32-bias+relu",
                   "conv2d-1x24x56x56-k144-1x1-s1x1-p0x0x0x0-d1x1-g1-NHWC-KRSC-f32-bias+clamp"]


def networks(names):
    import mobilenetv2
    import resnet
    table = {"resnet18": lambda: resnet.build(depth=18, batch=1, size=224),
             "mobilenetv2": lambda: mobilenetv2.build(batch=1, size=224)}
    return [(n, table[n]()) for n in names]


def params_str(params):
    return tuning_db.params_key(params).replace('"', "") if params else "{}"


def short(key):
    """A readable layer name from the descriptor."""
    if key.startswith("gemm"):
        return key.replace("-nn-f32", "")
    p = key.split("-")
    c, h = p[1].split("x")[1], p[1].split("x")[2]
    g = p[7][1:]
    kind = "dw " if g != "1" else ""
    return f"{kind}{c}x{h}²→{p[2][1:]} {p[3]}/s{p[4][1:].split('x')[0]} {p[-1]}"


def compiled(op, solver, params):
    exe = find_worker.compile_candidate(find.candidate_module(op, solver, params), TARGET)
    exe(*find_worker.inputs_of(exe))
    return exe.run_steps


ROUNDS = 5


def interleaved(fns, repeat, rounds=None):
    """Seconds per call of each fn, timed interleaved: the least over `rounds` rounds of median_time (0.3 s
    sleep each). Least, not median: other jobs share the 2 cores, and a round they hit is not the kernel's speed."""
    times = [[] for _ in fns]
    for _ in range(rounds or ROUNDS):
        for i, fn in enumerate(fns):
            times[i].append(median_time(fn, repeat))
    return [min(t) for t in times]


def timed_config(op, configs, repeat):
    return interleaved([compiled(op, *c) for c in configs], repeat)


def torch_fn(op):
    """PyTorch CPU's call for the same problem (NCHW float32), or None."""
    import torch
    torch.manual_seed(0)
    if op.name == "prim.conv2d":
        p = problem_of(op)
        if p.padding[0] != p.padding[1] or p.padding[2] != p.padding[3]:
            return None
        x = torch.randn(p.n, p.c, p.h, p.w)
        w = torch.randn(p.k, p.c // p.groups, p.r, p.s)
        b = torch.randn(p.k)
        st, pad, dil = tuple(p.strides), (p.padding[0], p.padding[2]), tuple(p.dilations)
        f = lambda: torch.nn.functional.conv2d(x, w, b, st, pad, dil, p.groups)  # noqa: E731
    else:
        m, n, k = (int(s[1:]) for s in problem_of(op).descriptor().split("-")[2:5])
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        f = lambda: torch.nn.functional.linear(x, w, b)  # noqa: E731

    def run():
        with torch.inference_mode():
            f()
    return run


def us(s):
    return "-" if s is None else (f"{s * 1e6:.0f}" if s >= 1e-4 else f"{s * 1e6:.1f}")


def tune_network(name, graph, args, log):
    """find.search + find.store per distinct layer (what `openprim tune` does); rows and wall clock."""
    module, todo = tuning_commands.layers(graph, TARGET)
    if args.layers:
        todo = todo[:args.layers]
    rows, t_net = [], 0.0
    with module.context:
        for i, (op, key, count) in enumerate(todo):
            t0 = time.monotonic()
            results = find.search(op, TARGET, args.budget)
            find.store(key, TARGET, results)
            spent = time.monotonic() - t0
            t_net += spent
            best, ref = results[0], tuning_commands._reference(op, TARGET, results)
            log(f"[{name} {i + 1}/{len(todo)}] {key} x{count}: heuristic {ref.solver} {us(ref.seconds)} us, find "
                f"{best.solver} {params_str(best.params)} {us(best.seconds)} us ({len(results)} configs, {spent:.1f} s)")
            rows.append(dict(net=name, op=op, key=key, count=count, best=best, ref=ref, configs=len(results),
                             failed=sum(r.seconds is None for r in results), spent=spent))
    return module, rows, t_net, len(todo)


def confirm(rows, args, log):
    """Re-time heuristic, find's choice and PyTorch here, interleaved."""
    for r in rows:
        op, best, ref = r["op"], r["best"], r["ref"]
        same = best.solver == ref.solver and best.params == ref.params
        with op.context:
            fns = [compiled(op, ref.solver, ref.params)] + ([] if same else [compiled(op, best.solver, best.params)])
            pt = torch_fn(op)
            t = interleaved(fns + ([pt] if pt else []), args.repeat)
        r["t_ref"], r["t_best"] = t[0], t[len(fns) - 1]
        r["t_torch"] = t[-1] if pt else None
        r["same"] = same
        log(f"  {r['key']}: heuristic {us(r['t_ref'])} us, find {us(r['t_best'])} us, torch {us(r['t_torch'])} us")


def strategies(module_rows, args, log):
    """Exhaustive vs random+greedy (find.search at small budgets) on layers with large spaces."""
    out = []
    wanted = args.strategy_layers
    for module, rows in module_rows:
        with module.context:
            for r in rows:
                if r["key"] not in wanted:
                    continue
                op = r["op"]
                configs = find.space(op, TARGET)
                t0 = time.monotonic()
                bench = find.Bench(op, TARGET)
                for c in configs:
                    bench.measure(*c)
                t_ex = time.monotonic() - t0
                ex = sorted((x for x in bench.results.values() if x.seconds is not None), key=lambda x: x.seconds)
                log(f"exhaustive {r['key']}: {len(configs)} configs, {t_ex:.0f} s, best {ex[0].solver} "
                    f"{params_str(ex[0].params)} {us(ex[0].seconds)} us")
                for budget in args.strategy_budgets:
                    t0 = time.monotonic()
                    res = find.search(op, TARGET, budget, seed=args.seed)
                    t_g = time.monotonic() - t0
                    g = res[0]
                    rank = 1 + next((i for i, x in enumerate(ex) if x.solver == g.solver and x.params == g.params), None)
                    same = (ex[0].solver, ex[0].params) == (g.solver, g.params)
                    t_pair = timed_config(op, [(ex[0].solver, ex[0].params)] + ([] if same else [(g.solver, g.params)]),
                                          args.repeat)
                    t_pair = t_pair * 2 if same else t_pair
                    out.append(dict(key=r["key"], space=len(configs), t_ex=t_ex, ex=ex[0], budget=budget, t_g=t_g,
                                    n_g=len(res), g=g, rank=rank, in_ex=bench.results[bench._key(g.solver, g.params)],
                                    pair=t_pair))
                    log(f"  greedy budget {budget} s: {len(res)} configs, {t_g:.0f} s, best {g.solver} "
                        f"{params_str(g.params)} {us(g.seconds)} us (rank {rank} in exhaustive); re-timed "
                        f"exhaustive-best {us(t_pair[0])} vs greedy-best {us(t_pair[1])} us")
    return out


def markdown(args, rows, nets, strat, total):
    L = []
    L.append(f"Command: `{args.command}`  ")
    L.append(f"Date: {datetime.date.today().isoformat()}; host CPU `{tuning_db.arch_of(TARGET)}`, {cpu_cores()} threads; "
             f"total script time {total / 60:.1f} min. Other jobs shared the cores, so times are noisy.\n")
    L.append("Per distinct layer (as `openprim tune` sees it: NHWC, epilogue fused; xN = occurrences). "
             "*find speedup* is find's own measurement (heuristic time / best time, in its worker); "
             "*heur.*, *find* and *PyTorch* are all re-timed in this process, interleaved (least of " f"{ROUNDS} rounds' "
             f"medians of {args.repeat} runs); *speedup* = heur./find re-timed; *PyTorch* = F.conv2d NCHW + bias "
             f"(no ReLU/clamp/residual), {cpu_cores()} threads; *vs PT* = PyTorch time / OpenPrim find time (>1: we are "
             "faster). `=` : find kept the heuristic's choice.\n")
    L.append("| net | layer | xN | heuristic | heur. µs | find choice | find µs | find speedup | speedup | "
             "PyTorch µs | vs PT | configs (failed) | tune s |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b, ref = r["best"], r["ref"]
        choice = "=" if r["same"] else f"{b.solver} `{params_str(b.params)}`"
        pt = r["t_torch"]
        vs = "-" if pt is None else f"{pt / r['t_best']:.2f}"
        L.append(f"| {r['net']} | {short(r['key'])} | {r['count']} | {ref.solver} `{params_str(ref.params)}` | "
                 f"{us(r['t_ref'])} | {choice} | {us(r['t_best'])} | {ref.seconds / b.seconds:.2f}x | "
                 f"{r['t_ref'] / r['t_best']:.2f}x | {us(pt)} | "
                 f"{vs} | "
                 f"{r['configs']} ({r['failed']}) | {r['spent']:.1f} |")
    L.append("")
    L.append("Whole-network tuning (find.search + store per distinct layer, budget "
             f"{args.budget} s/layer), and the sums over the layers above weighted by occurrences:\n")
    L.append("| net | distinct layers tuned | tuning wall clock | Σ heuristic µs | Σ find µs | Σ PyTorch µs |")
    L.append("|---|---|---|---|---|---|")
    for name, (n, secs) in nets.items():
        rr = [r for r in rows if r["net"] == name]
        s = lambda k: sum(r[k] * r["count"] for r in rr if r[k] is not None)  # noqa: E731
        L.append(f"| {name} | {n} | {secs:.0f} s ({secs / 60:.1f} min) | {us(s('t_ref'))} | {us(s('t_best'))} | "
                 f"{us(s('t_torch'))} |")
    if strat:
        L.append("")
        L.append("Search strategies: exhaustive (every configuration of `find.space`) vs find's random+greedy "
                 "(`find.search` with a small budget; each solver's default first, so the budget includes those). "
                 "*rank* = where greedy's pick stands in the exhaustive ranking; *re-timed* = both picks timed "
                 "again here, interleaved.\n")
        L.append("| layer | space | exhaustive: time spent, best | greedy budget | greedy: time spent, configs, "
                 "best | rank | re-timed exh. / greedy µs |")
        L.append("|---|---|---|---|---|---|---|")
        for s in strat:
            L.append(f"| {short(s['key'])} | {s['space']} | {s['t_ex']:.0f} s, {us(s['ex'].seconds)} µs "
                     f"{s['ex'].solver} `{params_str(s['ex'].params)}` | {s['budget']:g} s | {s['t_g']:.0f} s, "
                     f"{s['n_g']}, {us(s['g'].seconds)} µs {s['g'].solver} `{params_str(s['g'].params)}` | "
                     f"{s['rank']} | {us(s['pair'][0])} / {us(s['pair'][1])} |")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", default="resnet18,mobilenetv2")
    ap.add_argument("--layers", type=int, default=0, help="first N distinct layers per network (0: all)")
    ap.add_argument("--budget", type=float, default=6.0, help="find budget per layer, seconds")
    ap.add_argument("--repeat", type=int, default=20, help="runs per timing (re-timing and PyTorch)")
    ap.add_argument("--strategy-layers", default=",".join(STRATEGY_LAYERS),
                    help="descriptors for the exhaustive vs greedy comparison ('' : skip)")
    ap.add_argument("--strategy-budgets", default="6,20")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (the least is kept)")
    ap.add_argument("--quick", action="store_true", help="3 layers per network, budget 2 s, one strategy layer")
    ap.add_argument("--append", help="append the markdown section to this file (e.g. bench/RESULTS.md)")
    args = ap.parse_args()
    args.command = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0])] + sys.argv[1:])
    if args.quick:
        args.layers, args.budget, args.repeat = args.layers or 3, 2.0, 10
        args.strategy_budgets = "4"
        args.strategy_layers = "conv2d-1x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-KRSC-f32-bias+relu"
    global ROUNDS
    ROUNDS = args.rounds if not args.quick else 3
    args.strategy_layers = [s for s in args.strategy_layers.split(",") if s]
    args.strategy_budgets = [float(b) for b in args.strategy_budgets.split(",") if b]
    warnings.simplefilter("ignore")
    torch_cpu_threads()

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    t_start = time.monotonic()
    rows, nets, modules = [], {}, []
    for name, graph in networks(args.nets.split(",")):
        module, r, secs, n = tune_network(name, graph, args, log)
        log(f"{name}: tuned {n} distinct layers in {secs:.0f} s")
        modules.append((module, r))
        nets[name] = (n, secs)
        rows += r
    confirm(rows, args, log)
    strat = strategies(modules, args, log)
    text = markdown(args, rows, nets, strat, time.monotonic() - t_start)
    print(text)
    if args.append:
        with open(args.append, "a") as f:
            f.write("\n## Algorithm selection (CPU)\n\n" + text)


if __name__ == "__main__":
    main()

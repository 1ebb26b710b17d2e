"""Benchmark: one ResNet-50 training step on the GPU, torch.compile(backend="openprim") (default mode, and
mode="reduce-overhead": the graphs recorded by CUDA-graph trees) against eager PyTorch and torch.compile's
Inductor (default mode, and mode="reduce-overhead"), in the same run.

    . scripts/device_env.sh && python bench/gpu_training_step.py --out DIR       # on the GPU machine

The model (examples/torch_models.resnet50: torchvision's structure, seeded weights, 1000 classes, train mode:
batch statistics) and its cross-entropy loss are one module (examples/train_resnet.WithLoss), in channels_last
with channels_last images. A step is what a mixed-precision user runs: zero_grad, the forward and the loss
under torch.autocast(float16) (the fp32 parameters are the master weights, cast to f16 for the convolutions
and the classifier), loss.backward(), and torch.optim.SGD (momentum 0.9, foreach) on the fp32 parameters.
OpenPrim compiles AOTAutograd's forward and backward graphs for the GPU (driver/torch_backend._training_backend)
and runs them on PyTorch's stream; the optimizer is torch's in every variant.

All variants start from the same weights and take the same batch. The first step (which compiles) is timed
apart; then the steps are timed interleaved (bench/timing.time_rounds: CUDA events around `iters` steps per
round, the median over the rounds). The first step's loss and gradients are compared with eager's in float64
on the same GPU: |grad - grad64| / |grad64| over all parameters as one vector (2-norms), and the worst
parameter's (eager under autocast is measured the same way, the yardstick for f16: an elementwise maximum
is no yardstick here, since a parameter whose float64 gradient is rounding-sized, a batch norm's shift
ahead of another batch norm, reads 1.0 for every f16 run). Writes DIR/gpu_training_step.json; prints a
table.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
from runtime_path import use_checkout  # noqa: E402 - scripts/: openprim from this checkout when not installed
from timing import medians, peers_environment, time_rounds  # noqa: E402

VARIANTS = ("eager", "openprim", "openprim-cudagraphs", "inductor", "inductor-cudagraphs")


def wrapped(name: str, model):
    import torch
    if name == "eager":
        return model
    if name.startswith("openprim"):
        mode = "reduce-overhead" if name == "openprim-cudagraphs" else None
        return torch.compile(model, backend="openprim", dynamic=False, mode=mode)
    return torch.compile(model, dynamic=False, mode="reduce-overhead" if name == "inductor-cudagraphs" else None)


def make_step(model, x, y):
    """One training step of `model` (a compiled or eager module with its loss) as a function, with its SGD."""
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        loss.backward()
        opt.step()
        return loss
    return step


def gradients(model) -> dict:
    return {k.removeprefix("_orig_mod."): p.grad.detach().clone() for k, p in model.named_parameters()}


def host_profiles(steps: dict, count: int, rows: dict) -> None:
    """`count` steps of each variant under cProfile: the 25 functions with the most own time, printed, and the
    host seconds per step into rows[name]["host_s_per_step"]."""
    import cProfile
    import io
    import pstats
    import torch
    for name, step in steps.items():
        step()                      # warm: a variant set up before another may have been traced again
        prof = cProfile.Profile()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        prof.enable()
        for _ in range(count):
            step()
        prof.disable()
        host = time.perf_counter() - t0
        torch.cuda.synchronize()
        rows[name]["host_s_per_step"] = host / count
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        print(f"\n{name}: {count} steps under cProfile, {1e3 * host / count:.1f} ms of host time each\n"
              + "\n".join(text.getvalue().splitlines()[4:40]), flush=True)


def kernel_profiles(runs: int, rows: dict) -> None:
    """The compiled forward and backward graphs profiled kernel by kernel (runtime/profile.py: each launch
    timed alone, random inputs), printed as `openprim profile` prints them; the time per kernel family into
    rows["openprim"]["kernels"]."""
    from openprim import torch_backend
    from openprim.profile_command import table
    from openprim.runtime.profile import profile
    families = rows["openprim"]["kernels"] = {}
    for kind, exe in torch_backend.AOT_EXECUTABLES.items():
        report = profile(exe, runs=runs)
        print(f"\n{kind} graph:\n{table(report, top=40)}", flush=True)
        family = families[kind] = {"total_us": report.total_us, "kernel_us": report.kernel_us,
                                   "graph_us": report.graph_us, "by_kernel": {}}
        for s in report.steps:
            name = s.solver or s.op
            us, count = family["by_kernel"].get(name, (0.0, 0))
            family["by_kernel"][name] = (us + s.time_us, count + 1)
        print("by kernel: " + ", ".join(f"{k} {us:.0f} us ({n})" for k, (us, n) in
                                        sorted(family["by_kernel"].items(), key=lambda kv: -kv[1][0])), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20, help="steps per timed round")
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--host-profile", type=int, metavar="STEPS", default=0,
                    help="also run STEPS steps of each variant under cProfile and print where the host's time goes "
                         "(the steps synchronized at the end: host time beyond the GPU's shows as waiting less)")
    ap.add_argument("--kernel-profile", type=int, metavar="RUNS", default=0,
                    help="also profile OpenPrim's forward and backward graphs kernel by kernel over RUNS runs")
    args = ap.parse_args()
    use_checkout()
    import torch
    import torch_models
    from train_resnet import WithLoss
    from openprim import torch_backend

    torch.backends.cudnn.benchmark = True
    base = WithLoss(torch_models.resnet50()).train().cuda().to(memory_format=torch.channels_last)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 3, args.size, args.size, generator=g).cuda().to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), generator=g).cuda()

    # the yardstick: the first step's loss and gradients in float64
    m64 = copy.deepcopy(base).double()
    loss64 = m64(x.double(), y)
    loss64.backward()
    g64 = gradients(m64)
    del m64

    rows, steps = {}, {}
    torch._dynamo.reset()
    for name in args.variants.split(","):   # no reset between them: it would drop the earlier variants' graphs
        model = wrapped(name, copy.deepcopy(base))
        step = make_step(model, x, y)
        row = rows[name] = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            try:
                loss = step()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - a peer that fails is reported, not fatal
                row["error"] = f"{type(e).__name__}: {e}"[:500]
                print(f"{name:20s} failed: {row['error']}", flush=True)
                continue
            row["first_step_s"] = time.perf_counter() - t0
            row["loss_error"] = abs(loss.item() - loss64.item())
            grads = gradients(model)
            diff = {k: (grads[k].double() - g64[k]).norm() for k in g64}
            row["grad_error"] = float(torch.stack(list(diff.values())).norm()
                                      / torch.stack([g.norm() for g in g64.values()]).norm())
            row["worst_parameter"] = max(((float(diff[k] / g64[k].norm()), k) for k in g64))
            for _ in range(2):
                step()
        row["warnings"] = sorted({str(w.message)[:300] for w in caught if "openprim" in str(w.message)})
        if name.startswith("openprim"):
            row["aot_counts"] = dict(torch_backend.AOT_COUNTS)
        steps[name] = step
        print(f"{name:20s} first step {row['first_step_s']:7.1f} s, loss error {row['loss_error']:.1e}, "
              f"grad error {row['grad_error']:.1e} (worst {row['worst_parameter'][1]} "
              f"{row['worst_parameter'][0]:.1e}) {row['warnings'] or ''}", flush=True)

    if args.host_profile:
        host_profiles(steps, args.host_profile, rows)
    if args.kernel_profile and "openprim" in steps:
        kernel_profiles(args.kernel_profile, rows)
    times = time_rounds(steps, args.rounds, args.iters)
    ms = medians(times)
    for name, t in ms.items():
        rows[name]["ms"], rows[name]["ms_rounds"] = t, times[name]
    print(f"\nResNet-50 training step, batch {args.batch}, {args.size}x{args.size}, autocast f16, SGD momentum "
          f"({torch.cuda.get_device_name()})\n")
    print("| variant | ms per step | / openprim | first step s | grad error (vs float64) |\n|---|---|---|---|---|")
    for name, row in rows.items():
        if "ms" in row:
            ratio = row["ms"] / ms["openprim"] if "openprim" in ms else float("nan")
            print(f"| {name} | {row['ms']:.2f} | {ratio:.2f} | {row['first_step_s']:.1f} | {row['grad_error']:.1e} |")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_training_step.json"), "w") as f:
        json.dump({"command": " ".join(["python bench/gpu_training_step.py"] + sys.argv[1:]),
                   "model": "examples/torch_models.resnet50 (torchvision's structure) + cross-entropy, train mode, "
                            "channels_last, autocast f16, SGD momentum 0.9",
                   "batch": args.batch, "size": args.size, "gpu": torch.cuda.get_device_name(),
                   "environment": peers_environment(), "loss64": loss64.item(), "variants": rows}, f, indent=1)


if __name__ == "__main__":
    main()

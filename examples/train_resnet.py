"""Training a small ResNet with OpenPrim on the CPU or a GPU (issue 31): eager PyTorch against
`torch.compile(model, backend=openprim_backend)`, from the same initial weights and the same data order.

    python examples/train_resnet.py --steps 300 --out bench/                    # training_cpu.{json,png}
    python examples/train_resnet.py --steps 300 --device cuda --out bench/      # training_gpu.{json,png}

The model is a ResNet of three stages of basic blocks (widths w, 2w, 4w; the last two stages start with a
stride 2 and a 1x1 projection), batch norm in training mode, global average pooling and a linear layer to 10
classes; the cross-entropy loss is part of the compiled module, so the whole step (forward, loss, backward) is
OpenPrim's while the optimizer (SGD, momentum 0.9) is torch's. The data is synthetic but learnable: 10 fixed
class prototypes (smooth seeded random images), each sample one of them shifted by up to 2 pixels and with
Gaussian noise added; a training set and a held-out set drawn from the same prototypes with other seeds.

Both runs take the same batches in the same order (one seeded order), each step is timed (forward, backward,
optimizer step); the first OpenPrim step includes compiling the forward and the backward graph (by default
with the compile cache off, so that it is a real compile: --cache uses it). After training, each model is
evaluated on the held-out set in eval mode: the eager one eagerly, the OpenPrim one by OpenPrim's inference
path (torch.compile under no_grad) and, as a check, eagerly too.

A third run, eager PyTorch on another number of threads (1 where torch has 2; on a GPU: with cuDNN's autotuner on,
so other convolution algorithms), is the yardstick: the same library with another summation order. In f32 the curves agree to rounding at first and then drift apart: a ReLU input
within ~1e-6 of zero can land on the other side of the kink in one run, which changes that element's gradient
entirely (up to ~1e-2 of a parameter's largest gradient), and SGD amplifies the difference step after step. The
thread-count reference drifts the same way; with SiLU in place of ReLU the curves stayed within 1e-6 of each
other over 100 steps (bench/RESULTS.md).

On a GPU the data, the models and the optimizer live on the device (f32: OpenPrim's GPU graphs run its SIMT
kernels). Written to OUT: training_cpu.json (training_gpu.json on a GPU) (per-step losses and times of both runs, the relative difference of the loss
curves, accuracies, compile time, the configuration and the machine) and training_cpu.png (training_gpu.png; the two loss curves
and their relative difference; needs matplotlib, else skipped with a message).

`run(...)` is the training function (test/python/test_training_example.py calls it at a tiny size).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
import warnings

import torch
from torch import nn
import torch.nn.functional as F

CLASSES = 10
CPU_NAME = "?"
try:
    with open("/proc/cpuinfo") as f:
        CPU_NAME = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
except OSError:
    CPU_NAME = platform.processor() or platform.machine()


# ---------------------------------------------------------------------------------------------------- model
class BasicBlock(nn.Module):
    def __init__(self, c, k, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c, k, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(k)
        self.conv2 = nn.Conv2d(k, k, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(k)
        self.downsample = None
        if stride != 1 or c != k:
            self.downsample = nn.Sequential(nn.Conv2d(c, k, 1, stride, bias=False), nn.BatchNorm2d(k))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """stem (3x3 conv, BN, ReLU) -> stages of basic blocks of widths w, 2w, 4w (strides 1, 2, 2) -> global
    average pool -> linear."""

    def __init__(self, width=16, blocks=(1, 1, 1), classes=CLASSES):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, c = [], width
        for i, n in enumerate(blocks):
            k = width * 2 ** i
            for j in range(n):
                layers.append(BasicBlock(c, k, 2 if i > 0 and j == 0 else 1))
                c = k
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        y = F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1)
        return self.fc(torch.flatten(y, 1))


class WithLoss(nn.Module):
    """The network and its cross-entropy loss in one module, so that one compiled graph holds both."""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, target):
        return self.loss(self.net(x), target)


# ----------------------------------------------------------------------------------------------------- data
def prototypes(size, seed, classes=CLASSES):
    """[classes, 3, size, size]: smooth random images (a 4x4 grid of N(0, 1) upsampled), each of unit std."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randn(classes, 3, 4, 4, generator=g)
    protos = F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)
    return protos / protos.flatten(1).std(1).view(-1, 1, 1, 1)


def samples(protos, n, noise, seed, shift=2):
    """n samples: a random prototype, rolled by up to `shift` pixels on each axis, plus N(0, noise^2) noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, protos.shape[0], (n,), generator=g)
    shifts = torch.randint(-shift, shift + 1, (n, 2), generator=g)
    x = torch.stack([torch.roll(protos[c], (int(dy), int(dx)), (1, 2)) for c, (dy, dx) in zip(labels, shifts)])
    return x + noise * torch.randn(x.shape, generator=g), labels


def make_data(size=16, train=2048, test=1000, noise=3.0, seed=0, device="cpu"):
    """(x_train, y_train, x_test, y_test) from one set of prototypes, the two sets from different seeds."""
    protos = prototypes(size, seed)
    data = (*samples(protos, train, noise, seed + 1), *samples(protos, test, noise, seed + 2))
    return tuple(t.to(device) for t in data)


def batch_order(n, steps, batch, seed):
    """The index batches of `steps` steps: seeded permutations of range(n), one per epoch, cut into batches."""
    g = torch.Generator().manual_seed(seed)
    order = []
    while len(order) < steps:
        perm = torch.randperm(n, generator=g)
        order += [perm[i:i + batch] for i in range(0, n - batch + 1, batch)]
    return order[:steps]


# ------------------------------------------------------------------------------------------------- training
def train(model, step_fn, data, order, lr=0.05, momentum=0.9):
    """SGD with momentum over the batches of `order`; step_fn(x, y) is the loss (eager or compiled model).
    Returns (per-step losses, per-step seconds: forward + backward + optimizer step)."""
    x_train, y_train = data[0], data[1]
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    model.train()
    losses, times = [], []
    for idx in order:
        x, y = x_train[idx], y_train[idx]
        t0 = time.perf_counter()
        loss = step_fn(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    return losses, times


def accuracy(net, x, y, batch, compiled=False):
    """Top-1 accuracy of net (in eval mode) on (x, y), in batches of `batch` (a divisor of len(x): one shape);
    compiled: through torch.compile(backend=openprim_backend), OpenPrim's inference path."""
    from openprim.torch_backend import openprim_backend
    net.eval()
    fn = torch.compile(net, backend=openprim_backend, dynamic=False) if compiled else net
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            correct += int((fn(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum())
    return correct / len(x)


def curve_difference(eager, ours, tol=1e-3):
    """The relative difference |ours - eager| / |eager| of two loss curves, per step and summarized; steps are
    numbered from 1 (as in the plot), windows [first, last] inclusive."""
    rel = [abs(a - b) / abs(b) if b else abs(a - b) for a, b in zip(ours, eager)]
    above = next((i + 1 for i, r in enumerate(rel) if r > tol), None)
    windows = [{"steps": [i + 1, min(i + 50, len(rel))], "max_rel_diff": max(rel[i:i + 50])}
               for i in range(0, len(rel), 50)]
    return {"per_step": rel, "max_rel_diff": max(rel), "max_rel_diff_first_50": max(rel[:50]),
            "tolerance": tol, "first_step_above_tolerance": above, "per_50_steps": windows}


def run(steps=300, batch=16, size=16, width=16, blocks=(1, 1, 1), train_size=2048, test_size=1000,
        noise=3.0, lr=0.05, momentum=0.9, seed=0, evaluate=True, eval_batch=200, reference=True, log=print,
        device="cpu"):
    """Train the same ResNet twice, eagerly and through torch.compile(backend=openprim_backend), from the same
    initial weights on the same batches; returns a dict of the losses, times, curve difference, accuracies
    (evaluate=True) and what the OpenPrim backend did (its counters and warnings). reference=True trains it a
    third time, eagerly on another number of threads (1, or 2 where torch runs on 1; on a GPU with cuDNN's
    autotuner on): the same library with another summation order, whose distance from the eager curve is the
    yardstick for OpenPrim's. device="cuda": data, models and optimizer on the GPU."""
    import torch._dynamo
    from openprim import torch_backend
    from openprim.torch_backend import openprim_backend

    data = make_data(size, train_size, test_size, noise, seed, device)
    order = [idx.to(device) for idx in batch_order(train_size, steps, batch, seed + 3)]
    torch.manual_seed(seed)
    eager_model = WithLoss(ResNet(width, blocks)).to(device)
    ours_model = copy.deepcopy(eager_model)
    ref_model = copy.deepcopy(eager_model) if reference else None
    params = sum(p.numel() for p in eager_model.parameters())
    log(f"ResNet widths {[width * 2 ** i for i in range(len(blocks))]}, blocks {list(blocks)}, {params} parameters; "
        f"{steps} steps of batch {batch}, {size}x{size} images, {train_size} training / {test_size} held-out samples")

    log("eager PyTorch ...")
    t0 = time.perf_counter()
    eager_losses, eager_times = train(eager_model, eager_model, data, order, lr, momentum)
    eager_wall = time.perf_counter() - t0
    if reference:
        threads = torch.get_num_threads()
        ref_threads = 1 if threads > 1 else 2
        gpu = device != "cpu"
        yardstick = "with cuDNN's autotuner" if gpu else f"on {ref_threads} thread(s)"
        log(f"eager PyTorch {yardstick} (reference: another summation order) ...")
        torch.set_num_threads(threads if gpu else ref_threads)
        torch.backends.cudnn.benchmark = gpu
        try:
            ref_losses, _ = train(ref_model, ref_model, data, order, lr, momentum)
        finally:
            torch.set_num_threads(threads)
            torch.backends.cudnn.benchmark = False

    time.sleep(0.3)    # let torch's OpenMP threads stop spinning before OpenPrim's start
    torch._dynamo.reset()
    torch_backend.AOT_COUNTS.clear()
    torch_backend._WARNED.clear()
    log("torch.compile(model, backend=openprim_backend) ...")
    compiled = torch.compile(ours_model, backend=openprim_backend, dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        ours_losses, ours_times = train(ours_model, compiled, data, order, lr, momentum)
        ours_wall = time.perf_counter() - t0
    backend_warnings = [str(w.message) for w in caught if "openprim_backend" in str(w.message)]
    counts = dict(torch_backend.AOT_COUNTS)

    diff = curve_difference(eager_losses, ours_losses)
    if reference:
        ref_diff = curve_difference(eager_losses, ref_losses)
    result = {
        "config": {"model": "ResNet", "widths": [width * 2 ** i for i in range(len(blocks))], "blocks": list(blocks),
                   "parameters": params, "classes": CLASSES, "image": [3, size, size], "steps": steps, "batch": batch,
                   "train_samples": train_size, "test_samples": test_size, "noise": noise, "shift": 2,
                   "optimizer": f"SGD(lr={lr}, momentum={momentum})", "seed": seed, "dtype": "float32",
                   "loss": "nn.CrossEntropyLoss inside the compiled module", "batch_norm": "training mode",
                   "device": device},
        "losses": {"eager": eager_losses, "openprim": ours_losses},
        "curve": diff,
        "step_ms": {"eager": [t * 1e3 for t in eager_times], "openprim": [t * 1e3 for t in ours_times]},
        "median_step_ms": {"eager": statistics.median(eager_times[1:] or eager_times) * 1e3,
                           "openprim": statistics.median(ours_times[1:] or ours_times) * 1e3},
        "first_step_s": {"eager": eager_times[0], "openprim": ours_times[0]},
        "compile_s": ours_times[0] - statistics.median(ours_times[1:] or ours_times),
        "train_wall_s": {"eager": eager_wall, "openprim": ours_wall},
        "openprim_counts": counts,
        "openprim_warnings": backend_warnings,
    }
    if reference:
        result["reference"] = {"what": f"eager PyTorch {yardstick} against eager: the same weights and batches, "
                                       "another summation order", "label": f"eager {yardstick} vs eager",
                               "threads": threads if gpu else ref_threads, "losses": ref_losses, "curve": ref_diff}
    log(f"loss curves: max relative difference {diff['max_rel_diff']:.3g} ({diff['max_rel_diff_first_50']:.3g} over "
        f"the first 50 steps; first step above {diff['tolerance']:g}: {diff['first_step_above_tolerance']})")
    log(f"median step: eager {result['median_step_ms']['eager']:.1f} ms, OpenPrim "
        f"{result['median_step_ms']['openprim']:.1f} ms; OpenPrim's first step (compiling) {ours_times[0]:.1f} s")
    if reference:
        log(f"reference, eager {yardstick} vs eager: max relative difference "
            f"{ref_diff['max_rel_diff']:.3g} ({ref_diff['max_rel_diff_first_50']:.3g} over the first 50 steps; first "
            f"step above {ref_diff['tolerance']:g}: {ref_diff['first_step_above_tolerance']})")
    if backend_warnings:
        log("openprim_backend warned: " + " | ".join(backend_warnings))

    if evaluate:
        x_test, y_test = data[2], data[3]
        t0 = time.perf_counter()
        acc = {"eager": accuracy(eager_model.net, x_test, y_test, eval_batch),
               "openprim": accuracy(ours_model.net, x_test, y_test, eval_batch, compiled=True)}
        acc_time = time.perf_counter() - t0
        acc["openprim_weights_eager_eval"] = accuracy(ours_model.net, x_test, y_test, eval_batch)
        result["accuracy"] = acc
        result["eval_s"] = acc_time
        log(f"held-out accuracy: eager {acc['eager']:.3f}, OpenPrim {acc['openprim']:.3f} (OpenPrim's weights run "
            f"eagerly: {acc['openprim_weights_eager_eval']:.3f})")
    return result


# ----------------------------------------------------------------------------------------------------- plot
def plot(result, path, title):
    """The two loss curves (log y) and their relative difference, as a PNG; False where matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    eager, ours = result["losses"]["eager"], result["losses"]["openprim"]
    steps = range(1, len(eager) + 1)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    ax.plot(steps, eager, label="eager PyTorch", lw=1.6, color="tab:blue")
    ax.plot(steps, ours, label="torch.compile(backend=openprim_backend)", lw=1.0, ls="--", color="tab:orange")
    ax.set_yscale("log")
    ax.set_ylabel("training loss (cross entropy)")
    ax.grid(True, which="both", alpha=0.3)
    acc = result.get("accuracy")
    extra = f"; held-out accuracy: eager {acc['eager']:.3f}, OpenPrim {acc['openprim']:.3f}" if acc else ""
    ax.legend(title=f"max rel. diff. {result['curve']['max_rel_diff']:.2g} "
                    f"(first 50 steps: {result['curve']['max_rel_diff_first_50']:.2g}){extra}", fontsize=8,
              title_fontsize=8)
    rel = [max(r, 1e-9) for r in result["curve"]["per_step"]]
    ax2.semilogy(steps, rel, color="tab:red", lw=0.9, label="OpenPrim vs eager")
    if "reference" in result:
        ref = result["reference"]
        ax2.semilogy(steps, [max(r, 1e-9) for r in ref["curve"]["per_step"]], color="gray", lw=0.7, alpha=0.8,
                     label=ref.get("label", f"eager on {ref['threads']} thread(s) vs eager"))
        ax2.legend(fontsize=7, loc="lower right")
    ax2.axhline(result["curve"]["tolerance"], color="gray", ls=":", lw=1)
    ax2.set_ylabel("|rel. diff.| (0 at 1e-9)")
    ax2.set_xlabel("step")
    ax2.grid(True, which="both", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--size", type=int, default=16, help="image height and width")
    p.add_argument("--width", type=int, default=16, help="channels of the first stage (then 2x, 4x)")
    p.add_argument("--blocks", type=int, nargs=3, default=[1, 1, 1], help="basic blocks per stage")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--noise", type=float, default=3.0, help="std of the noise added to the prototypes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-reference", action="store_true", help="skip the third run (eager on another thread count, "
                                                                "the yardstick of the curves' difference)")
    p.add_argument("--cache", action="store_true", help="use OpenPrim's compile cache (default: off, so the "
                                                           "first step's compile time is a real compile)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the data, models and optimizer live")
    p.add_argument("--plot", metavar="JSON", help="only draw the PNG of an earlier run's JSON (beside it)")
    p.add_argument("--out", default="bench/", help="folder for training_{cpu,gpu}.json and .png")
    args = p.parse_args(argv)
    if args.plot:
        with open(args.plot) as f:
            result = json.load(f)
        png = os.path.splitext(args.plot)[0] + ".png"
        print(f"wrote {png}" if plot(result, png, result["title"]) else "matplotlib is not installed (pip install it)")
        return

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "bench"))
    from timing import cpu_cores, torch_cpu_threads
    if not args.cache:
        os.environ["OPENPRIM_CACHE"] = "0"
    threads = torch_cpu_threads()
    start = time.perf_counter()
    result = run(steps=args.steps, batch=args.batch, size=args.size, width=args.width, blocks=tuple(args.blocks),
                 noise=args.noise, lr=args.lr, seed=args.seed, reference=not args.no_reference, device=args.device)
    result["total_s"] = time.perf_counter() - start
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else None
    machine = f"GPU: {gpu}" if gpu else f"CPU: {CPU_NAME}, {cpu_cores()} cores"
    result["machine"] = {"cpu": CPU_NAME, "cores": cpu_cores(), "torch_threads": threads, "torch": torch.__version__,
                         "python": platform.python_version(), "openprim_cache": bool(args.cache), "gpu": gpu}
    result["command"] = "python examples/train_resnet.py " + " ".join(argv if argv is not None else sys.argv[1:])
    os.makedirs(args.out, exist_ok=True)
    cfg = result["config"]
    result["title"] = (f"ResNet {cfg['widths']} x {cfg['blocks']} blocks, {cfg['image'][1]}x{cfg['image'][2]}, batch "
                       f"{cfg['batch']}, {cfg['steps']} steps SGD-momentum, f32\n{machine}: eager PyTorch vs OpenPrim "
                       "(torch.compile)")
    stem = "training_gpu" if gpu else "training_cpu"
    json_path = os.path.join(args.out, stem + ".json")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"wrote {json_path}")
    png = os.path.join(args.out, stem + ".png")
    if plot(result, png, result["title"]):
        print(f"wrote {png}")
    else:
        print("matplotlib is not installed: the plot was skipped (pip install matplotlib)")
    print(f"total {result['total_s']:.0f} s")


if __name__ == "__main__":
    main()

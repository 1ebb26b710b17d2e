"""Whole networks on a GPU against PyTorch (eager, torch.compile with freezing, and with CUDA graphs too) in the same run.

    python bench/gpu_networks.py build DIR [--target nvvm:sm_90]   # here: compile (needs MLIR)
    python bench/gpu_networks.py run DIR                            # on the GPU machine: runtime + torch

The network is examples/resnet.py's build(). On the GPU machine, which has no MLIR, the same build()
runs against TorchGraph. That object records the frontend calls as a tape of torch ops over the same
seeded weights. So PyTorch runs the same architecture with the same numbers: NCHW tensors in
channels_last memory, batch norm unfolded, eval mode. Both outputs are compared, and then both are timed.

PyTorch runs the tape as an nn.Module (TorchGraph.module(): the weights its buffers, the filters already in
OIHW channels_last), so that it is timed as bench/timing.torch_peers builds every peer: eager under
inference_mode, inductor-freezing (torch.compile with torch._inductor.config.freezing=True: batch norm folds
into the convolutions) and inductor-freezing-cudagraphs (the same with mode="reduce-overhead"), in
interleaved rounds of CUDA events. $OUT/gpu_networks.json: one row per network (torch_eager_ms and
torch_compile_ms as before, torch_compile_ms now with freezing; every peer under torch_peers; the versions
under environment).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)
from runtime_path import import_runtime  # noqa: E402
from timing import (EAGER, FREEZING, TORCH_PEERS, best_peer, medians, peers_environment,  # noqa: E402
                    release_peers, time_rounds, torch_peers)

NETS = {"resnet50_b32_f16_NHWC": dict(depth=50, batch=32, size=224, layout="NHWC", dtype="f16")}


class Value:
    def __init__(self, graph, key, shape):
        self.graph, self.key, self.shape = graph, key, tuple(shape)

    def __add__(self, other):
        return self.graph.add(self, other)


class TorchGraph:
    """The frontend calls examples/resnet.py makes, as a tape of torch ops. Shapes are reported in the
    graph's layout (NHWC), and values are NCHW torch tensors in channels_last memory. Calls whose inputs
    are all weights run once, at record time."""

    def __init__(self, torch, layout, dtype, device="cuda"):
        self.torch, self.F = torch, torch.nn.functional
        self.layout, self.dtype = layout, {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dtype]
        self.env, self.tape, self.n, self.x, self.out = {}, [], 0, None, None
        self.device = device

    def _value(self, shape, fn, inputs):
        self.n += 1
        v = Value(self, self.n, shape)
        if all(i.key in self.env for i in inputs):            # weights only: fold now
            self.env[v.key] = fn(*[self.env[i.key] for i in inputs])
        else:
            self.tape.append((v.key, fn, [i.key for i in inputs]))
        return v

    def input(self, name, shape):
        self.n += 1
        self.x = Value(self, self.n, shape)
        return self.x

    def param(self, name, value):
        self.n += 1
        self.env[self.n] = self.torch.tensor(np.asarray(value), dtype=self.dtype, device=self.device)
        return Value(self, self.n, np.shape(value))

    def transpose(self, x, perm):
        return self._value([x.shape[p] for p in perm], lambda t: t.permute(*perm).contiguous(), [x])

    def conv2d(self, x, w, bias=None, stride=1, padding=0):
        k, r, s, c = w.shape                                       # KRSC (NHWC graphs)
        n, h, wd, _ = x.shape
        oh, ow = (h + 2 * padding - r) // stride + 1, (wd + 2 * padding - s) // stride + 1
        # the filter in OIHW channels_last once, at record time (a weight: folded), not at every call
        oihw = self._value((k, c, r, s), lambda f: f.permute(0, 3, 1, 2).contiguous(
            memory_format=self.torch.channels_last), [w])
        return self._value((n, oh, ow, k), lambda t, f: self.F.conv2d(t, f, stride=stride, padding=padding),
                           [x, oihw])

    def batch_norm(self, x, scale, shift, mean, variance, eps=1e-5):
        return self._value(x.shape, lambda t, a, b, m, v: self.F.batch_norm(t, m, v, a, b, False, 0.0, eps),
                           [x, scale, shift, mean, variance])

    def relu(self, x):
        return self._value(x.shape, self.F.relu, [x])

    def add(self, a, b):
        return self._value(a.shape, lambda p, q: p + q, [a, b])

    def max_pool2d(self, x, kernel, stride=None, padding=0):
        n, h, w, c = x.shape
        oh, ow = (h + 2 * padding - kernel) // stride + 1, (w + 2 * padding - kernel) // stride + 1
        return self._value((n, oh, ow, c), lambda t: self.F.max_pool2d(t, kernel, stride, padding), [x])

    def global_avg_pool(self, x):
        return self._value((x.shape[0], 1, 1, x.shape[3]), lambda t: self.F.adaptive_avg_pool2d(t, 1), [x])

    def flatten(self, x):
        return self._value((x.shape[0], int(np.prod(x.shape[1:]))), lambda t: t.flatten(1), [x])

    def linear(self, x, w, b):
        return self._value((x.shape[0], w.shape[0]), self.F.linear, [x, w, b])

    def output(self, y):
        self.out = y

    def forward(self, x):
        env = dict(self.env)
        env[self.x.key] = x
        for key, fn, inputs in self.tape:
            env[key] = fn(*[env[i] for i in inputs])
        return env[self.out.key]

    def module(self):
        """The tape as a torch.nn.Module in eval mode: the recorded values (weights, and what was folded from
        them) its buffers, forward(x) the tape. torch.compile's freezing folds buffers as it folds
        parameters."""
        torch, graph = self.torch, self
        used = {i for _, _, inputs in self.tape for i in inputs} | {self.out.key}
        keys = [k for k in self.env if k in used]

        class Tape(torch.nn.Module):
            def __init__(self):
                super().__init__()
                for k in keys:
                    self.register_buffer(f"v{k}", graph.env[k])

            def forward(self, x):
                env = {k: getattr(self, f"v{k}") for k in keys}
                env[graph.x.key] = x
                for key, fn, inputs in graph.tape:
                    env[key] = fn(*[env[i] for i in inputs])
                return env[graph.out.key]
        return Tape().eval()


def build(directory, target):
    import resnet
    from openprim import compiler
    os.makedirs(directory, exist_ok=True)
    meta = {}
    for name, kw in NETS.items():
        t0 = time.perf_counter()
        compiler.save(resnet.build(**kw), os.path.join(directory, name + ".oprim"), target)
        meta[name] = {**kw, "compile_s": time.perf_counter() - t0}
        print(f"{name}: compiled for {target} in {meta[name]['compile_s']:.1f} s")
    with open(os.path.join(directory, "nets.json"), "w") as f:
        json.dump(meta, f, indent=1)


def run(directory, rounds=5, iters=20):
    import resnet
    import torch
    runtime = import_runtime()
    torch.backends.cudnn.benchmark = True
    environment = peers_environment()
    rows = []
    for name, kw in json.load(open(os.path.join(directory, "nets.json"))).items():
        net = runtime.load(os.path.join(directory, name + ".oprim"))
        tg = TorchGraph(torch, kw["layout"], kw["dtype"])
        resnet.build(**{k: v for k, v in kw.items() if k != "compile_s"}, graph=tg)
        module = tg.module()
        x = np.random.default_rng(1).standard_normal(net.plan["values"][net.plan["inputs"][0]["value"]]["shape"])
        ours = np.asarray(net(x.astype(np.float32)), np.float64)
        xt = torch.tensor(x, dtype=tg.dtype, device="cuda").permute(0, 3, 1, 2).contiguous(
            memory_format=torch.channels_last)
        with torch.inference_mode():
            want = module(xt).double().cpu().numpy()
        peers = torch_peers(module, (xt,), dtype=tg.dtype)
        records = {k: p.record() for k, p in peers.items()}
        for k, p in peers.items():
            if not p.error:
                records[k]["rel_err"] = float(np.abs(p.output().double().cpu().numpy() - want).max() / np.abs(want).max())
        ms = medians(time_rounds({k: p.fn for k, p in peers.items() if not p.error}, rounds, iters,
                                 {k: p.mode for k, p in peers.items()}))
        for k in ms:
            records[k]["ms"] = ms[k]
        row = {"net": name, "ms": net.time_ms(repeat=20), "torch_eager_ms": ms.get(EAGER),
               "torch_compile_ms": ms.get(FREEZING), "torch_compile_s": peers[FREEZING].compile_s,
               "torch_peers": records, "best_torch": best_peer(ms), "our_compile_s": kw["compile_s"],
               "rel_err": float(np.abs(ours - want).max() / np.abs(want).max()),
               "top1_agree": float(np.mean(ours.argmax(1) == want.argmax(1))), "environment": environment}
        del peers
        release_peers()
        row["steps_ms"] = net.time_steps(repeat=10)
        rows.append(row)
        print(f"{name}: ours {row['ms']:.2f} ms; " + ", ".join(
            f"{k} {ms[k]:.2f} ms ({ms[k] / row['ms']:.2f}x, built in {records[k]['compile_s']:.0f} s)" if k in ms
            else f"{k} FAILED ({records[k].get('error')})" for k in TORCH_PEERS)
            + f"; max error {row['rel_err']:.1e} of the output scale, top-1 agreement {row['top1_agree']:.0%}")
        kinds = {}
        for step, t in zip(net.plan["steps"], row["steps_ms"]):
            kinds[step["kernel"].rsplit("_", 1)[0]] = kinds.get(step["kernel"].rsplit("_", 1)[0], 0.0) + t
        print("  time by kernel kind (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gpu_networks.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any("error" in r for row in rows for r in row["torch_peers"].values()) else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("build", "run"))
    ap.add_argument("dir")
    ap.add_argument("--target", default="nvvm:sm_90")
    ap.add_argument("--rounds", type=int, default=5, help="run: interleaved timing rounds of the torch peers")
    ap.add_argument("--iters", type=int, default=20, help="run: calls per timed round")
    a = ap.parse_args()
    sys.exit(build(a.dir, a.target) if a.mode == "build" else run(a.dir, a.rounds, a.iters))

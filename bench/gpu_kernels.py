"""GPU kernels against PyTorch (cuDNN) on the same GPU, in the same run.

    python bench/gpu_kernels.py build DIR [--target nvvm:sm_90]   # here: compile the cases (needs MLIR)
    python bench/gpu_kernels.py build DIR --only r50_ gemm --configs mma:2 wgmma:0   # also each case with a
                                        # tensor-core kernel and its configuration forced (gpu_mma.CONFIGS,
                                        # gpu_wgmma.CONFIGS), named CASE_mma2, CASE_wgmma0
    python bench/gpu_kernels.py run DIR                            # on the GPU machine: runtime + torch only

Cases: the ResNet-50 3x3 convolution N=32, C=K=128, 28x28 (fp32 and fp16, NCHW and NHWC) against
torch.nn.functional.conv2d with TF32 off and with PyTorch's default; ResNet-50's and MobileNetV2's layers; an 8192^3 GEMM (f16 and bf16 on tensor
cores) and a transformer layer's GEMMs (TRANSFORMER_GEMMS) against torch.matmul; and memory-bound kernels (relu,
batch norm, 3x3/s2 max pool, softmax over rows) as achieved bandwidth over a device-to-device copy.
Every case is also checked against torch in float64 on the same random input before it is timed.

The peer of a layer is PyTorch eager's own kernel for it: cuDNN's convolution (cudnn.benchmark on; NHWC cases in
channels_last with the filter in channels_last too, so that no layout copy runs per call; weights and biases
cast to the case's dtype once, not per call), cuBLAS's GEMM (torch.matmul), torch's relu, max pool and softmax.
It is timed with bench/timing.layer_ms: the calls captured back to back in a CUDA graph (triton's
do_bench_cudagraph, median), as ours is (time_ms with captured=20). $OUT/gpu_kernels.json names the peer of
each row and holds the torch/triton/cuDNN versions under environment.
"""
import argparse
import contextlib
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runtime_path import import_runtime  # noqa: E402
from timing import layer_ms, peers_environment  # noqa: E402

PEERS = {"conv": "cudnn", "dwpw": "cudnn", "gemm": "cublas", "relu": "torch", "max_pool3x3s2": "torch",
         "softmax": "torch"}   # the library behind PyTorch eager's call, per case kind

CONV = dict(n=32, c=128, h=28, w=28, k=128, r=3, stride=1, pad=1)
# The ResNet-50 layers of shared/notes/h200-baselines.md (fp16 and fp32 NHWC, batch 32).
RESNET50 = [dict(n=32, c=3, h=224, w=224, k=64, r=7, stride=2, pad=3), dict(n=32, c=64, h=56, w=56, k=64, r=1, stride=1, pad=0),
            dict(n=32, c=64, h=56, w=56, k=64, r=3, stride=1, pad=1), dict(n=32, c=64, h=56, w=56, k=256, r=1, stride=1, pad=0),
            dict(n=32, c=128, h=28, w=28, k=128, r=3, stride=1, pad=1),
            dict(n=32, c=256, h=14, w=14, k=256, r=3, stride=1, pad=1),
            dict(n=32, c=512, h=7, w=7, k=512, r=3, stride=1, pad=1),
            dict(n=32, c=1024, h=14, w=14, k=256, r=1, stride=1, pad=0)]
# ResNet-50 (v1.5) downsampling layers, strided (not in the baseline table; fp16 NHWC, batch 32).
RESNET50_STRIDED = [dict(n=32, c=128, h=56, w=56, k=128, r=3, stride=2, pad=1),
                    dict(n=32, c=256, h=56, w=56, k=512, r=1, stride=2, pad=0),
                    dict(n=32, c=256, h=28, w=28, k=256, r=3, stride=2, pad=1)]
# MobileNetV2's 1x1 convolutions at batch 32 (fp16 NHWC): its expansions and, from the depthwise outputs,
# its projections; memory-bound GEMMs with 16-320 output channels.
MOBILENET_V2_1X1 = [dict(n=32, c=c, h=h, w=h, k=k, r=1, stride=1, pad=0) for c, h, k in (
    (16, 112, 96), (24, 56, 144), (96, 14, 576), (32, 112, 16), (96, 56, 24), (144, 56, 24), (192, 28, 32),
    (384, 14, 64), (576, 14, 96), (960, 7, 160), (960, 7, 320), (320, 7, 1280))]
# MobileNetV2's depthwise 3x3 (bias, ReLU6) -> 1x1 projection (bias, residual where the block keeps its shape)
# pairs at batch 32 (fp16 NHWC): (C, H, stride, K, residual); one kernel where prim-select fuses them,
# two with --configs unfused.
MOBILENET_V2_PAIRS = [(32, 112, 1, 16, False), (96, 112, 2, 24, False), (144, 56, 1, 24, True), (144, 56, 2, 32, False),
                      (192, 28, 1, 32, True), (384, 14, 1, 64, True), (576, 14, 1, 96, True), (960, 7, 1, 160, True)]
GEMM_SIZE = 8192
# A transformer layer's GEMMs [M, K] x [K, N]: ViT-B/16 at batch 32 (M = 32 x 197 tokens) and BERT-base at
# batch 8 x 512 tokens; q/k/v and the out-projection 768 -> 768, the MLP 768 -> 3072 -> 768.
# A transformer layer's projections (ViT-B/16 at batch 32: 6304 rows; BERT-base 32 x 128 and GPT-2 8 x 512: 4096;
# BERT-base 8 x 128: 1024; a decode step of 16, 8 or 1 sequences: 16, 8, 1, with GPT-2's head, 768 -> 50264).
TRANSFORMER_GEMMS = [(m, k, n) for m in (6304, 4096, 1024, 16, 8, 1) for k, n in ((768, 768), (768, 3072), (3072, 768),
                                                                                   (768, 2304))] + \
    [(m, 768, 50264) for m in (16, 8, 1)]


def cases():
    """name -> (builder of the Graph, metadata the run side needs to build the torch reference)."""
    from openprim.pyfrontend import Graph
    rng = np.random.default_rng(0)
    out = {}
    def conv_case(p, dtype, layout, epilogue=False):
        w = rng.standard_normal((p["k"], p["c"], p["r"], p["r"])) * np.sqrt(2 / (p["c"] * p["r"] ** 2))
        bias = rng.standard_normal(p["k"]) * 0.1

        def conv():
            g = Graph(name="conv", layout=layout, dtype=dtype)
            shape = (p["n"], p["c"], p["h"], p["w"]) if layout == "NCHW" else (p["n"], p["h"], p["w"], p["c"])
            wt = g.param("w", w if layout == "NCHW" else w.transpose(0, 2, 3, 1))
            y = g.conv2d(g.input("x", shape), wt, bias=g.param("b", bias) if epilogue else None,
                         stride=p["stride"], padding=p["pad"])
            g.output(g.relu(y) if epilogue else y)
            return g
        return conv, {"kind": "conv", "dtype": dtype, "layout": layout, "conv": p, "w": w,
                      **({"bias": bias} if epilogue else {})}
    for dtype in ("f32", "f16"):
        for layout in ("NCHW", "NHWC"):
            out[f"conv3x3_{dtype}_{layout}"] = conv_case(CONV, dtype, layout)
    out["conv3x3_bias_relu_f16_NHWC"] = conv_case(CONV, "f16", "NHWC", epilogue=True)
    for dtype in ("f16", "f32"):
        for p in RESNET50:
            out[f"r50_{p['c']}x{p['h']}_k{p['k']}_{p['r']}x{p['r']}s{p['stride']}_{dtype}_NHWC"] = conv_case(p, dtype, "NHWC")
    for p in RESNET50_STRIDED:
        out[f"r50down_{p['c']}x{p['h']}_k{p['k']}_{p['r']}x{p['r']}s{p['stride']}_f16_NHWC"] = conv_case(p, "f16", "NHWC")
    for p in MOBILENET_V2_1X1:
        out[f"mnv2_{p['c']}x{p['h']}_k{p['k']}_1x1_f16_NHWC"] = conv_case(p, "f16", "NHWC")
    for c, h, stride, k, res in MOBILENET_V2_PAIRS:
        wd, bd = rng.standard_normal((c, 1, 3, 3)) * 0.3, rng.standard_normal(c) * 0.1
        wp, bp = rng.standard_normal((k, c, 1, 1)) / np.sqrt(c), rng.standard_normal(k) * 0.1

        def dwpw(c=c, h=h, stride=stride, k=k, res=res, wd=wd, bd=bd, wp=wp, bp=bp):
            g = Graph(name="dwpw", layout="NHWC", dtype="f16")
            x = g.input("x", (32, h, h, c))
            y = g.relu6(g.conv2d(x, g.param("wd", wd.transpose(0, 2, 3, 1)), g.param("bd", bd), stride=stride,
                                 padding=1, groups=c))
            y = g.conv2d(y, g.param("wp", wp.transpose(0, 2, 3, 1)), g.param("bp", bp))
            if res:
                y = y + g.input("r", (32, h // stride, h // stride, k))
            g.output(y)
            return g
        out[f"mnv2pair_{c}x{h}_s{stride}_k{k}{'_res' if res else ''}_f16_NHWC"] = (dwpw, {
            "kind": "dwpw", "dtype": "f16", "stride": stride, "wd": wd, "bd": bd, "wp": wp, "bp": bp})
    for dtype in ("f16", "bf16"):
        def gemm(dtype=dtype):
            g = Graph(name="gemm", dtype=dtype)
            g.output(g.matmul(g.input("a", (GEMM_SIZE, GEMM_SIZE)), g.input("b", (GEMM_SIZE, GEMM_SIZE))))
            return g
        out[f"gemm{GEMM_SIZE}_{dtype}"] = (gemm, {"kind": "gemm", "dtype": dtype})
    for m, k, n in TRANSFORMER_GEMMS:
        def tgemm(m=m, k=k, n=n):
            g = Graph(name="gemm", dtype="f16")
            g.output(g.matmul(g.input("a", (m, k)), g.input("b", (k, n))))
            return g
        out[f"tgemm_{m}x{k}x{n}_f16"] = (tgemm, {"kind": "gemm", "dtype": "f16", "mkn": [m, k, n]})
    shape = (32, 56, 56, 128)
    for dtype in ("f32", "f16"):
        def relu(dtype=dtype):
            g = Graph(name="relu", layout="NHWC", dtype=dtype)
            g.output(g.relu(g.input("x", shape)))
            return g

        def bn(dtype=dtype):
            g = Graph(name="bn", layout="NHWC", dtype=dtype)
            c = shape[3]
            prm = [g.param(n, v) for n, v in (("s", rng.uniform(0.5, 1.5, c)), ("b", rng.standard_normal(c)),
                                            ("m", rng.standard_normal(c)), ("v", rng.uniform(0.5, 1.5, c)))]
            g.output(g.batch_norm(g.input("x", shape), *prm))
            return g

        def pool(dtype=dtype):
            g = Graph(name="pool", layout="NHWC", dtype=dtype)
            g.output(g.max_pool2d(g.input("x", shape), 3, stride=2, padding=1))
            return g

        def softmax(dtype=dtype):
            g = Graph(name="softmax", dtype=dtype)
            g.output(g.softmax(g.input("x", (8192, 1000))))
            return g
        for name, fn in (("relu", relu), ("batch_norm", bn), ("max_pool3x3s2", pool), ("softmax", softmax)):
            out[f"{name}_{dtype}"] = (fn, {"kind": name, "dtype": dtype})
    return out


# --configs FAMILY:I forces a tensor-core kernel and its configuration I on the conv and GEMM cases.
FAMILIES = {"mma": ("conv_implicit_gemm_mma", "gemm_mma"), "wgmma": ("conv_implicit_gemm_wgmma", "gemm_wgmma"),
            "im2col": ("conv_im2col_gemm_wgmma", "gemm_wgmma"), "wino2": ("conv_winograd_f2x3_wgmma", "gemm_wgmma"),
            "wino4": ("conv_winograd_f4x3_wgmma", "gemm_wgmma"), "s2d": ("conv_space_to_depth_wgmma", "gemm_wgmma"),
            "gemv": ("conv_implicit_gemm_gpu", "gemv_gpu"), "gemvmma": ("conv_implicit_gemm_gpu", "gemv_mma")}


@contextlib.contextmanager
def forced_config(family, index, splits=None):
    """Cases compiled inside get `family`'s kernel with its configuration `index` (None: the kernel's
    heuristic; family None: the selection's choice) and, given, `splits` k splits; yields the solver to
    force per case kind."""
    from openprim.solvers import SOLVERS
    if family == "unfused":                   # prim-select keeps depthwise -> pointwise pairs apart
        fused = SOLVERS["conv_depthwise_pointwise_mma"]
        fused.is_applicable = lambda p, target: "left out: --configs unfused"
        try:
            yield {}
        finally:
            del fused.is_applicable
        return
    solvers = [SOLVERS[name] for name in FAMILIES[family]] if family else []
    for s in solvers if index is not None else ():
        s.default_params = lambda p, target: {"tile": index, **({"splits": splits} if splits else {})}
    try:
        yield {"conv": solvers[0].name, "gemm": solvers[1].name} if family else {}
    finally:
        for s in solvers if index is not None else ():
            del s.default_params


def build(directory, target, only=(), configs=()):
    from openprim import compiler
    from openprim.base.errors import OpenPrimError
    os.makedirs(directory, exist_ok=True)
    summary = {}
    variants = [(name, fn, meta, None) for name, (fn, meta) in cases().items()]
    variants += [(f"{name}_{c.replace(':', '')}", fn, {**meta, "weights_of": name}, c) for name, fn, meta, _ in list(variants)
                 for c in configs if (meta["kind"] == "dwpw") == (c == "unfused")
                 and meta["kind"] in ("conv", "gemm", "dwpw") and meta["dtype"] != "f32"]
    for name, fn, meta, config in variants:
        if only and not any(o in name for o in only):
            continue
        t0 = time.perf_counter()
        g = fn()
        family, _, index = (config or "").partition(":")
        index, _, splits = index.partition("x")
        with forced_config(family or None, int(index) if index else None, int(splits) if splits else None) as solver:
            try:
                compiler.save(g, os.path.join(directory, name + ".oprim"), target, solver=solver.get(meta["kind"], ""))
            except OpenPrimError as e:
                print(f"{name}: skipped ({str(e).splitlines()[0][:150]})")
                continue
        for key in ("w", "bias", "wd", "bd", "wp", "bp"):
            if key in meta and "weights_of" not in meta:  # a variant reads its case's files
                np.save(os.path.join(directory, f"{name}.{key}.npy"), np.float32(meta[key]))
        meta = {k: v for k, v in meta.items() if k not in ("w", "bias", "wd", "bd", "wp", "bp")}
        summary[name] = {**meta, "compile_s": time.perf_counter() - t0, "input": g.inputs[0].shape}
        print(f"{name}: compiled for {target} in {summary[name]['compile_s']:.2f} s")
    with open(os.path.join(directory, "cases.json"), "w") as f:
        json.dump(summary, f, indent=1)


def _once_per_dtype(torch, make):
    """make(dtype) computed at the first call with that dtype and kept: the weights of a peer in the dtype it
    is called in (the float64 reference, the case's dtype), cast once instead of at every timed call."""
    cache = {}

    def get(dtype):
        if dtype not in cache:
            cache[dtype] = make(dtype)
        return cache[dtype]
    return get


def torch_reference(torch, meta, x, directory, name):
    """The same computation with PyTorch on the GPU, for the given input (numpy, the case's layout): fn(xt, wt)
    and the filter (or None)."""
    F = torch.nn.functional
    kind = meta["kind"]
    if kind == "conv":
        name = meta.get("weights_of", name)
        w = torch.from_numpy(np.load(os.path.join(directory, name + ".w.npy")))
        bias_file = os.path.join(directory, name + ".bias.npy")
        bias = torch.from_numpy(np.load(bias_file)).cuda() if os.path.exists(bias_file) else None
        biases = _once_per_dtype(torch, lambda dtype: None if bias is None else bias.to(dtype))
        nhwc, p = meta["layout"] == "NHWC", meta["conv"]

        def fn(xt, wt):  # PyTorch eager: cuDNN's conv (with bias), then relu when the case has an epilogue
            y = F.conv2d(xt.permute(0, 3, 1, 2) if nhwc else xt, wt, biases(wt.dtype), stride=p["stride"],
                         padding=p["pad"])
            y = y if bias is None else F.relu(y)
            return y.permute(0, 2, 3, 1) if nhwc else y
        return fn, (w.contiguous(memory_format=torch.channels_last) if nhwc else w)
    if kind == "dwpw":   # relu6(depthwise(x) + bd) -> 1x1 + bp (run() adds the residual input to the reference)
        name = meta.get("weights_of", name)
        wd, bd, wp, bp = (torch.from_numpy(np.load(os.path.join(directory, f"{name}.{k}.npy"))).cuda()
                          for k in ("wd", "bd", "wp", "bp"))
        weights = _once_per_dtype(torch, lambda dtype: (
            wd.to(dtype).contiguous(memory_format=torch.channels_last), bd.to(dtype),
            wp.to(dtype).contiguous(memory_format=torch.channels_last), bp.to(dtype)))

        def pair(xt, _):
            cwd, cbd, cwp, cbp = weights(xt.dtype)
            h = F.relu6(F.conv2d(xt.permute(0, 3, 1, 2), cwd, cbd, stride=meta["stride"], padding=1,
                                 groups=cwd.shape[0]))
            return F.conv2d(h, cwp, cbp).permute(0, 2, 3, 1)
        return pair, None
    if kind == "gemm":
        return (lambda xt, yt: xt @ yt), None
    if kind == "relu":
        return (lambda xt, _: F.relu(xt)), None
    if kind == "max_pool3x3s2":
        return (lambda xt, _: F.max_pool2d(xt.permute(0, 3, 1, 2), 3, 2, 1).permute(0, 2, 3, 1)), None
    if kind == "softmax":
        return (lambda xt, _: torch.softmax(xt, -1)), None
    return None, None


def run(directory, only=(), skip=()):
    import torch
    import triton.testing
    runtime = import_runtime()
    summary = json.load(open(os.path.join(directory, "cases.json")))
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    rows = []
    # Device-to-device copy bandwidth (bytes read + written), the ceiling of the memory-bound kernels.
    big = torch.empty(1 << 28, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(big)
    copy_ms = triton.testing.do_bench(lambda: dst.copy_(big), return_mode="median")
    copy_gbs = 2 * big.numel() / copy_ms / 1e6
    print(f"device-to-device copy: {copy_gbs:.0f} GB/s")
    for name, meta in summary.items():
        if (only and not any(o in name for o in only)) or any(o in name for o in skip):
            continue
        net = runtime.load(os.path.join(directory, name + ".oprim"))
        rng = np.random.default_rng(1)
        feeds = [rng.standard_normal(net.plan["values"][i["value"]]["shape"]).astype(np.float32)
                 for i in net.plan["inputs"]]
        x = feeds[0]
        y = np.asarray(net(*feeds), np.float64)
        tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[meta["dtype"]]
        fn, w = torch_reference(torch, meta, x, directory, name)
        xt = torch.from_numpy(x).to(dev)
        if meta["kind"] == "gemm":  # the second input plays the weight; compare on the rounded inputs
            xt, w = xt.to(tdt).float(), torch.from_numpy(feeds[1]).to(tdt).float()
        row = {"case": name}
        print(f"timing {name}", flush=True)       # a failed launch names its case
        ms = net.time_ms(repeat=20, captured=20)   # back to back in a graph: no launch cost in short kernels
        if fn is not None:
            ref = fn(xt.double(), None if w is None else w.to(dev).double()).cpu().numpy()
            if meta["kind"] == "dwpw" and len(feeds) > 1:
                ref = ref + feeds[1]
            row["rel_err"] = float(np.abs(y - ref).max() / np.abs(ref).max())
            xq = xt.to(tdt)
            wq = None if w is None else w.to(dev).to(tdt).contiguous(
                memory_format=torch.channels_last if w.dim() == 4 and meta.get("layout") == "NHWC" else
                torch.contiguous_format)
            row["peer"] = PEERS[meta["kind"]]
            if meta["kind"] == "conv":
                torch.backends.cudnn.allow_tf32 = False
                row["torch_ms_no_tf32"] = layer_ms(lambda: fn(xq, wq))
                torch.backends.cudnn.allow_tf32 = True
            row["torch_ms"] = layer_ms(lambda: fn(xq, wq))
        row["ms"] = ms
        if meta["kind"] in ("conv", "gemm"):
            if meta["kind"] == "conv":
                p = meta["conv"]
                oh = (p["h"] + 2 * p["pad"] - p["r"]) // p["stride"] + 1
                flops = 2 * p["n"] * p["k"] * oh * oh * p["c"] * p["r"] * p["r"]
                if name.startswith("mnv2_"):      # memory-bound: input, filter and output bytes over the copy's
                    nbytes = 2 * (x.size + p["k"] * p["c"] + p["n"] * oh * oh * p["k"])
                    row["gbs"] = nbytes / ms / 1e6
                    row["of_copy"] = row["gbs"] / copy_gbs
            else:
                flops = 2 * float(np.prod(meta.get("mkn", [GEMM_SIZE] * 3)))
            row["tflops"] = flops / ms / 1e9
        elif meta["kind"] == "dwpw":        # bytes: the input, the output and the residual
            row["gbs"] = 2 * (x.size + y.size * len(feeds)) / ms / 1e6
            row["of_copy"] = row["gbs"] / copy_gbs
        else:
            item = 4 if meta["dtype"] == "f32" else 2
            out_elems = int(np.prod(net.plan["values"][net.plan["outputs"][0]]["shape"]))
            nbytes = (x.size + out_elems) * item
            row["gbs"] = nbytes / ms / 1e6
            row["of_copy"] = row["gbs"] / copy_gbs
        rows.append(row)
        print(json.dumps(row))
    for dtype, key in (("f16", "torch_ms"), ("f32", "torch_ms_no_tf32"), ("f32", "torch_ms")):
        ratios = [r[key] / r["ms"] for r in rows
                  if r["case"].startswith("r50_") and f"_{dtype}_" in r["case"] and r["case"].endswith("_NHWC")]
        if ratios:
            print(f"ResNet-50 layers ({dtype} NHWC): geometric mean {np.exp(np.mean(np.log(ratios))):.2f}x cuDNN"
                  f"{' without TF32' if key.endswith('tf32') else (' (TF32)' if dtype == 'f32' else '')}")
    print(f"\n{'case':36s} {'ours ms':>9s} {'torch ms':>9s} {'ratio':>6s}  extra")
    for r in rows:
        ratio = r["torch_ms"] / r["ms"] if "torch_ms" in r else float("nan")
        extra = ", ".join(([f"{r['tflops']:.1f} TFLOP/s"] if "tflops" in r else [])
                          + ([f"{r['gbs']:.0f} GB/s = {r['of_copy']:.0%} of copy"] if "gbs" in r else [])
                          + ([f"vs cuDNN no-TF32 {r['torch_ms_no_tf32'] / r['ms']:.2f}x"] if "torch_ms_no_tf32" in r else []))
        print(f"{r['case']:36s} {r['ms']:9.3f} {r.get('torch_ms', float('nan')):9.3f} {ratio:6.2f}  {extra}"
              f"  err {r.get('rel_err', float('nan')):.1e}")
    out = os.environ.get("OUT")
    if out:
        json.dump({"environment": peers_environment(), "timing": "bench/timing.layer_ms (CUDA graph, median)",
                   "copy_gbs": copy_gbs, "rows": rows}, open(os.path.join(out, "gpu_kernels.json"), "w"), indent=1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("build", "run"))
    ap.add_argument("dir")
    ap.add_argument("--target", default="nvvm:sm_90")
    ap.add_argument("--only", nargs="*", default=(), help="build or run only the cases whose names contain these")
    ap.add_argument("--skip", nargs="*", default=(), help="run: leave out the cases whose names contain these")
    ap.add_argument("--configs", nargs="*", default=(),
                    help="also build the f16/bf16 conv and GEMM cases with a tensor-core kernel and its "
                         "configuration forced: mma:I (gpu_mma.CONFIGS[I]) or wgmma:I (gpu_wgmma.CONFIGS[I]), wgmma:IxS "
                         "with S k splits; without :I, the kernel's heuristic; "
                         "im2col, wino2, wino4: im2col + GEMM and Winograd F(2x2)/F(4x4) on wgmma; "
                         "s2d[:I]: space-to-depth on wgmma (few-channel convolutions: the stem)")
    a = ap.parse_args()
    build(a.dir, a.target, a.only, a.configs) if a.mode == "build" else run(a.dir, a.only, a.skip)

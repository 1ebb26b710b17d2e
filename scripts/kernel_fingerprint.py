"""Fingerprints of the generated kernels of a few bench networks, for "no change in code generation" checks.

    python scripts/kernel_fingerprint.py OUT.json            # compile and hash
    python scripts/kernel_fingerprint.py OUT.json --against BEFORE.json   # and compare (exit 1 on a change)

Each network is saved as an `.oprim` artifact per target; the hash is over each member (kernels.so, .ptx,
.cubin, .hsaco, weights.bin) and over the plan of the manifest (the compiler version line left out).
CPU shared objects are linked by the host `cc`; their bytes are deterministic for one machine.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import zipfile
from pathlib import Path

import openprim.compiler

# Choices from the heuristic alone: an empty tuning database, whatever the user database holds.
os.environ["OPENPRIM_USER_DB_PATH"] = os.path.join(tempfile.mkdtemp(prefix="openprim-fp-"), "none.sqlite")
os.environ["OPENPRIM_FIND_MODE"] = "immediate"

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))  # model files import their neighbours (mobilenetv2 -> resnet)
# (example file, build() keywords, targets): small enough to compile on two cores in a few minutes.
CASES = [
    ("resnet.py", dict(depth=18, batch=1, size=64), ("cpu",)),
    ("resnet.py", dict(depth=50, batch=2, size=64, layout="NHWC", dtype="f16"),
     ("nvvm:sm_90", "nvvm:sm_80", "rocdl:gfx942", "rocdl:gfx1100")),
    ("mobilenetv2.py", dict(batch=1, size=64), ("cpu",)),
    ("mobilenetv2.py", dict(batch=2, size=64, layout="NHWC", dtype="f16"), ("nvvm:sm_90", "rocdl:gfx942")),
    # attention (masked, through the ONNX importer): the flash kernels on the GPUs, the fused rows on the CPU
    ("transformer_models.py", dict(model="bert_encoder_layer", batch=2, seq=64, masked=1, via="onnx"), ("cpu",)),
    ("transformer_models.py", dict(model="bert_encoder_layer", batch=2, seq=64, masked=1, via="onnx", dtype="f16"),
     ("nvvm:sm_90", "nvvm:sm_80", "rocdl:gfx942")),
]


def _example(name):
    spec = importlib.util.spec_from_file_location(name[:-3], ROOT / "examples" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fingerprints() -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for file, kwargs, targets in CASES:
            for target in targets:
                key = f"{file}:{','.join(f'{k}={v}' for k, v in kwargs.items())}@{target}"
                path = str(Path(d) / "net.oprim")
                openprim.compiler.save(_example(file).build(**kwargs), path, target=target)
                with zipfile.ZipFile(path) as z:
                    members = {n: hashlib.sha256(z.read(n)).hexdigest() for n in z.namelist() if n != "manifest.json"}
                    manifest = json.loads(z.read("manifest.json"))
                plan = {k: v for k, v in manifest["plan"].items() if k != "compiler"}
                members["plan"] = hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()
                out[key] = members
                print(key, " ".join(f"{n}={h[:12]}" for n, h in sorted(members.items())), flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--against", help="an earlier output of this script to compare with")
    args = ap.parse_args()
    now = fingerprints()
    Path(args.out).write_text(json.dumps(now, indent=1, sort_keys=True))
    if args.against:
        before = json.loads(Path(args.against).read_text())
        changed = [f"{k} {m}" for k in sorted(set(before) | set(now))
                   for m in sorted(set(before.get(k, {})) | set(now.get(k, {})))
                   if before.get(k, {}).get(m) != now.get(k, {}).get(m)]
        print("\n".join(["changed:"] + changed) if changed else "identical: every member of every case")
        sys.exit(1 if changed else 0)


if __name__ == "__main__":
    main()

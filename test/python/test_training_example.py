"""examples/train_resnet.py (issue 31, a training example) at a tiny size: its training function trains the same
ResNet eagerly and through torch.compile(backend=openprim_backend) for 10 steps; OpenPrim's loss curve follows
eager's within 1e-3 relative, the loss decreases, and both graphs ran compiled (no eager fallback). Skipped
without torch.

    python -m pytest test/python/test_training_example.py -q
"""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("torch")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import train_resnet  # noqa: E402

STEPS = 10


def test_tiny_training_matches_eager():
    # 16 samples of 8x8, batches of 8: the same two batches again and again, so that 10 steps lower the loss
    r = train_resnet.run(steps=STEPS, batch=8, size=8, width=4, train_size=16, noise=0.5, lr=0.05, evaluate=False,
                         reference=False, log=lambda *_: None)
    eager, ours = r["losses"]["eager"], r["losses"]["openprim"]
    assert len(eager) == len(ours) == STEPS
    assert not r["openprim_warnings"], r["openprim_warnings"]
    counts = r["openprim_counts"]
    assert counts.get("forward compiled") == counts.get("backward compiled") == 1, counts
    assert counts.get("forward runs") == counts.get("backward runs") == STEPS, counts
    assert not counts.get("forward eager") and not counts.get("backward eager"), counts
    assert r["curve"]["max_rel_diff"] <= 1e-3, (r["curve"]["per_step"], eager, ours)
    # the loss decreases: the last three steps' mean well below the first three's
    assert sum(ours[-3:]) < 0.75 * sum(ours[:3]), ours
    assert sum(eager[-3:]) < 0.75 * sum(eager[:3]), eager

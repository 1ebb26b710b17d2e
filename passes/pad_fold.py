"""A zero pad folded into the convolution that reads it: prim-fuse's rewrite of prim.conv2d.

conv2d(pad(x, value 0, only H and W padded), padding p) -> conv2d(x, padding p + the pad's), since
a convolution's own padding is zeros too. Exporters of TensorFlow-style "same" padding write such a pad
before every strided or depthwise layer (Hugging Face's MobileNetV1/V2 as `nn.functional.pad`): each was a
copy of the whole map, 150 us of MobileNetV2's 490 at 96x96 on the CPU.
"""
from __future__ import annotations

from mlir import ir

from openprim import dialect

from .rewrite import producer, rebuild

SPATIAL = {"NCHW": (2, 3), "NHWC": (1, 2)}


def fold_pad_into_conv(conv: ir.Operation) -> bool:
    """Fold the zero pad before one convolution (module docstring); whether it did. The pad stays where
    something else reads it."""
    pad = producer(conv.operands[0], "prim.pad")
    if pad is None:
        return False
    ca, pa = dialect.op_attrs(conv), dialect.op_attrs(pad)
    rank = len(pad.result.type.shape)
    pads, (h, w) = list(pa["pads"]), SPATIAL[ca["layout"]]
    if pa["value"] != 0.0 or rank != 4 or \
            any(pads[d] or pads[rank + d] for d in range(rank) if d not in (h, w)):
        return False
    top, left, bottom, right = ca["padding"]
    padding = [top + pads[h], left + pads[w], bottom + pads[rank + h], right + pads[rank + w]]
    with ir.InsertionPoint(conv), conv.location:
        folded = rebuild(conv, [pad.operands[0], *dialect.operand_groups(conv)[1:]], {"padding": padding},
                         conv.location)
    conv.result.replace_all_uses_with(folded.result)
    conv.erase()
    if not list(pad.result.uses):
        pad.erase()
    return True

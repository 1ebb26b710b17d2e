"""SiLU as exporters spell it, mul(x, sigmoid(x)), matched into one silu(x): prim-fuse's rewrite of prim.mul.

ONNX before opset 22 has no SiLU (Swish), so exports write a Sigmoid and a Mul: EfficientNet's every
activation. Either operand order matches, while the sigmoid's result is used only by the multiply. As one
activation, the silu then becomes the epilogue of the convolution or GEMM before it (epilogues.py).
"""
from __future__ import annotations

from mlir import ir

from .rewrite import create, producer, single_use


def match_silu(mul: ir.Operation) -> bool:
    """mul(x, sigmoid(x)) (either order, the sigmoid used there only) -> silu(x): exporters spell SiLU/Swish so
    (ONNX before opset 22, EfficientNet's every activation), and as one activation it becomes the epilogue of
    the convolution or GEMM before it."""
    for i, v in enumerate(mul.operands):
        sig = producer(v, "prim.sigmoid")
        if sig is None or not single_use(v) or sig.operands[0] != mul.operands[1 - i] or \
                tuple(v.type.shape) != tuple(mul.result.type.shape):
            continue
        with ir.InsertionPoint(mul), mul.location:
            silu = create("silu", [sig.operands[0]], mul.result.type.shape, mul.result, {}, mul.location)
        mul.result.replace_all_uses_with(silu)
        mul.erase()
        sig.erase()
        return True
    return False

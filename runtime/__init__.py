"""OpenPrim's runtime: loads and runs compiled networks with numpy and ctypes only (never MLIR).

    from openprim.runtime import load
    net = load("resnet18.oprim")
    y = net(x)
"""
from .artifact import load

__all__ = ["load"]

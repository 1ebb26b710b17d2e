"""ONNX in OpenPrim's frontend: `import_model` (ONNX -> Graph).

Installed as `openprim.pyfrontend.onnx`: `from openprim.pyfrontend.onnx import import_model`. It only builds a
Graph and imports neither the compiler nor MLIR; the `onnx.backend.base.Backend` that compiles is in the driver
layer: `import openprim.onnx_backend`.
"""
from .importer import import_model

__all__ = ["import_model"]

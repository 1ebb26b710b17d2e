"""ONNX in OpenPrim: `import_model` (ONNX -> Graph) and `backend` (onnx.backend.base.Backend).

Installed as `openprim.onnx`: `from openprim.onnx import import_model`, `import openprim.onnx.backend`.
"""
from .importer import import_model

__all__ = ["import_model"]

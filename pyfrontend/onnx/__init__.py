"""ONNX in OpenPrim: `import_model` (ONNX -> Graph) and `backend` (onnx.backend.base.Backend).

Installed as `openprim.pyfrontend.onnx`: `from openprim.pyfrontend.onnx import import_model`, `import openprim.pyfrontend.onnx.backend`.
"""
from .importer import import_model

__all__ = ["import_model"]

"""PyTorch in OpenPrim's frontend: `import_exported` (torch.export.ExportedProgram -> Graph) and `import_file`
(a `.pt2` file saved with torch.export.save -> Graph).

Installed as `openprim.pyfrontend.torch`, the counterpart of `openprim.pyfrontend.onnx`. It only builds a
Graph and imports neither the compiler nor MLIR; what compiles (`compile_module`, the torch.compile backend)
is in the driver layer: `openprim.torch_backend`. Importing it without torch installed is one OpenPrimError
that says what to install. Training: `aot.import_graph_module` imports AOTAutograd's forward and backward
graphs, whose training ops `backward` maps (torch.compile with gradients).
"""
from . import backward as _backward  # noqa: F401 - adds the training ops (AOTAutograd's graphs) to the importer's table
from .importer import SUPPORTED_OPS, import_exported, import_file, unsupported_ops

__all__ = ["SUPPORTED_OPS", "import_exported", "import_file", "unsupported_ops"]

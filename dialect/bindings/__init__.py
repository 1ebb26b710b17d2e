"""Python modules that MLIR's bindings look up per dialect namespace (see prim.py)."""

"""The base layer, imported by every other one (the runtime included): errors, dtypes, the prim op table,
the targets and their chip facts, and the compiler's version. Plain Python and numpy: no MLIR."""
__version__ = "0.1.0"

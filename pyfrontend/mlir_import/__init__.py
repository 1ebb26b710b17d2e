"""Importers of MLIR-level input: the one room of the frontend that may import MLIR and `openprim.dialect`.

A Graph is plain data (pyfrontend/graph.py, no MLIR), and the other importers build Graphs without MLIR.
Input that is already MLIR (prim modules, and later StableHLO, TOSA or linalg on tensors) is parsed and
converted with the MLIR bindings, so its importers live here; test/python/test_layering.py declares this
package a room (ROOMS) whose modules may import `dialect` and `mlir` besides the frontend's own layers.
Nothing outside the room imports it at module level: the registry (pyfrontend/importers) does so when a
file of its suffix is loaded, so building or importing a Graph still needs no MLIR.

An importer here returns what the compiler takes: a prim `ir.Module` (openprim.compile and
compiler.save accept one as they do a Graph), or a Graph where the input maps onto one.

    prim.load(path)      a `.mlir` file holding a prim-dialect module, parsed and verified
"""

"""The `prim` dialect's module for MLIR's Python bindings: no op classes (prim ops are generic OpViews).

The bindings import `<search prefix>.<namespace>` whenever they wrap an op of a namespace they have not
loaded yet, and do not remember a failed import: without this module, every wrap of a prim op retried
`mlir.dialects.prim` (about 50,000 failing imports, 5 s, in prim-fuse on ResNet-50). The dialect
package adds `openprim.dialect.bindings` to the search prefixes.
"""

"""Hand-written CPU kernels (vector dialect on memrefs)."""

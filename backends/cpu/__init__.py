"""The CPU backend: LLVM dialect lowering, llc and the link (compiler.py)."""

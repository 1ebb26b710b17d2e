"""The NVIDIA backend: NVVM lowering, PTX and cubin (compiler.py)."""

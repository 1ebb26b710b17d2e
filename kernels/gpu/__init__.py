"""Portable GPU kernels in the gpu dialect (NVIDIA and AMD): the SIMT GEMM, row reductions, pooling, transposes."""

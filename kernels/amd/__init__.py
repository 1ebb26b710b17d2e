"""AMD matrix-core kernels: MFMA (CDNA) and WMMA (RDNA3)."""

"""NVIDIA tensor-core kernels: mma.sync (sm_80+) and the sm_90 warpgroup MMA families."""

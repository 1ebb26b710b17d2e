"""The AMD matrix-core solvers: MFMA on CDNA, WMMA on RDNA3, for implicit-GEMM convolutions and GEMMs
(kernels/amd/mma.py) and flash attention (kernels/amd/flash_attention.py). The four GEMM classes differ
only by instruction family and operation: they are made from a table (AMD_SOLVERS)."""
from __future__ import annotations

from openprim.kernels.amd import flash_attention as amd_flash
from openprim.kernels.amd import mma as gpu_amd_mma
from openprim.solvers.base import AttentionSolver
from openprim.solvers.gpu_simt import ConvImplicitGemmGpu, GemmGpu


class AmdMatrixSolver:
    """Mixin: the AMD matrix-core kernel (kernels/amd/mma.py) for f16/bf16 where its 16-byte row loads apply,
    on the chips of its instruction family (MFMA: CDNA gfx90a/gfx942/gfx950; WMMA: RDNA3 gfx1100/gfx1101);
    every other chip and dtype keeps the SIMT kernel. Efficiency is relative to the fp32 SIMT peak that
    the roofline uses (MFMA f16: 8-16x it on CDNA; WMMA: about 2x on RDNA3)."""
    targets = ("rocdl",)
    family = ""

    def is_applicable(self, p, target):
        return super().is_applicable(p, target) or gpu_amd_mma.arch_reason(target, self.family, self.name) \
            or gpu_amd_mma.applicable(self.kernel_spec(p))

    def tunables(self, p):
        return {"tile": list(range(len(gpu_amd_mma.TILES[self.family])))}

    def tables(self):
        return {"tile": tuple(gpu_amd_mma.TILES[self.family])}

    def default_params(self, p, target):
        """The 128x128 block where it is filled (N >= 128) and still gives every compute unit a block,
        else 64x64 (32x32x8 MFMA tiles: the fewest instructions per k step)."""
        m, n = self.gemm_shape(p)
        g = p.groups if self.op == "conv2d" else 1           # a grouped problem: one GEMM per group
        n //= g
        big = n >= 128 and -(-m // 128) * -(-n // 128) * g >= target.chip.units
        return {"tile": 0 if big else 1}

    def tile_columns(self, p, target) -> int:
        return list(gpu_amd_mma.TILES[self.family].values())[self.default_params(p, target)["tile"]].bn

    def kernel(self, r):
        tile = list(gpu_amd_mma.TILES[self.family].values())[r.params["tile"]]
        return gpu_amd_mma.mma_kernel(r.name, r.signature, self.spec(r.problem, r.attrs), tile)


def _amd_solver(cls_name, family, op_base, name, efficiency, doc):
    """A solver class: AmdMatrixSolver's kernel of `family` for op_base's operation (ConvImplicitGemmGpu:
    conv2d, GemmGpu: matmul)."""
    return type(cls_name, (AmdMatrixSolver, op_base), {
        "__module__": __name__, "__qualname__": cls_name, "__doc__": doc,
        "name": name, "family": family, "efficiency": efficiency})


# family x operation -> (class name, family, operation base, solver name, efficiency, docstring), in the
# order SOLVERS lists them.
AMD_SOLVERS = [_amd_solver(*row) for row in (
    ("ConvImplicitGemmMfma", "mfma", ConvImplicitGemmGpu, "conv_implicit_gemm_mfma", 4.0,
     "Implicit-GEMM convolution on CDNA matrix cores (v_mfma_f32_32x32x8 / 16x16x16, f32 accumulators)."),
    ("GemmMfma", "mfma", GemmGpu, "gemm_mfma", 4.0,
     "matmul / linear on CDNA matrix cores."),
    ("ConvImplicitGemmWmma", "wmma", ConvImplicitGemmGpu, "conv_implicit_gemm_wmma", 1.0,
     "Implicit-GEMM convolution on RDNA3 matrix cores (v_wmma_f32_16x16x16, wave32, f32 accumulators)."),
    ("GemmWmma", "wmma", GemmGpu, "gemm_wmma", 1.0,
     "matmul / linear on RDNA3 matrix cores."),
)]
ConvImplicitGemmMfma, GemmMfma, ConvImplicitGemmWmma, GemmWmma = AMD_SOLVERS


class AttentionFlashMfma(AttentionSolver):
    """prim.attention as one flash-attention kernel on CDNA's MFMA (kernels/amd/flash_attention.py: the
    products transposed, P^T from the score registers): f16/bf16, head dims 64 and 128, causal or not,
    an optional additive mask. Costed like the MFMA GEMMs."""
    name = "attention_flash_mfma"
    targets = ("rocdl",)
    family = "mfma"
    efficiency = 4.0
    query_rows = 128        # every tile of amd_flash.TILES

    def is_applicable(self, p, target):
        return gpu_amd_mma.arch_reason(target, self.family, self.name) or amd_flash.applicable(p.dtype, p.d)

    def tunables(self, p):
        return {"tile": list(range(len(amd_flash.TILES[self.family])))}

    def tables(self):
        return {"tile": tuple(amd_flash.TILES[self.family])}

    def default_params(self, p, target):
        return {"tile": 0}

    def kernel(self, r):
        tile = list(amd_flash.TILES[self.family].values())[r.params["tile"]]
        return amd_flash.attention_kernel(r.name, r.signature, r.attrs["scale"], bool(r.attrs["causal"]),
                                          r.attrs["layout"], tile)


class AttentionFlashWmma(AttentionFlashMfma):
    """prim.attention as one flash-attention kernel on RDNA3's WMMA (wave32; P^T's other half of each 16
    keys from the partner lane)."""
    name = "attention_flash_wmma"
    family = "wmma"
    efficiency = 1.0

"""Compilation targets and the facts about their chips, in one table (IREE's KnownTargets is the model).

A target is written `cpu` (this machine's CPU), `cpu:<mcpu>` (an LLVM CPU name: cpu:znver4, cpu:skylake-avx512;
cpu:x86-64-v2/v3/v4 for the psABI levels, portable across CPUs of the level; cpu:native, this CPU by name),
`nvvm:<sm_XX>` (NVIDIA: PTX, plus a cubin when ptxas is installed) or `rocdl:<gfxNNN>` (AMD: a code object).
`parse_target` reads that text once; every pass, solver, kernel emitter, the tuning database and the runtime's
architecture check take the `Target` it returns (or its str(), which parses back to the same Target).

Adding a GPU architecture is one row of CHIPS. The figures rank solvers against each other and size tiles; they
come from the vendors' datasheets (units, shared memory, registers) and from our own measurements (rates).
This module is plain data: the runtime imports it on machines without MLIR.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from openprim.base.errors import OpenPrimError

KIB = 1024


@dataclass(frozen=True)
class Chip:
    """What the compiler knows about one architecture."""
    vendor: str               # "cpu", "nvidia" or "amd"
    isa: str                  # instruction set family: "x86-64"/"aarch64", "ptx", "cdna1-3"/"rdna2-4"
    matrix_core: str          # "none", "mma.sync", "wgmma", "mfma", "wmma-gfx11", "wmma-gfx12"
    units: int                # streaming multiprocessors (NVIDIA) or compute units (AMD); 0 for the CPU
    wave: int                 # lanes of a warp / wavefront
    shared_per_block: int     # bytes of shared memory (LDS) one block may allocate
    shared_per_unit: int      # bytes of shared memory (LDS) per multiprocessor / compute unit
    registers_per_unit: int   # 32-bit registers per multiprocessor / compute unit (SIMD VGPR files together)
    gflops: float             # fp32 SIMT peak, GFLOP/s (roofline costs)
    bandwidth: float          # memory bandwidth, GB/s (roofline costs)
    triple: str
    data_layout: str = ""     # LLVM data layout ("" on the CPU: the host's, from llc)
    ptx_arch: str = ""        # NVIDIA: the PTX/ptxas architecture, when not the row's own (sm_90 -> sm_90a)


_NVPTX = ("nvptx64-nvidia-cuda", "e-p6:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64")
_AMDGCN = ("amdgcn-amd-amdhsa",
           "e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-p8:128:128:128:48-"
           "p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-"
           "v2048:2048-n32:64-S32-A5-G1-ni:7:8:9")


def _nv(matrix_core, units, shared_block_kib, shared_unit_kib, gflops, bandwidth, ptx_arch=""):
    return Chip("nvidia", "ptx", matrix_core, units, 32, shared_block_kib * KIB, shared_unit_kib * KIB, 65536,
                gflops, bandwidth, *_NVPTX, ptx_arch)


def _amd(isa, matrix_core, units, wave, lds_kib, gflops, bandwidth):
    # VGPR files per CU: CDNA 4 SIMDs x 512 x 64 lanes; RDNA 2 SIMDs x 1024 (RDNA2) or 1536 (RDNA3+) x 32 lanes
    registers = 4 * 512 * 64 if wave == 64 else 2 * (1024 if isa == "rdna2" else 1536) * 32
    return Chip("amd", isa, matrix_core, units, wave, lds_kib * KIB, lds_kib * KIB, registers, gflops, bandwidth,
                *_AMDGCN)


# Rates: fp32 GFLOP/s and GB/s per family (sm_8x, sm_9x, CDNA, RDNA); the cost model only ranks with them.
CHIPS: dict[tuple[str, str], Chip] = {
    ("cpu", ""): Chip("cpu", "host", "none", 0, 1, 0, 0, 0, 100.0, 10.0, "host"),
    #                          matrix core  SMs  smem/block smem/SM  GFLOP/s  GB/s
    ("nvvm", "sm_80"): _nv("mma.sync", 108, 163, 164, 19500.0, 1900.0),    # A100
    ("nvvm", "sm_86"): _nv("mma.sync", 84, 99, 100, 19500.0, 1900.0),      # RTX 3090 Ti / A40
    ("nvvm", "sm_89"): _nv("mma.sync", 142, 99, 100, 19500.0, 1900.0),     # L40S
    # sm_90 code uses wgmma and TMA, which only the arch-specific sm_90a has (it runs on sm_90 GPUs only)
    ("nvvm", "sm_90"): _nv("wgmma", 132, 227, 228, 60000.0, 4300.0, "sm_90a"),   # H100 / H200
    ("nvvm", "sm_90a"): _nv("wgmma", 132, 227, 228, 60000.0, 4300.0),
    #                              ISA    matrix core    CUs  wave  LDS KiB  GFLOP/s  GB/s
    ("rocdl", "gfx90a"): _amd("cdna2", "mfma", 110, 64, 64, 80000.0, 5300.0),          # MI250X (one die)
    ("rocdl", "gfx942"): _amd("cdna3", "mfma", 304, 64, 64, 80000.0, 5300.0),          # MI300X
    ("rocdl", "gfx950"): _amd("cdna4", "mfma", 256, 64, 160, 80000.0, 5300.0),         # MI355X
    ("rocdl", "gfx1030"): _amd("rdna2", "none", 80, 32, 64, 60000.0, 900.0),           # RX 6900 XT
    ("rocdl", "gfx1100"): _amd("rdna3", "wmma-gfx11", 96, 32, 64, 60000.0, 900.0),     # RX 7900 XTX
    ("rocdl", "gfx1101"): _amd("rdna3", "wmma-gfx11", 60, 32, 64, 60000.0, 900.0),     # RX 7800 XT
    ("rocdl", "gfx1200"): _amd("rdna4", "wmma-gfx12", 32, 32, 64, 60000.0, 900.0),     # RX 9060 XT
}
KINDS = ("cpu", "nvvm", "rocdl")

# x86-64 instruction set extensions, by LLVM's feature names, that generated code may use: what a CPU
# artifact records it needs (manifest "cpu_features") and the runtime checks against /proc/cpuinfo.
# The microarchitecture levels are the psABI's; a named CPU needs at least its level (plus the listed extras).
_V2 = ("cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3")
_V3 = _V2 + ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
_V4 = _V3 + ("avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl")
X86_LEVELS = {"x86-64": (), "x86-64-v2": _V2, "x86-64-v3": _V3, "x86-64-v4": _V4}
_CPU_FEATURES = {
    **dict.fromkeys(("nehalem", "westmere", "sandybridge", "ivybridge", "btver2", "bdver1", "bdver2"), _V2),
    **dict.fromkeys(("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "znver1", "znver2",
                     "znver3"), _V3),
    **dict.fromkeys(("skylake-avx512", "cascadelake", "icelake-client", "icelake-server", "tigerlake",
                     "rocketlake"), _V4 + ("avx512vnni",)),
    "cooperlake": _V4 + ("avx512vnni", "avx512bf16"),
    "sapphirerapids": _V4 + ("avx512vnni", "avx512bf16", "avx512fp16", "amx-tile", "amx-bf16", "amx-int8"),
    **dict.fromkeys(("znver4", "znver5"), _V4 + ("avx512vnni", "avx512bf16")),
}
X86_FEATURES = tuple(sorted(set(_V4) | {f for fs in _CPU_FEATURES.values() for f in fs}))
# LLVM feature -> its flag in /proc/cpuinfo, where the kernel names it differently
CPUINFO_FLAGS = {"sse3": "pni", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "bmi": "bmi1", "lzcnt": "abm",
                 "sahf": "lahf_lm", "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16",
                 "avx512vnni": "avx512_vnni", "amx-tile": "amx_tile", "amx-bf16": "amx_bf16",
                 "amx-int8": "amx_int8"}


def cpu_features(mcpu: str) -> tuple[str, ...] | None:
    """The x86-64 features code generated for LLVM CPU `mcpu` may use (a level's, or a named CPU's at least),
    or None for a CPU this table does not know (its artifacts record none, and the runtime checks none)."""
    return X86_LEVELS.get(mcpu, _CPU_FEATURES.get(mcpu))


@functools.lru_cache(None)
def host_cpu_features() -> frozenset[str]:
    """The x86-64 extensions (LLVM names, X86_FEATURES) this CPU has, from /proc/cpuinfo; empty where it
    cannot be read or the CPU is not x86-64."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        return frozenset()
    flags = set(line.partition(":")[2].split())
    return frozenset(f for f in X86_FEATURES if CPUINFO_FLAGS.get(f, f) in flags)


@functools.lru_cache(None)
def host_cpu() -> str:
    """LLVM's name for this CPU (znver4, sapphirerapids): what plain `cpu` compiles for. From llvmlite, an
    optional dependency; without it "native" (llc -mcpu=native picks the same CPU)."""
    try:
        import llvmlite.binding as llb
    except ImportError:
        return "native"
    return llb.get_host_cpu_name()


def archs(kind: str) -> tuple[str, ...]:
    """The architectures of one target kind, in table order."""
    return tuple(arch for k, arch in CHIPS if k == kind)


@dataclass(frozen=True)
class Target:
    """A code generator and a chip. `arch` is "" for the host CPU, an LLVM CPU name, sm_XX or gfxNNN."""
    kind: str          # "cpu", "nvvm" or "rocdl"
    arch: str = ""

    def __str__(self):
        return f"{self.kind}:{self.arch}" if self.arch else self.kind

    @property
    def chip(self) -> Chip:
        return CHIPS[(self.kind, "" if self.kind == "cpu" else self.arch)]

    @property
    def concrete(self) -> Target:
        """The target with its chip named: `cpu` and `cpu:native` are this machine's CPU (cpu:znver4), whose
        code, measurements and cached artifacts are valid for that CPU only; every other target is itself."""
        return Target("cpu", host_cpu()) if self.kind == "cpu" and self.arch in ("", "native") else self

    @property
    def is_gpu(self) -> bool:
        return self.kind != "cpu"

    @property
    def vector_lanes(self) -> int:
        """f32 lanes of the CPU's widest vector register, which the CPU kernels' register tiles are built
        of: 16 with AVX-512 (32 registers of 16), else 8 (AVX2: 16 registers of 8). `cpu` and `cpu:native`
        are this machine's CPU; a CPU the feature table does not know gets 8."""
        features = host_cpu_features() if self.arch in ("", "native") else cpu_features(self.arch) or ()
        return 16 if "avx512f" in features else 8

    @property
    def wave(self) -> int:
        """Threads that execute in lockstep: 32 on NVIDIA and RDNA (gfx10+), 64 on CDNA (gfx9)."""
        return self.chip.wave

    @property
    def rates(self) -> tuple[float, float]:
        """(fp32 GFLOP/s, GB/s) for the roofline costs."""
        return self.chip.gflops, self.chip.bandwidth

    @property
    def matrix_core(self) -> str:
        return self.chip.matrix_core

    @property
    def ptx_arch(self) -> str:
        """The PTX/ptxas architecture (sm_90 compiles as sm_90a)."""
        return self.chip.ptx_arch or self.arch

    @property
    def isa_version(self) -> int:
        """The AMD device libraries' __oclc_ISA_version: gfx942 -> 9402, gfx90a -> 9010, gfx1100 -> 11000."""
        digits = self.arch[3:]
        return int(digits[:-2]) * 1000 + int(digits[-2], 16) * 100 + int(digits[-1], 16)

    def runs_on(self, device_arch: str) -> str | None:
        """None when code for this target runs on a device of `device_arch` (as the driver names it: sm_90,
        gfx942), else why not. NVIDIA code runs on its architecture and newer, except arch-specific PTX
        (sm_XXa: wgmma, TMA), which runs on exactly that architecture; AMD code objects run on their chip."""
        if self.kind == "nvvm":
            have = int(device_arch[3:].rstrip("a"))
            specific = self.ptx_arch.endswith("a")
            if have < int(self.arch[3:].rstrip("a")) or (specific and device_arch != self.ptx_arch[:-1]):
                return f"compiled for {self.arch}, but the GPU is {device_arch}"
            return None
        if self.kind == "rocdl":
            return None if device_arch == self.arch else f"compiled for {self.arch}, but the GPU is {device_arch}"
        return f"target '{self}' does not run on a GPU"


def parse_target(text) -> Target:
    """`cpu`, `cpu:<mcpu>`, `nvvm:<sm_XX>` or `rocdl:<gfxNNN>` (a Target passes through)."""
    if isinstance(text, Target):
        return text
    text = str(text).strip()
    kind, _, arch = text.partition(":")
    if kind == "cpu":
        if not arch and text != "cpu" or not all(c.isalnum() or c in "-_." for c in arch):
            raise OpenPrimError(f"target '{text}': expected cpu or cpu:<llvm cpu name>, e.g. cpu:znver4")
        return Target("cpu", arch)
    if kind not in KINDS:
        raise OpenPrimError(f"unknown target '{text}'; targets: cpu, nvvm:<{'|'.join(archs('nvvm'))}>, "
                            f"rocdl:<{'|'.join(archs('rocdl'))}>, cpu:<llvm cpu name>")
    if arch not in archs(kind):
        raise OpenPrimError(f"target '{text}': unsupported {kind} architecture '{arch}'; "
                            f"supported: {', '.join(archs(kind))}")
    return Target(kind, arch)

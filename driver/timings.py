"""Where compile time goes: seconds per stage, and the slowest kernels (`openprim compile --timings`).

The driver runs the pipeline's stages one by one when it times them (prim-pipeline is exactly their
sequence, so the result is the same), prim-tile reports the seconds each kernel took to build, and the
backend its serialization steps (CPU: LLVM IR translation, llc on the parts in parallel, the link).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class CompileTimings:
    stages: dict[str, float] = field(default_factory=dict)     # stage -> seconds, in order
    kernels: dict[str, float] = field(default_factory=dict)    # kernel -> seconds to build it (prim-tile)
    kernel_count: int = 0                                      # distinct kernels
    step_count: int = 0                                        # kernel launches of the plan

    @contextmanager
    def stage(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.stages[name] = self.stages.get(name, 0.0) + time.perf_counter() - t0

    def seconds(self) -> dict[str, float]:
        """The executable's `compile_seconds`: passes (emission and the prim-* stages), codegen (the plan and
        the backend), load (making the executable)."""
        passes = sum(v for k, v in self.stages.items() if k == "emit" or k.startswith("prim-"))
        load = self.stages.get("load", 0.0)
        return {"passes": passes, "codegen": sum(self.stages.values()) - passes - load, "load": load}

    def report(self, slowest: int = 5) -> str:
        total = sum(self.stages.values())
        lines = [f"compile time {total:.2f} s: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.stages.items()),
                 f"{self.kernel_count} distinct kernels for {self.step_count} steps"]
        if self.kernels:
            top = sorted(self.kernels.items(), key=lambda kv: -kv[1])[:slowest]
            lines.append(f"slowest kernels to build ({sum(self.kernels.values()):.2f} s for all): "
                         + ", ".join(f"{k} {v:.2f} s" for k, v in top))
        return "\n".join(lines)

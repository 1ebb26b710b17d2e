"""The device interface every GPU driver implements (CUDA in cuda.py, HIP in hip.py).

A compiled GPU network needs only these operations: load a code object, look a kernel up, allocate,
copy, launch, synchronize, and time with events; for device arrays and graph replay also streams,
device-to-device copies, events between streams, which device a pointer belongs to, and stream capture
into a graph that is replayed with one launch. Kernel arguments are all 64-bit: device pointers
(memrefs use the bare-pointer convention) and index/i64 scalars. Streams are plain ints (the CUstream /
hipStream_t handle, as frameworks hand them out); None is the device's default stream.
"""
from __future__ import annotations

import numpy as np

from openprim.base.errors import OpenPrimError


class DeviceError(OpenPrimError):
    """The driver is missing, there is no such device, or a driver call failed."""


class Device:
    """One GPU of one vendor. Drivers raise DeviceError with the failing call and the driver's message."""

    kind = ""          # "cuda" or "hip"
    index = 0          # the device's ordinal
    DEFAULT_SHARED = 48 * 1024   # dynamic shared memory a launch may use without allow_shared

    def arch(self) -> str:
        """The device's architecture as targets name it: 'sm_90', 'gfx942', ..."""
        raise NotImplementedError

    def name(self) -> str:
        raise NotImplementedError

    def make_current(self) -> None:
        """Make this device the calling thread's: driver calls act on a per-thread current context or
        device, and a thread that never used this one (a server's worker) has none or another."""
        raise NotImplementedError

    def load_module(self, image: bytes):
        """A loaded code object (PTX/cubin for CUDA, hsaco for HIP)."""
        raise NotImplementedError

    def function(self, module, name: str):
        raise NotImplementedError

    def alloc(self, nbytes: int) -> int:
        """A device pointer to nbytes (at least 256-byte aligned)."""
        raise NotImplementedError

    def free_memory(self) -> int | None:
        """Bytes of device memory free now, None where the driver does not say."""
        return None

    def free(self, ptr: int) -> None:
        raise NotImplementedError

    def copy_to_device(self, dst: int, src: np.ndarray) -> None:
        raise NotImplementedError

    def copy_to_host(self, dst: np.ndarray, src: int) -> None:
        raise NotImplementedError

    def copy_device_to_device(self, dst: int, src: int, nbytes: int, stream: int | None = None) -> None:
        """Enqueue a copy between two device pointers on `stream` (asynchronous)."""
        raise NotImplementedError

    def host_buffer(self, nbytes: int) -> np.ndarray:
        """nbytes of host memory (uint8) that asynchronous copies can use: page-locked where the driver has
        it (free_host_buffer gives it back); plain numpy memory here, with the copies below synchronous."""
        return np.empty(nbytes, np.uint8)

    def free_host_buffer(self, buffer: np.ndarray) -> None:
        """Give back a host_buffer."""

    def copy_to_device_async(self, dst: int, src: np.ndarray, stream: int | None = None) -> None:
        """Enqueue a copy from a contiguous view of a host_buffer on `stream` (the buffer must stay
        unchanged until the stream has run it)."""
        self.copy_to_device(dst, src)

    def copy_to_host_async(self, dst: np.ndarray, src: int, stream: int | None = None) -> None:
        """Enqueue a copy into a contiguous view of a host_buffer on `stream` (read it after synchronizing)."""
        self.stream_synchronize(stream)
        self.copy_to_host(dst, src)

    def pointer_device(self, ptr: int) -> int | None:
        """The ordinal of the GPU whose memory `ptr` points into; None for host or unknown memory."""
        raise NotImplementedError

    def launch(self, function, grid: tuple[int, int, int], block: tuple[int, int, int], args: list[int],
               shared_bytes: int = 0, stream: int | None = None) -> None:
        """Launch on `stream` (None: the device's stream); every argument is passed as a 64-bit value."""
        raise NotImplementedError

    def create_stream(self) -> int:
        """A new stream that does not synchronize with the legacy default stream (graphs are captured on it)."""
        raise NotImplementedError

    def destroy_stream(self, stream: int) -> None:
        raise NotImplementedError

    def check_stream(self, stream: int) -> None:
        """DeviceError unless `stream` is a stream of this device's context."""
        raise NotImplementedError

    def stream_synchronize(self, stream: int | None) -> None:
        raise NotImplementedError

    def create_event(self) -> int:
        """An event without timing, to order streams."""
        raise NotImplementedError

    def record(self, event: int, stream: int | None) -> None:
        raise NotImplementedError

    def wait_event(self, stream: int | None, event: int) -> None:
        """Work enqueued on `stream` after this waits for `event`."""
        raise NotImplementedError

    def wait(self, stream: int | None, other: int | None) -> None:
        """Work enqueued on `stream` after this waits for what is enqueued on `other` now."""
        event = self.create_event()
        self.record(event, other)
        self.wait_event(stream, event)
        self.destroy_event(event)

    def destroy_event(self, event: int) -> None:
        raise NotImplementedError

    def capture(self, stream: int, enqueue) -> tuple:
        """(graph, executable graph) of what enqueue() puts on `stream`, captured (not run) and instantiated."""
        raise NotImplementedError

    def graph_launch(self, graph_exec, stream: int | None) -> None:
        """Replay an instantiated graph on `stream`."""
        raise NotImplementedError

    def is_capturing(self, stream: int | None) -> bool:
        """Whether `stream` is being captured into a graph now (by this runtime or by a framework around it)."""
        raise NotImplementedError

    def destroy_graph(self, graph, graph_exec) -> None:
        raise NotImplementedError

    updates_graph_args = False   # whether graph_kernel_nodes / set_graph_kernel_args are implemented

    def graph_kernel_nodes(self, graph) -> list:
        """The kernel nodes of a graph captured from one stream, in launch order."""
        raise NotImplementedError

    def set_graph_kernel_args(self, graph_exec, node, function, grid, block, args: list[int], shared_bytes: int) -> None:
        """Give one kernel node of an instantiated graph new arguments, for its later launches."""
        raise NotImplementedError

    def allow_shared(self, function, nbytes: int) -> None:
        """Let `function` launch with nbytes of dynamic shared memory (above DEFAULT_SHARED)."""
        raise DeviceError(f"{self.kind}: kernels with {nbytes} bytes of dynamic shared memory are not supported")

    def tensor_map(self, address: int, spec: dict) -> int:
        """The device address of a TMA tensor map over `address` (spec: see backends/nvvm/compiler.py _tensor_map)."""
        raise DeviceError(f"{self.kind}: TMA tensor maps need an NVIDIA sm_90 GPU")

    def synchronize(self) -> None:
        raise NotImplementedError

    def elapsed_ms(self, fn, repeat: int = 1, stream: int | None = None) -> float:
        """Milliseconds between a start and a stop event recorded on `stream` around `repeat` calls of fn()."""
        raise NotImplementedError

    def create_timing_event(self) -> int:
        """An event that takes the time when its stream reaches it (record), for event_ms; destroy_event frees it."""
        raise NotImplementedError

    def event_ms(self, start: int, end: int) -> float:
        """Milliseconds from timing event `start` to `end`, both recorded and completed (synchronize first)."""
        raise NotImplementedError

    def function_attributes(self, function) -> dict:
        """Registers, shared/local bytes, max threads of a loaded kernel, where the driver reports them."""
        return {}

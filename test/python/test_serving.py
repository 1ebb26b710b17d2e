"""One compiled network called from several threads at once, as a web server or a data loader calls it.

Every result must be bitwise equal to the single-thread result for the same input: a CPU executable once
owned one arena, so concurrent calls overwrote each other's intermediates (29 of 30 calls wrong, issue
29). Checked on a compiled conv net (odd sizes; a residual keeps an intermediate live across layers; its
kernels run OpenMP teams inside) directly and through compile_module, and on a hand-made plan whose
kernel holds every caller inside it at once, which pins down the pool: N callers in flight make exactly
N arenas, and later calls reuse them. The GPU check needs a GPU and MLIR and skips elsewhere.
"""
import ctypes
import threading

import numpy as np
import pytest

import openprim
from openprim.pyfrontend import Graph
from openprim.runtime.executor import CpuExecutable

THREADS, CALLS = 4, 20
SHAPE = (2, 5, 13, 11)


def concurrently(fn, inputs, threads=THREADS) -> list:
    """[fn(x) for x in inputs], the calls spread over `threads` threads that start together."""
    results, errors = [None] * len(inputs), []
    start = threading.Barrier(threads)

    def work(k):
        start.wait()
        try:
            for i in range(k, len(inputs), threads):
                results[i] = fn(inputs[i])
        except BaseException as e:  # noqa: BLE001 - reported in the main thread
            errors.append(e)
    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]
    return results


def conv_net(target="cpu"):
    """conv-relu, conv + residual, relu, max pool, strided conv: intermediates that live in the arena."""
    r = np.random.default_rng(29)
    g = Graph(layout="NCHW")
    x = g.input("x", SHAPE)
    y = g.relu(g.conv2d(x, g.param("w1", r.standard_normal((7, 5, 3, 3)) / 4), g.param("b1", r.standard_normal(7)),
                        padding=1))
    z = g.conv2d(y, g.param("w2", r.standard_normal((7, 7, 3, 3)) / 6), padding=1)
    y = g.max_pool2d(g.relu(g.add(y, z)), 3, stride=2, padding=1)
    g.output(g.conv2d(y, g.param("w3", r.standard_normal((9, 7, 3, 3)) / 6), stride=2))
    return openprim.compile(g, target=target)


@pytest.fixture(scope="module")
def net():
    return conv_net()


def test_threads_get_the_single_thread_results(net, rng):
    inputs = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(THREADS * CALLS)]
    want = [net(x) for x in inputs]
    got = concurrently(net, inputs)
    wrong = [i for i, (a, b) in enumerate(zip(got, want)) if not np.array_equal(a, b)]
    assert not wrong, f"{len(wrong)} of {len(inputs)} concurrent calls differ from the single-thread result"
    assert 1 <= net.arenas <= THREADS


def test_compile_module_from_threads(rng):
    torch = pytest.importorskip("torch")
    from openprim.torch_backend import compile_module
    torch.manual_seed(29)
    model = torch.nn.Sequential(torch.nn.Conv2d(5, 7, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(7, 6, 3, stride=2), torch.nn.ReLU(),
                                torch.nn.Conv2d(6, 9, 1)).eval()
    run = compile_module(model, (torch.zeros(SHAPE),))
    inputs = [torch.from_numpy(rng.standard_normal(SHAPE).astype(np.float32)) for _ in range(THREADS * CALLS)]
    want = [run(x) for x in inputs]
    got = concurrently(run, inputs)
    wrong = [i for i, (a, b) in enumerate(zip(got, want)) if not torch.equal(a, b)]
    assert not wrong, f"{len(wrong)} of {len(inputs)} concurrent calls differ from the single-thread result"


def held_plan(n):
    """(plan, kernel_address, keepalive) of x -> t = x (its kernel returns once n calls are inside it at
    once) -> y = 2 t: every caller is in flight at the same time, each with its own t."""
    inside = threading.Barrier(n)
    values = [{"shape": [3], "dtype": "f32", "storage": "arena", "offset": o} for o in (0, 64, 128)]
    plan = {"version": 2, "values": values, "inputs": [{"name": "x", "value": 0}], "outputs": [2],
            "steps": [{"kernel": "hold", "args": [0, 1]}, {"kernel": "double", "args": [1, 2]}],
            "arena_bytes": 192, "weights_bytes": 0}

    def f32(address):
        return np.ctypeslib.as_array((ctypes.c_float * 3).from_address(address))

    def hold(x, t):
        f32(t)[:] = f32(x)
        inside.wait(timeout=60)

    def double(t, y):
        f32(y)[:] = 2 * f32(t)
    kernels = {name: ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(fn)
               for name, fn in (("hold", hold), ("double", double))}
    return plan, lambda name: ctypes.cast(kernels[name], ctypes.c_void_p).value, kernels


def test_pool_makes_one_arena_per_call_in_flight():
    plan, kernel_address, kernels = held_plan(THREADS)
    exe = CpuExecutable(plan, kernel_address, b"", keepalive=kernels)
    assert exe.arenas == 1
    for r in range(3):
        inputs = [np.full(3, 10 * r + i, np.float32) for i in range(THREADS)]
        got = concurrently(exe, inputs)
        assert all(np.array_equal(y, 2 * x) for x, y in zip(inputs, got))
        assert exe.arenas == THREADS, "N callers in flight at once: N arenas, reused by the next rounds"


@pytest.mark.gpu
def test_gpu_threads_on_their_own_streams(rng):
    from openprim.runtime.arrays import DeviceArray
    from openprim.runtime.cuda import CudaDevice
    from openprim.runtime.device import DeviceError
    try:
        sm = CudaDevice().arch()
    except DeviceError as e:
        pytest.skip(f"no NVIDIA GPU here: {e}")
    exe = conv_net(f"nvvm:{'sm_90' if sm >= 'sm_90' else 'sm_80'}")
    inputs = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(THREADS * CALLS)]
    want = [exe(x) for x in inputs]
    assert all(np.array_equal(exe(x), w) for x, w in zip(inputs[:3], want)), "numpy calls are deterministic"
    got = concurrently(exe, inputs)                       # numpy in and out
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    streams, mine = [exe.device.create_stream() for _ in range(THREADS)], threading.local()

    def on_own_stream(x):                                 # device arrays, run_into on the thread's stream
        if not hasattr(mine, "stream"):
            exe.device.make_current()                     # this thread allocates and copies before its call
            mine.stream = streams.pop()
        dx, dy = DeviceArray(exe.device, SHAPE, "f32"), DeviceArray(exe.device, want[0].shape, "f32")
        exe.device.copy_to_device(dx.pointer, x)
        exe.device.synchronize()                          # the host copy has landed before our stream reads it
        exe.run_into([dx], [dy], stream=mine.stream)
        return dy.numpy()                                 # waits for the thread's stream
    got = concurrently(on_own_stream, inputs)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))

"""Fleet tuning on Ray: the layers of many models measured by every machine of a Ray cluster at once, into one
tuning database, exactly once and resumable (issue 33). `openprim tune MODEL... --ray [ADDRESS]`, and
`tune_fleet` from Python.

The work. Each distinct layer (find.layers: every conv2d direction a solver serves, and the matmuls; one
layer shared by several models is tuned once) has a find.Search, the very decisions of the serial `openprim
tune`: the heuristic's choice first (the reference), the solvers' defaults, then all of a small space or greedy
descent, then the leaders re-timed. A layer asks for one candidate at a time, and all layers ask at once, so
the cluster always has work. A candidate (problem x solver x parameters) becomes two Ray tasks:

    compile   a task on any CPU (`compile_task`, num_cpus=1): find's worker program (the driver's find_worker,
              a process of its own in each Ray worker, so that a candidate that crashes LLVM kills it and not
              the Ray worker) lowers the candidate module and returns its .oprim artifact;
    measure   a method of the device's measurer (`Measurer`, a Ray actor holding one unit of the chip's
              resource): its own find worker loads the artifact, runs it on the seeded inputs, checks the
              output against the reference's (find.mismatch) and times it (find_worker.time_candidate).

One measurer per device. Each measurer holds one unit of the resource of its chip kind, "openprim_cpu:<mcpu>"
(e.g. openprim_cpu:znver4) or "openprim_gpu:<arch>" (openprim_gpu:sm_90, plus one Ray GPU), so no two
timings ever share a device; a CPU target has one measurer per machine that offers the resource (the local
cluster: one), and its timings take the machine's measurement lock exclusively (tuning/lock.py) while compiles
take it shared, as in serial tuning. Without an address, `tune_fleet` starts a local cluster: ray.init with
num_cpus = --workers (default: every core), the measurer resource of this machine's chip, no dashboard, a small
object store. A layer is measured on one measurer throughout (its times compare on one device).

The budget. A layer's search runs against its own clock: the sum of the seconds its candidates took (compile
plus measurement, as the tasks report them), not the wall clock, so a layer gets the same amount of search as
`openprim tune --budget B` gives it serially, whatever the size of the cluster and however long its requests
waited in Ray's queues.

Exactly once. Ray retries a compile task whose worker dies (max_retries) and restarts a dead measurer and
re-runs its method (max_restarts, max_task_retries); a candidate's result reaches this process once, and its
record is keyed by (problem, arch, solver, parameters), the database's primary key, so it is stored once. The
results of each round are merged into the user database (or `db`) in one sqlite transaction, as they arrive;
the confirmed medians replace them when a layer ends. A run that is interrupted and started again reads what
the database holds for each layer and resumes: a stored candidate counts as measured (its stored time, no
cost to the budget, not re-timed), so only what is missing is measured; the reference's outputs, which the
checks need, are recomputed (not stored again) when a new candidate needs them. A Ledger actor counts each
task's attempts, so that the progress line says which worker lost a task that Ray retried.

Test hooks: $OPENPRIM_FLEET_FAULT="compile@N,measure@M" kills, once each (marker files in a directory of the
run), the Ray worker that runs task N's compile (os._exit) and the measurer when it starts task M (tasks are
numbered as they are submitted: a candidate's compile and measurement share a number, a re-timing has its
own), to check the retries; tune_fleet's `on_result` follows each measurement (a test interrupts a run there).
"""
from __future__ import annotations

import collections
import contextlib
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field

from openprim.base.errors import OpenPrimError
from openprim.base.target import Target, parse_target
from openprim.pyfrontend import Graph, importers
from openprim.runtime.gpu import open_device
from openprim.solvers.problem import problem_of

from . import db as tuning_db
from . import find, lock

RAY = "ray==2.60.0"
OBJECT_STORE_BYTES = 200 * 2**20     # the local cluster's object store: candidates' texts and artifacts pass
COMPILE_RETRIES = 3                  # a compile task whose worker dies runs again elsewhere, this many times
MEASURER_RESTARTS = 3                # a measurer that dies is restarted, its method run again, this many times
FAULT_ENV = "OPENPRIM_FLEET_FAULT"


def resource(target: Target) -> str:
    """The Ray resource of the target's chip kind that a measurer holds one unit of."""
    t = target.concrete
    return f"openprim_{'gpu' if t.is_gpu else 'cpu'}:{t.arch}"


def local_devices(target: Target) -> int:
    """The devices of this machine that can time `target`: the CPU (1), or the GPUs of its kind found here."""
    if not target.is_gpu:
        return 1
    n = 0
    while n < 64:
        try:
            open_device(target, n)
        except OpenPrimError:
            break
        n += 1
    return n


def local_cluster(target: Target, workers: int | None = None) -> dict:
    """ray.init's arguments of the local cluster for `target`: a new one (even where this machine is part of a
    cluster started by `ray start`), `workers` CPUs (default: every core), this machine's devices as the
    measurer resource, no dashboard, the workers' logs not sent here, a small object store."""
    return dict(address="local", num_cpus=workers or os.cpu_count() or 1,
                resources={resource(target): local_devices(target)},
                include_dashboard=False, log_to_driver=False, object_store_memory=OBJECT_STORE_BYTES,
                logging_level="error")


def _ray():
    try:
        import ray
    except ImportError:
        raise OpenPrimError(f"fleet tuning needs Ray: pip install '{RAY}' (or pip install 'openprim[fleet]')") from None
    return ray


def _me() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# ------------------------------------------------------------------------------------------------------ tasks
# Plain functions and classes, made Ray tasks and actors by tune_fleet (Ray is optional): the Ray workers
# import this module by name.

_compiler = None   # this Ray worker's find worker (a process): started by its first compile task


def _started(ledger, kind: str, seq: int, name: str | None = None) -> str:
    """Tell the ledger that this worker (`name`, default host:pid) starts an attempt of task (kind, seq); its name."""
    import ray
    name = name or _me()
    ray.get(ledger.start.remote(kind, seq, name))
    return name


def _fault(fault: dict | None, kind: str, seq: int) -> None:
    """The test hook ($OPENPRIM_FLEET_FAULT): task `seq` of `kind` kills this process, once."""
    if not fault or fault.get(kind) != seq:
        return
    try:
        os.close(os.open(os.path.join(fault["dir"], f"{kind}-{seq}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os._exit(1)


def compile_task(text: str, target: str, seq: int, ledger, fault: dict | None) -> dict:
    """Compile a candidate module into its .oprim artifact in this Ray worker's find worker: {"artifact": bytes
    or None, "error": why not, "compile_s": seconds, "worker": name}."""
    global _compiler
    name = _started(ledger, "compile", seq)
    _fault(fault, "compile", seq)
    t0 = time.monotonic()
    with lock.working(parse_target(target)):   # CPU: computes under the shared measurement lock, as a tuner
        try:
            if _compiler is None or _compiler.poll() is not None:
                _compiler = find.start_worker()
            data, seconds = find.ask(_compiler, ("compile", text, target))
            return dict(artifact=data, error=None, compile_s=seconds, worker=name)
        except OpenPrimError as e:   # it does not compile (or crashed the worker): just not a candidate
            return dict(artifact=None, error=str(e), compile_s=time.monotonic() - t0, worker=name)


class Ledger:
    """Every task's attempts, by (kind, seq): who started each one. An attempt that is not the last one was
    lost with its worker, and Ray ran the task again."""

    def __init__(self):
        self.starts: dict[tuple, list[str]] = {}

    def start(self, kind: str, seq: int, worker: str) -> int:
        self.starts.setdefault((kind, seq), []).append(worker)
        return len(self.starts[(kind, seq)])

    def retried(self) -> dict[tuple, list[str]]:
        return {k: v for k, v in self.starts.items() if len(v) > 1}


class Measurer:
    """The one process that times candidates on its device (a Ray actor holding one unit of the chip's
    resource; a GPU's also holds the Ray GPU, which Ray makes the only one it sees). Its find worker loads each
    candidate's artifact, runs and times it under the device's exclusive measurement lock, and keeps the
    executables of the leaders to time them again without loading."""

    def __init__(self, target: str, ledger: str, fault: dict | None, omp_threads: str | None = None):
        import ray
        # Ray gives an actor without CPUs OMP_NUM_THREADS=1: a CPU kernel would be timed on one thread (2x slower
        # on 2 cores than `openprim tune` times it). The worker times with the threads the driver's would have.
        if omp_threads is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp_threads
        self.target, self.parsed, self.fault = target, parse_target(target), fault
        self.ledger = ray.get_actor(ledger)   # by name: a restarted measurer finds it again
        self.worker, self.kept, self.busy = None, set(), 0.0
        ids = ray.get_gpu_ids() if self.parsed.is_gpu else []
        self.device = (0, int(ids[0])) if ids else (0, 0)   # the GPU's index here, and on its machine (the lock)
        self.name = f"measurer {_me()}"

    def arch(self) -> str:
        return tuning_db.arch_of(self.parsed)

    def _run(self, digest: str, compiled: dict, keep: set) -> tuple:
        """(outputs, seconds) of the artifact, from the worker (restarted when a candidate killed it); `busy`
        learns the seconds the worker worked on it (loading, running, timing; its wait for the lock left out)."""
        self.busy = 0.0
        if compiled["error"]:
            raise OpenPrimError(compiled["error"])
        with lock.working(self.parsed):
            if self.worker is None or self.worker.poll() is not None:
                self.worker, self.kept = find.start_worker(), set()
            data = None if digest in self.kept else compiled["artifact"]
            try:
                reply = find.ask(self.worker, ("artifact", digest, data, self.target, keep, self.device))
            except OpenPrimError:
                if self.worker.poll() is not None:
                    self.kept = set()
                raise
            self.kept = (self.kept | {digest}) & (keep | {digest})
            out, seconds, self.busy = reply
            return out, seconds

    def _info(self, compiled: dict, t0: float, **more) -> dict:
        return dict(compile_s=compiled["compile_s"], measure_s=self.busy, wall_s=time.monotonic() - t0,
                    worker=compiled["worker"],
                    compiled=compiled["error"] is None, measurer=self.name, **more)

    def reference(self, seq: int, digest: str, compiled: dict, keep: set):
        """(outputs or None, info): the reference, whose outputs check the layer's other candidates."""
        _started(self.ledger, "measure", seq, self.name)
        _fault(self.fault, "measure", seq)
        t0 = time.monotonic()
        try:
            out, seconds = self._run(digest, compiled, keep)
            return out, self._info(compiled, t0, seconds=seconds, error=None)
        except OpenPrimError as e:
            return None, self._info(compiled, t0, seconds=None, error=str(e))

    def measure(self, seq: int, digest: str, compiled: dict, reference, dtype: str, keep: set) -> dict:
        """info: seconds (None: it failed, error says why: no compile, a crash, a wrong output)."""
        _started(self.ledger, "measure", seq, self.name)
        _fault(self.fault, "measure", seq)
        t0 = time.monotonic()
        try:
            if reference is None:
                raise OpenPrimError("the reference (the heuristic's choice) could not be measured")
            out, seconds = self._run(digest, compiled, keep)
            wrong = find.mismatch(out, reference, dtype)
            return self._info(compiled, t0, seconds=None if wrong else seconds, error=wrong)
        except OpenPrimError as e:
            return self._info(compiled, t0, seconds=None, error=str(e))

    def retime(self, seq: int, digest: str, compiled: dict, keep: set) -> dict:
        """A measured candidate timed again (kept: no load)."""
        _started(self.ledger, "measure", seq, self.name)
        _fault(self.fault, "measure", seq)
        t0 = time.monotonic()
        try:
            return self._info(compiled, t0, seconds=self._run(digest, compiled, keep)[1], error=None)
        except OpenPrimError as e:
            return self._info(compiled, t0, seconds=None, error=str(e))


# ------------------------------------------------------------------------------------------------ the driver

@dataclass
class Layer:
    """One distinct layer's search in the fleet."""
    op: object
    key: str
    count: int
    models: list
    search: find.Search = None
    steps: object = None
    measurer: int = 0
    work: float = 0.0                  # its clock: seconds of compile + measurement its candidates took
    reference_out: object = None       # the ObjectRef of the reference's outputs
    compiled: dict = field(default_factory=dict)   # config key -> compile ObjectRef (the leaders': re-timing)
    digests: dict = field(default_factory=dict)    # config key -> candidate digest
    measured: list = field(default_factory=list)   # config keys measured by this run
    rows: list = field(default_factory=list)       # records not yet written
    error: str | None = None
    done: bool = False


@dataclass
class Worker:
    done: int = 0
    failed: int = 0
    retried: int = 0


@dataclass
class FleetReport:
    """What a fleet run did: per layer (problem, count, models, best and reference Results, configs: results,
    measured: measured by this run, stored: read from the database, seconds: its clock, error) and the totals."""
    layers: list
    target: str
    arch: str
    db: str
    wall_s: float = 0.0
    tasks: int = 0               # compile + measure tasks submitted
    measured: int = 0            # candidates measured (not stored before)
    reference_reruns: int = 0    # references run again for their outputs only (resumed layers)
    stored: int = 0              # candidates found in the database (not measured again)
    failed: int = 0              # candidates that did not compile, crashed, or gave a wrong output
    retried: int = 0             # task attempts lost with their worker and run again by Ray
    lost: int = 0                # candidates whose result never came back (retries exhausted)
    records: int = 0             # records written (each key once; a confirmed median replaces its first time)
    workers: dict = field(default_factory=dict)
    written: set = field(default_factory=set, repr=False)

    def table(self) -> str:
        """The summary, one row per layer: best solver and time, the heuristic's, the speedup."""
        rows = [("layer", "x", "best solver", "params", "best", "heuristic", "time", "speedup", "configs")]
        for layer in self.layers:
            best, ref = layer["best"], layer["reference"]
            if layer["error"] or best is None:
                rows.append((layer["problem"], str(layer["count"]), "FAILED", layer["error"] or "", "", "", "", "", ""))
                continue
            rows.append((layer["problem"], str(layer["count"]), best.solver,
                         tuning_db.params_key(tuning_db.stored_params(best.solver, best.params)), _us(best.seconds),
                         ref.solver if ref else "-", _us(ref.seconds) if ref else "-",
                         f"{ref.seconds / best.seconds:.2f}x" if ref and ref.seconds else "-",
                         f"{layer['measured']}+{layer['stored']}"))
        width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(r, width))).rstrip()
                 for r in rows]
        lines.insert(1, "-" * len(lines[0]))
        return "\n".join(lines)

    def totals(self) -> str:
        return (f"{len(self.layers)} layers, {self.measured} candidates measured, {self.stored} already stored, "
                f"{self.failed} failed, {self.retried} task attempts lost and retried, {self.lost} lost; "
                f"{self.records} records -> {self.db} ({self.wall_s:.1f} s)")


def _us(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f} us"


class Progress:
    """The live progress line on stderr: candidates done/failed, tasks retried, per worker. On a terminal one
    line rewritten in place; otherwise (a log) a line every `every` seconds and the last one."""

    def __init__(self, report: FleetReport, layers: list, enabled: bool = True, every: float = 5.0):
        self.report, self.layers, self.enabled, self.every = report, layers, enabled, every
        self.tty = enabled and sys.stderr.isatty()
        self.last = 0.0

    def line(self) -> str:
        r = self.report
        done = sum(layer.done for layer in self.layers)
        workers = " ".join(f"{name} {w.done}/{w.failed}/{w.retried}" for name, w in sorted(r.workers.items()))
        return (f"fleet: layers {done}/{len(self.layers)}, candidates {r.measured} measured ({r.failed} failed), "
                f"{r.stored} stored, retried {r.retried} | done/failed/retried: {workers}")

    def update(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < (0.25 if self.tty else self.every):
            return
        self.last = now
        if self.tty:
            cols = shutil.get_terminal_size((160, 20)).columns
            print("\r" + self.line()[:cols - 1].ljust(cols - 1), end="", file=sys.stderr, flush=True)
        else:
            print(self.line(), file=sys.stderr, flush=True)

    def close(self) -> None:
        self.update(force=True)
        if self.enabled and self.tty:
            print(file=sys.stderr, flush=True)


def _load(model, defines: dict) -> tuple[str, Graph]:
    if isinstance(model, Graph):
        return getattr(model, "name", None) or "graph", model
    loaded = importers.load(str(model), **defines)
    if not isinstance(loaded, Graph):
        raise OpenPrimError(f"{model}: a prim module; tuning needs a model that imports as a Graph")
    return str(model), loaded


def _fault_plan(run_dir: str) -> dict | None:
    """$OPENPRIM_FLEET_FAULT ("compile@3,measure@5") as the tasks' hook, or None."""
    text = os.environ.get(FAULT_ENV, "").strip()
    if not text:
        return None
    plan = {"dir": run_dir}
    for part in text.split(","):
        kind, _, seq = part.strip().partition("@")
        if kind not in ("compile", "measure") or not seq.isdigit():
            raise OpenPrimError(f"${FAULT_ENV}={text!r}: expected e.g. 'compile@3,measure@5'")
        plan[kind] = int(seq)
    return plan


def tune_fleet(models, target: str | Target = "cpu", address: str | None = None, workers: int | None = None,
               db=None, budget: float = 10.0, seed: int = 0, defines: dict | None = None, progress: bool = True,
               on_result=None) -> FleetReport:
    """Tune every distinct conv2d/matmul layer of `models` (Graphs or model files) for `target` on a Ray cluster:
    the one at `address` ("auto": the one this machine belongs to), the one this process has initialized, else a
    local one of `workers` CPUs (default: every core), shut down at the end. budget: seconds of search per
    layer, as `openprim tune --budget` (each layer's own clock); workers caps the compile tasks in flight;
    db: the database to fill (default: the user database); defines: model files' build() arguments.
    on_result(layer descriptor, find.Result) follows each measurement. Layers that are stored already resume
    (module docstring). Returns a FleetReport; an OpenPrimError (one line) when it cannot run."""
    t0 = time.monotonic()
    target = parse_target(target) if isinstance(target, str) else target
    path = os.path.abspath(db) if db else str(tuning_db.user_path())
    if workers is not None and workers < 1:
        raise OpenPrimError(f"--workers {workers}: must be at least 1")
    why = tuning_db.unwritable(path)
    if why:
        raise OpenPrimError(f"{why}: nothing would be stored; give a writable --db (or OPENPRIM_USER_DB_PATH)")
    ray = _ray()
    if not address and not ray.is_initialized():
        why = find.unavailable(target)   # the local cluster times on this machine
        if why:
            raise OpenPrimError(f"{why.split('; ')[0]}; or tune on a Ray cluster that has it: --ray ADDRESS")
    # Ray prints its workers' deaths and retries on stdout, from a thread of its own: to stderr here, so that
    # stdout holds only what the caller prints (the summary).
    with lock.working(target), contextlib.redirect_stdout(sys.stderr):
        graphs = [_load(m, defines or {}) for m in models]
        if not graphs:
            raise OpenPrimError("no model to tune")
        layers, modules = {}, []
        for name, graph in graphs:
            module, found = find.layers(graph, target)
            modules.append(module)
            for op, key, count in found:
                if key in layers:
                    layers[key].count += count
                    layers[key].models.append(name)
                else:
                    layers[key] = Layer(op, key, count, [name])
        layers = list(layers.values())
        started = not ray.is_initialized()
        if started:
            with lock.waiting():
                if address:
                    ray.init(address=address, log_to_driver=False, logging_level="error")
                else:
                    ray.init(**local_cluster(target, workers))
        run_dir = tempfile.mkdtemp(prefix="openprim-fleet-")
        try:
            report = _run(ray, layers, target, path, budget, seed, workers, address, progress, on_result,
                          _fault_plan(run_dir))
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
            if started:
                ray.shutdown()
    report.wall_s = time.monotonic() - t0
    return report


def _run(ray, layers, target, path, budget, seed, workers, address, progress, on_result, fault) -> FleetReport:
    res = resource(target)
    units = int(ray.cluster_resources().get(res, 0))
    if units < 1:
        raise OpenPrimError(
            f"no node of the Ray cluster offers the resource {res}, so nothing can time {target}: start each "
            f"node that has the device with `ray start ... --resources '{{\"{res}\": N}}'` (N: its devices; 1 for a "
            f"CPU){'' if target.is_gpu or target.arch else ', or name the CPU: --target cpu:<mcpu>'}")
    # Compile for the chip the measurers have (a CPU target: its name, so that a worker on another CPU
    # compiles the same code); the local cluster compiles as the serial path does.
    compile_target = str(target.concrete if address else target)
    arch = tuning_db.arch_of(target)
    ledger_cls = ray.remote(num_cpus=0)(Ledger)
    measurer_cls = ray.remote(Measurer).options(
        num_cpus=0, num_gpus=1 if target.is_gpu else 0, resources={res: 1}, max_restarts=MEASURER_RESTARTS,
        max_task_retries=MEASURER_RESTARTS, max_concurrency=1)
    compile_remote = ray.remote(compile_task).options(num_cpus=1, max_retries=COMPILE_RETRIES, retry_exceptions=False)
    ledger_name = f"openprim-ledger-{os.getpid()}-{time.time_ns()}"
    ledger = ledger_cls.options(name=ledger_name).remote()
    measurers = [measurer_cls.remote(compile_target, ledger_name, fault, os.environ.get("OMP_NUM_THREADS"))
                 for _ in range(units)]
    alive = list(range(units))
    report = FleetReport([], str(target), arch, path)
    in_flight_cap = (workers or int(ray.cluster_resources().get("CPU", 1))) + units
    try:
        with lock.waiting():
            archs = ray.get([m.arch.remote() for m in measurers])
        if any(a != arch for a in archs):
            raise OpenPrimError(f"the measurers time on {', '.join(sorted(set(archs)))}, not {arch}: give each CPU "
                                f"kind a resource of its own and tune with --target cpu:<mcpu>")
        _orchestrate(ray, layers, target, compile_target, arch, path, budget, seed, measurers, alive, ledger,
                     fault, compile_remote, report, Progress(report, layers, progress), in_flight_cap, on_result)
    finally:
        for actor in [*measurers, ledger]:
            with contextlib.suppress(Exception):
                ray.kill(actor)
    return report


def _orchestrate(ray, layers, target, compile_target, arch, path, budget, seed, measurers, alive, ledger, fault,
                 compile_remote, report, progress, cap, on_result) -> None:
    seq = iter(range(1, 1 << 62))
    for i, layer in enumerate(layers):
        problem = problem_of(layer.op)
        configs = find.space(layer.op, target)
        if not configs:   # e.g. a convolution direction that no solver serves on this target
            layer.error = "no solver applies"
            continue
        stored = tuning_db.stored(problem, arch, target, path)
        layer.search = find.Search(problem, layer.op.name[5:], configs, target, budget, seed,
                                   clock=lambda layer=layer: layer.work, stored=stored)
        layer.steps = layer.search.steps()
        layer.measurer = alive[i % len(alive)]
        report.stored += len(stored)
    ready = collections.deque((layer, None) for layer in layers if layer.search)   # (layer, the reply it is owed)
    in_flight = {}   # ObjectRef of an info -> (layer, request, seq, what)

    def worker(name):
        return report.workers.setdefault(name, Worker())

    def keep(layer):
        """The digests the layer's measurer keeps: the leaders of every layer it measures."""
        return {d for other in layers if other.measurer == layer.measurer and other.search and not other.done
                for r in other.search.leaders() for d in [other.digests.get(find.key(r.solver, r.params))] if d}

    def submit_compile(layer, solver, params):
        text = find.candidate_module(layer.op, solver, params)
        digest = find.digest(text)
        layer.digests[find.key(solver, params)] = digest
        n = next(seq)
        report.tasks += 1
        return n, digest, compile_remote.remote(text, compile_target, n, ledger, fault)

    def submit(layer, request):
        m = measurers[layer.measurer]
        k = find.key(request.solver, request.params)
        if request.kind == "retime":
            n = next(seq)
            report.tasks += 1
            ref = m.retime.remote(n, layer.digests[k], layer.compiled[k], keep(layer) | {layer.digests[k]})
            in_flight[ref] = (layer, request, n, "retime")
            return
        if not request.reference and layer.reference_out is None:
            # resumed: the reference is stored; its outputs (not its time) are needed to check this candidate
            n, digest, compiled = submit_compile(layer, *layer.search.reference)
            report.tasks += 1
            layer.reference_out, info = m.reference.options(num_returns=2).remote(n, digest, compiled, keep(layer))
            in_flight[info] = (layer, None, n, "reference output")
            report.reference_reruns += 1
        n, digest, compiled = submit_compile(layer, request.solver, request.params)
        layer.compiled[k] = compiled
        report.tasks += 1
        if request.reference:
            layer.reference_out, info = m.reference.options(num_returns=2).remote(
                n, digest, compiled, keep(layer) | {digest})
        else:
            info = m.measure.remote(n, digest, compiled, layer.reference_out, layer.search.problem.dtype,
                                    keep(layer) | {digest})
        in_flight[info] = (layer, request, n, "measure")

    def advance(layer, reply) -> None:
        """Send the layer's search its reply; submit what it asks next, or finish it."""
        try:
            request = layer.steps.send(reply)
        except StopIteration:
            finish(layer)
            return
        prune(layer)
        submit(layer, request)

    def finish(layer, error: str | None = None) -> None:
        layer.done, layer.error = True, error
        if layer.search is None:
            report.layers.append(dict(problem=layer.key, count=layer.count, models=layer.models, best=None,
                                      reference=None, configs=[], measured=0, stored=0, seconds=0.0, error=error))
            return
        if error is None:   # the final times (the confirmed medians replace the first ones): the database holds
            measured = set(layer.measured)   # what the search decided on
            layer.rows += [(layer.key, arch, r.solver, r.params, r.seconds)
                           for r in layer.search.leaders(len(layer.search.results))
                           if find.key(r.solver, r.params) in measured]
        flush([layer])
        layer.compiled.clear()
        ranked = layer.search.ranked()
        ref = layer.search.results.get(find.key(*layer.search.reference))
        report.layers.append(dict(problem=layer.key, count=layer.count, models=layer.models,
                                  best=ranked[0] if ranked and ranked[0].seconds is not None else None,
                                  reference=ref if ref and ref.seconds is not None else None, configs=ranked,
                                  measured=len(layer.measured), stored=len(layer.search.stored),
                                  seconds=layer.work, error=error))

    def flush(pending) -> None:
        rows = [row for layer in pending for row in layer.rows]
        if not rows:
            return
        why = tuning_db.record_many(rows, path)
        if why:
            raise OpenPrimError(f"{why}: the measurements could not be stored")
        report.written.update((r[0], r[2], tuning_db.params_key(r[3])) for r in rows)
        report.records = len(report.written)
        for layer in pending:
            layer.rows.clear()

    def received(ref, info_or_error) -> None:
        layer, request, n, what = in_flight.pop(ref)
        if isinstance(info_or_error, Exception):
            e = info_or_error
            if isinstance(e, ray.exceptions.RayActorError) and layer.measurer in alive and \
                    not _alive(ray, measurers[layer.measurer]):
                alive.remove(layer.measurer)
            info = dict(seconds=None, error=f"lost: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}",
                        compile_s=0.0, measure_s=0.0, wall_s=0.0, worker=None, compiled=False, measurer=None)
            report.lost += 1
        else:
            info = info_or_error
        if info["worker"] and what != "retime":   # the compile task's worker, then the measurer
            worker(info["worker"]).done += 1
            worker(info["worker"]).failed += not info["compiled"]
        if info["measurer"] and info["compiled"]:
            worker(info["measurer"]).done += 1
            worker(info["measurer"]).failed += info["seconds"] is None
        if what == "reference output":
            return
        layer.work += info["compile_s"] + info["measure_s"]
        if request.kind == "retime":
            ready.append((layer, info["seconds"]))
            return
        result = find.Result(request.solver, request.params, info["seconds"], info["error"])
        if request.reference and result.seconds is None:
            finish(layer, f"the reference ({request.solver}) could not be measured: {result.error}")
            with contextlib.suppress(Exception):
                layer.steps.close()
            return
        report.measured += 1
        report.failed += result.seconds is None
        layer.measured.append(find.key(request.solver, request.params))
        if result.seconds is not None:
            layer.rows.append((layer.key, arch, request.solver, request.params, result.seconds))
        if on_result:
            on_result(layer.key, result)
        ready.append((layer, (result, info["compile_s"] + info["measure_s"])))

    def prune(layer) -> None:
        """Keep the artifacts of the leaders only (re-timing needs them); the rest leave the object store."""
        top = {find.key(r.solver, r.params) for r in layer.search.leaders()}
        for k in [k for k in layer.compiled if k not in top]:
            del layer.compiled[k]

    def sync_retries() -> None:
        with lock.waiting():
            retried = ray.get(ledger.retried.remote())
        counts = collections.Counter(w for attempts in retried.values() for w in attempts[:-1])
        report.retried = sum(counts.values())
        for name, n in counts.items():
            worker(name).retried = n

    for layer in layers:
        if layer.search is None:
            finish(layer, layer.error)
    try:
        while ready or in_flight:
            while ready and len(in_flight) < cap:
                layer, reply = ready.popleft()
                if not layer.done:
                    if not alive:
                        raise OpenPrimError("every measurer died (restarted "
                                            f"{MEASURER_RESTARTS} times each): the run stops; run it again to resume")
                    if layer.measurer not in alive:
                        layer.measurer = alive[0]
                    advance(layer, reply)
            if not in_flight:
                continue
            with lock.waiting():
                done, rest = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
                if done and rest:   # and whatever else is done by now
                    done += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in done:
                try:
                    with lock.waiting():
                        info = ray.get(ref)
                except ray.exceptions.RayError as e:
                    info = e
                received(ref, info)
            flush([layer for layer in layers if layer.rows and not layer.done])
            if done:
                sync_retries()
            progress.update()
    finally:
        with contextlib.suppress(OpenPrimError):
            flush([layer for layer in layers if layer.rows])
    sync_retries()
    progress.close()
    order = {layer.key: i for i, layer in enumerate(layers)}
    report.layers.sort(key=lambda row: order[row["problem"]])


def _alive(ray, actor) -> bool:
    try:
        ray.get(actor.arch.remote(), timeout=30)
        return True
    except ray.exceptions.RayError:
        return False

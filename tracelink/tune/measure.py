"""Build, verify and time candidates with the real IREE tools.

Candidates are written and compiled by ``iree-compile`` in a process pool sized to the machine (each
step reported to the caller's ``report``, the loop's progress callback); each built candidate is then,
one at a time so timings do not disturb each other, run once through ``tracelink_run`` with
``iree-run-module`` on seeded inputs and compared with the default config's outputs, and only when it
matches timed with ``iree-benchmark-module`` running ``tracelink_run`` on the same inputs (never on
uninitialized memory; repetitions; median and a distribution-free 95% confidence interval; a timeout
relative to the default's run time). A timing faster than the machine can compute (above the measured
peak, see ``peak``) is rejected as invalid. A candidate that fails to compile, crashes, times out,
computes something else or runs impossibly fast is recorded as failed and is never chosen.

On a tune on Ray (:mod:`.remote`), the candidates compile as Ray tasks anywhere in the cluster, their
builds written where the pool writes them, and are verified and timed on one node, the one that timed
the dispatch's default (times from different machines are never compared): a :class:`Bench` is what
verifying and timing takes, wherever it runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tracelink.iree_tools import benchmark_repetitions, compile_command, run_module_command
from tracelink.errors import TracelinkError, first_line
from tracelink.atomic import make_directory, write_atomic, write_text_atomic
from tracelink.tools import ToolTimedOut, run_tool, stop_on_sigterm
from tracelink.tune import harness
from tracelink.tune.candidates import materialize
from tracelink.tune.dispatch import Dispatch, config_text, element_bytes
from tracelink.collect.machine import machine_cores, machine_peaks
from tracelink.tune.remote import Job, LostError, RayWork
from tracelink.tune.tuners.loop import Report, no_report

OK = "ok"
FAILED_STATES = ("mismatch", "compile_error", "run_error", "timeout", "above_peak")


@dataclass
class MeasureOptions:
    """How candidates are measured; set in the ``[measure]`` table of the tune config."""

    # As the profiled program runs: local-task with IREE's default worker count (neither passes a
    # topology flag), timed by the wall clock. "local-sync" with clock "cpu" (process CPU time, robust
    # to other load on a shared machine) times one thread, which can rank configs differently.
    device: str = "local-task"
    clock: str = "wall"
    repetitions: int = 7
    repetition_seconds: float = 0.03  # --benchmark_min_time of each repetition
    batch_seconds: float = 0.005  # dispatches per command buffer: about this long
    timeout_factor: float = 20.0  # a candidate may take this many times the default's run
    min_timeout_seconds: float = 30.0
    compile_timeout_seconds: float = 300.0
    jobs: int = field(default_factory=machine_cores)
    # Timings above peak_margin x the machine's peak GFLOP/s are invalid. The peak is measured once
    # per machine (tracelink.collect.machine: the better of BLAS and IREE's own matmul, cached) unless
    # peak_gflops (one core's) is set.
    peak_gflops: float = 0.0
    peak_margin: float = 1.5

    @classmethod
    def from_table(cls, table: dict, where: str) -> "MeasureOptions":
        options = cls()
        for key, value in table.items():
            if not hasattr(options, key):
                raise TracelinkError(f"{where}: unknown key '{key}' in [measure] (expected one of: {', '.join(vars(options))})")
            expected = type(getattr(options, key))
            if expected is float and isinstance(value, int):
                value = float(value)
            if not isinstance(value, expected) or (expected in (int, float) and value <= 0):
                raise TracelinkError(f"{where}: [measure] {key} must be a positive {expected.__name__}, got {value!r}")
            setattr(options, key, value)
        if options.clock not in ("cpu", "wall"):
            raise TracelinkError(f"{where}: [measure] clock must be \"cpu\" or \"wall\", got {options.clock!r}")
        return options


@dataclass
class Timing:
    """Per-dispatch times (seconds) of each benchmark repetition."""

    samples: list[float]

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    def ci(self, level: float = 0.95) -> tuple[float, float]:
        """Distribution-free confidence interval of the median (order statistics; min..max if n < 6)."""
        ordered = sorted(self.samples)
        n = len(ordered)
        # The largest rank r with P(Binomial(n, 1/2) < r) <= (1 - level) / 2: [x_(r), x_(n+1-r)] covers the median.
        rank, tail = 0, 0.0
        while rank < n and tail + math.comb(n, rank) / 2**n <= (1 - level) / 2:
            tail += math.comb(n, rank) / 2**n
            rank += 1
        if rank < 1:
            return ordered[0], ordered[-1]
        return ordered[rank - 1], ordered[n - rank]


@dataclass
class Trial:
    """One measured configuration of one dispatch."""

    dispatch: str
    trial: int
    tuner: str
    knobs: dict[str, int]
    configuration: str
    verification: str  # ok, mismatch, compile_error, run_error, timeout, above_peak
    error: str = ""
    timing: Timing | None = None
    gflops: float = 0.0
    compile_seconds: float = float("nan")
    vmfb: Path | None = None

    @property
    def ok(self) -> bool:
        return self.verification == OK and self.timing is not None

    @property
    def runtime_ms(self) -> float:
        return self.timing.median * 1e3 if self.timing else float("nan")

    def row(self) -> dict:
        low, high = self.timing.ci() if self.timing else (float("nan"), float("nan"))
        return {
            "dispatch": self.dispatch,
            "trial": self.trial,
            "tuner": self.tuner,
            "configuration": self.configuration,
            "knobs": json.dumps(self.knobs, sort_keys=True),
            "runtime_ms": self.runtime_ms,
            "ci_low_ms": low * 1e3,
            "ci_high_ms": high * 1e3,
            "gflops": self.gflops,
            "verification": self.verification,
            "error": self.error,
            "compile_s": self.compile_seconds,
            "samples_ms": json.dumps([round(s * 1e3, 6) for s in self.timing.samples]) if self.timing else "",
        }


def first_error(output: str) -> str:
    """The first ``error:`` line a tool printed (else its last line), trimmed."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line.lower()]
    text = (errors or lines[-1:] or ["no output"])[0]
    return text if len(text) <= 300 else text[:297] + "..."


def candidate_id(configuration: str, benchmark_digest: str = "") -> str:
    """File name of a candidate: a hash of its config and of the benchmark dump it derives from."""
    return hashlib.sha1((benchmark_digest + configuration).encode()).hexdigest()[:12]


def build(benchmark: str, fields: dict | None, source: str, vmfb: str, timeout: float) -> tuple[str, float]:
    """Worker: write a candidate and compile it. Returns (error or "", seconds)."""
    started = time.perf_counter()
    try:
        materialize(Path(benchmark), fields, Path(source))
    except TracelinkError as error:
        return f"candidate generation failed: {error}", time.perf_counter() - started
    # From the configured form on, as the program compiles it: the earlier phases would fold a
    # convolution's unit batch loop again and drop its config (the executable is already configured).
    command = compile_command(source, vmfb, ["--compile-from=executable-configurations"])
    try:
        done = run_tool(command, timeout)
    except subprocess.TimeoutExpired:
        return f"iree-compile timed out after {timeout:g} s", time.perf_counter() - started
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        write_text_atomic(Path(source).with_suffix(".log"), " ".join(command) + "\n\n" + done.stderr)
        return f"iree-compile failed: {first_error(done.stderr)}", seconds
    return "", seconds


def run_verify(vmfb: Path, inputs: list[Path], outputs: int, directory: Path, device: str, timeout: float) -> list[np.ndarray]:
    """Run ``tracelink_run`` once; returns the written bindings. Raises RuntimeError / TimeoutError."""
    make_directory(directory)
    paths = [directory / f"output{i}.npy" for i in range(outputs)]
    command = run_module_command(vmfb, harness.RUN_FUNCTION, [*(f"@{path}" for path in inputs), "1"], device=device,
                                 extra=[f"--output=@{path}" for path in paths])
    run_candidate_tool(command, timeout, "verification run")
    return [np.load(path) for path in paths]


def run_candidate_tool(command: list[str], timeout: float, what: str) -> subprocess.CompletedProcess:
    """Run one tool on a candidate; a timeout or failure is the candidate's (recorded, not fatal)."""
    try:
        done = run_tool(command, timeout)
    except subprocess.TimeoutExpired as error:
        raise TimeoutError(f"{what} exceeded {timeout:.3g} s") from error
    if done.returncode != 0:
        raise RuntimeError(f"{Path(command[0]).name} exit {done.returncode}: {first_error(done.stderr)}")
    return done


def run_benchmark(
    vmfb: Path, inputs: list[Path], options: MeasureOptions, batch_size: int, timeout: float, repetitions: int | None = None
) -> Timing:
    """Time ``tracelink_run`` dispatching ``batch_size`` times on ``inputs``; per-dispatch seconds of each repetition.
    A timeout or failure is the candidate's, as in :func:`run_candidate_tool`."""
    arguments = [*(f"@{path}" for path in inputs), str(batch_size)]
    try:
        times = benchmark_repetitions(vmfb, harness.RUN_FUNCTION, arguments, repetitions=repetitions or options.repetitions, timeout=timeout,
                                      min_time=f"{options.repetition_seconds}s", device=options.device,
                                      column="cpu_time" if options.clock == "cpu" else "real_time", doing="timing the candidate")
    except ToolTimedOut as error:
        raise TimeoutError(f"benchmark exceeded {timeout:.3g} s") from error
    except TracelinkError as error:
        raise RuntimeError(str(error)) from error
    return Timing([ns * 1e-9 / batch_size for ns in times])


@dataclass(frozen=True)
class Bench:
    """What verifying and timing one dispatch's builds needs, wherever they run (in this process, or on a
    Ray node with copies of the inputs and builds): the dispatch's name (for messages), its seeded inputs,
    how many bindings it writes, its reduction length (the tolerance of the output check) and the options;
    once its default is measured (:func:`calibrate`), the default's outputs (the reference), the
    dispatches per timed call and a candidate run's timeout."""

    name: str
    inputs: list[Path]
    outputs: int
    reduction: int
    options: MeasureOptions
    reference: list[np.ndarray] = field(default_factory=list)
    batch_size: int = 1
    timeout: float = 0.0


Checked = tuple[str, str, Timing | None]  # a build's verification, its error and its timing


def outputs_of(bench: Bench, vmfb: Path, timeout: float) -> list[np.ndarray]:
    """The build run once on the bench's inputs; its written bindings, saved beside it."""
    return run_verify(vmfb, bench.inputs, bench.outputs, vmfb.parent / f"{vmfb.stem}_out", bench.options.device, timeout)


def calibrate(bench: Bench, vmfbs: list[Path], report: Report) -> tuple[dict, Timing]:
    """The default build (``vmfbs[0]``) run for its outputs (the reference), probed for the dispatches per
    timed call (about ``batch_seconds``) and timed, its wall time setting a candidate's timeout: those as
    :class:`Bench` fields, and the default's timing."""
    vmfb, options = vmfbs[0], bench.options
    report(f"measure {bench.name}'s default config", 0, 1)
    try:
        reference = outputs_of(bench, vmfb, 600.0)
        probe = run_benchmark(vmfb, bench.inputs, options, 1, 600.0, repetitions=1)
        batch_size = max(1, min(1000, round(options.batch_seconds / max(probe.median, 1e-9))))
        started = time.perf_counter()
        timing = run_benchmark(vmfb, bench.inputs, options, batch_size, 600.0)
    except (RuntimeError, TimeoutError) as error:
        raise TracelinkError(f"{bench.name}: the default config does not run: {error}") from error
    timeout = options.min_timeout_seconds + options.timeout_factor * (time.perf_counter() - started)
    return {"reference": reference, "batch_size": batch_size, "timeout": timeout}, timing


def verify_and_time_each(bench: Bench, vmfbs: list[Path], report: Report) -> list[Checked]:
    """Each build verified against the reference and, when it matches, timed, one at a time so timings do
    not disturb each other."""
    checked: list[Checked] = []
    for vmfb in vmfbs:
        report(f"measure {bench.name}", len(checked), len(vmfbs))
        checked.append(verified_and_timed(bench, vmfb))
    return checked


def verified_and_timed(bench: Bench, vmfb: Path) -> Checked:
    """One build verified against the reference and, when it matches, timed; a failure is the build's."""
    try:
        mismatch = harness.compare(outputs_of(bench, vmfb, bench.timeout), bench.reference, bench.reduction)
        if mismatch:
            return "mismatch", mismatch, None
        return OK, "", run_benchmark(vmfb, bench.inputs, bench.options, bench.batch_size, bench.timeout)
    except TimeoutError as error:
        return "timeout", str(error), None
    except RuntimeError as error:
        return "run_error", str(error), None


def time_interleaved(bench: Bench, vmfbs: list[Path], report: Report, rounds: int, repetitions: int) -> list[Timing]:
    """Time several builds again in interleaved rounds: round r of each is one sample (the median of
    ``repetitions``), so samples of the same round saw the same machine load."""
    per_round: list[list[float]] = [[] for _ in vmfbs]
    for number in range(rounds):
        report(f"confirm {bench.name}: {len(vmfbs)} builds, interleaved rounds", number, rounds)
        for i, vmfb in enumerate(vmfbs):
            timing = run_benchmark(vmfb, bench.inputs, bench.options, bench.batch_size, bench.timeout, repetitions=repetitions)
            per_round[i].append(timing.median)
    return [Timing(samples) for samples in per_round]


def bench_job(work: Path, copies: dict[str, Path], function: Callable[..., Any], bench: Bench, vmfbs: list[str],
              arguments: tuple) -> dict:
    """On a Ray node (a :class:`~.remote.Job`): ``function`` on a dispatch's bench and builds, the node's copies."""
    here = replace(bench, inputs=[copies[str(path)] for path in bench.inputs])
    return {"value": function(here, [copies[vmfb] for vmfb in vmfbs], no_report, *arguments)}


def build_job(work: Path, copies: dict[str, Path], benchmark: str, fields: dict | None, source: str, timeout: float) -> dict:
    """On a Ray node (a :class:`~.remote.Job`): :func:`build` of a candidate from the node's copy of the
    benchmark dump; its vmfb's bytes, the compiler's log when it failed, and the error and seconds
    :func:`build` returns, naming the driver's files, not the node's."""
    here = work / Path(source).name
    error, seconds = build(str(copies[benchmark]), fields, str(here), str(here.with_suffix(".vmfb")), timeout)
    log = here.with_suffix(".log")

    def shown(text: str) -> str:
        return text.replace(str(copies[benchmark]), benchmark).replace(str(work), str(Path(source).parent))

    return {"error": shown(error), "seconds": seconds, "vmfb": b"" if error else here.with_suffix(".vmfb").read_bytes(),
            "log": shown(log.read_text(errors="replace")) if log.is_file() else ""}


def landed(source: Path, result: dict) -> tuple[str, float]:
    """A candidate built on a Ray node, written where the pool writes it (its vmfb, or the compiler's log,
    beside ``source``); its error and seconds."""
    if result["log"]:
        write_text_atomic(source.with_suffix(".log"), result["log"])
    if not result["error"]:  # atomically: a vmfb on disk counts as built
        write_atomic(source.with_suffix(".vmfb"), lambda temporary: temporary.write_bytes(result["vmfb"]))
    return result["error"], result["seconds"]


class Measurer:
    """Measures configurations of one dispatch against its default config: builds them in ``pool`` and
    verifies and times them in this process; with ``work`` (a tune on Ray) builds them as Ray tasks
    anywhere in the cluster, and verifies and times them on one node (each time the whole node), the one
    that timed the default."""

    def __init__(self, dispatch: Dispatch, workdir: Path, options: MeasureOptions, pool: ProcessPoolExecutor,
                 work: RayWork | None = None):
        self.dispatch = dispatch
        self.workdir = Path(workdir)
        self.options = options
        self.pool, self.work = pool, work
        self.node: str | None = None  # on Ray: the node that times this dispatch's builds
        self.candidates = self.workdir / "candidates"
        self.digest = hashlib.sha1(Path(dispatch.benchmark).read_bytes()).hexdigest()
        reduction = math.prod(loop.size for loop in dispatch.loops if loop.kind == "reduction")
        self.bench = Bench(dispatch.export, harness.write_inputs(dispatch, self.workdir / "inputs"),
                           harness.output_count(dispatch), reduction, options, timeout=options.min_timeout_seconds)
        self.default: Trial | None = None
        self.max_gflops = math.inf  # set by measure_default: faster timings are invalid

    @property
    def inputs(self) -> list[Path]:
        return self.bench.inputs

    @property
    def reference(self) -> list[np.ndarray]:
        return self.bench.reference

    def throughput_bound(self) -> float:
        """The fastest honest GFLOP/s for this dispatch: the margin times the f32 peak of one core (all
        cores on local-task), more for narrower element types (more lanes per vector)."""
        bits = min(element_bytes(t) for t in self.dispatch.operand_types) * 8
        cores = 1 if self.options.device == "local-sync" else machine_cores()
        return self.options.peak_margin * (self.options.peak_gflops or machine_peaks().core_gflops) * cores * max(1.0, 32 / bits)

    def _run(self, function: Callable[..., Any], vmfbs: list[Path], trials: list[int], report: Report, *arguments: object) -> Any:
        """``function`` on the bench and ``vmfbs`` (the builds of ``trials``): here, or on Ray on this
        dispatch's node (its first run, the default's, on any node that races, which then keeps it)."""
        if self.work is None:
            return function(self.bench, vmfbs, report, *arguments)
        report(f"time {self.dispatch.export}'s builds on its ray node", 0, 1)
        job = Job("time", tuple(map(self._name, trials)), bench_job, (function, self.bench, [str(v) for v in vmfbs], arguments),
                  (*self.bench.inputs, *vmfbs), self.node)
        result = self.work.run(job)
        self.node = result["node"]
        return result["value"]

    def _name(self, trial: int) -> str:
        return f"{self.dispatch.export}#{trial}"

    # -- building -------------------------------------------------------------------------------
    def paths(self, configuration: str) -> tuple[Path, Path]:
        name = candidate_id(configuration, self.digest)
        return self.candidates / f"{name}.mlir", self.candidates / f"{name}.vmfb"

    def build_all(self, jobs: list[tuple[int, str, dict | None]], report: Report = no_report) -> dict[str, tuple[str, float]]:
        """Compile the (trial number, configuration, fields) candidates not built yet, in the pool or on
        Ray; configuration -> (error, seconds)."""
        make_directory(self.candidates)
        results = {configuration: ("", 0.0) for _, configuration, _ in jobs if self.paths(configuration)[1].exists()}
        todo = [job for job in jobs if job[1] not in results]
        results.update(self._build_here(todo, report) if self.work is None else self._build_on_ray(todo))
        return results

    def _build_here(self, jobs: list[tuple[int, str, dict | None]], report: Report) -> dict[str, tuple[str, float]]:
        futures: dict[Future, str] = {}
        for _, configuration, fields in jobs:
            source, vmfb = self.paths(configuration)
            future = self.pool.submit(build, str(self.dispatch.benchmark), fields, str(source), str(vmfb),
                                      self.options.compile_timeout_seconds)
            futures[future] = configuration
        results: dict[str, tuple[str, float]] = {}
        try:
            for done, future in enumerate(list(futures)):
                report(f"compile {self.dispatch.export}", done, len(futures))
                results[futures[future]] = future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        return results

    def _build_on_ray(self, jobs: list[tuple[int, str, dict | None]]) -> dict[str, tuple[str, float]]:
        """Every candidate built at once as a Ray task anywhere in the cluster; one lost twice is its error."""
        sources = {self._name(number): self.paths(configuration)[0] for number, configuration, _ in jobs}
        tasks = [Job("build", (self._name(number),), build_job, (str(self.dispatch.benchmark), fields, str(sources[self._name(number)]),
                                                                 self.options.compile_timeout_seconds), (Path(self.dispatch.benchmark),))
                 for number, _, fields in jobs]
        built = self.work.run_all(tasks, lambda task, result: landed(sources[task.names[0]], result))
        return {configuration: (first_line(result), math.nan) if isinstance(result, LostError) else result
                for (_, configuration, _), result in zip(jobs, built)}

    # -- the default ----------------------------------------------------------------------------
    def measure_default(self, report: Report = no_report) -> Trial:
        """Build and time the default config, save its outputs as the reference, calibrate."""
        configuration = self.dispatch.default_config_text
        error, seconds = self.build_all([(0, configuration, None)], report)[configuration]
        if error:
            raise TracelinkError(f"{self.dispatch.benchmark}: the default config does not build: {error}")
        _, vmfb = self.paths(configuration)
        calibration, timing = self._run(calibrate, [vmfb], [0], report)
        self.bench = replace(self.bench, **calibration)
        self.max_gflops = self.throughput_bound()
        self.default = self._timed(0, "default", {}, configuration, timing, seconds, vmfb)
        if not self.default.ok:
            raise TracelinkError(f"{self.dispatch.export}: the default config's timing is invalid: {self.default.error}")
        return self.default

    # -- candidates -----------------------------------------------------------------------------
    def measure(self, entries: list[tuple[int, str, dict[str, int], dict]], report: Report = no_report) -> list[Trial]:
        """Build, verify and time (trial number, tuner, knobs, config fields) entries, in order."""
        jobs = [(number, config_text(fields), fields) for number, _, _, fields in entries]
        built = self.build_all(jobs, report)
        ready = [(number, configuration) for number, configuration, _ in jobs if not built[configuration][0]]
        vmfbs = [self.paths(configuration)[1] for _, configuration in ready]
        checked = dict(zip(ready, self._run(verify_and_time_each, vmfbs, [n for n, _ in ready], report) if ready else []))
        trials = []
        for (number, tuner, knobs, _), (_, configuration, _) in zip(entries, jobs):
            error, seconds = built[configuration]
            if error:
                trials.append(self._trial(number, tuner, knobs, configuration, "compile_error", error, None, seconds, None))
            else:
                trials.append(self._judged(number, tuner, knobs, configuration, checked[(number, configuration)], seconds,
                                           self.paths(configuration)[1]))
        return trials

    def verify_and_time(self, vmfb: Path, number: int, tuner: str, knobs: dict, configuration: str,
                        seconds: float = float("nan")) -> Trial:
        """Verify a compiled candidate against the default's outputs and, when it matches, time it."""
        checked = self._run(verify_and_time_each, [vmfb], [number], no_report)[0]
        return self._judged(number, tuner, knobs, configuration, checked, seconds, vmfb)

    def _judged(self, number, tuner, knobs, configuration, checked: Checked, seconds, vmfb) -> Trial:
        verification, error, timing = checked
        if timing is None:
            return self._trial(number, tuner, knobs, configuration, verification, error, None, seconds, vmfb)
        return self._timed(number, tuner, knobs, configuration, timing, seconds, vmfb)

    def _timed(self, number, tuner, knobs, configuration, timing: Timing, seconds, vmfb) -> Trial:
        """The trial of a timed candidate: valid unless faster than the machine can compute it."""
        gflops = self.dispatch.flops / timing.median / 1e9
        if gflops > self.max_gflops:
            error = (f"timed at {gflops:.1f} GFLOP/s, above the machine's peak bound {self.max_gflops:.1f} GFLOP/s: "
                     "the timing cannot be of this computation")
            return self._trial(number, tuner, knobs, configuration, "above_peak", error, None, seconds, vmfb)
        return self._trial(number, tuner, knobs, configuration, OK, "", timing, seconds, vmfb)

    def _trial(self, number, tuner, knobs, configuration, verification, error, timing, seconds, vmfb) -> Trial:
        gflops = self.dispatch.flops / timing.median / 1e9 if timing else 0.0
        return Trial(self.dispatch.export, number, tuner, knobs, configuration, verification, error, timing, gflops,
                     seconds, vmfb)

    def retime(self, trials: list[Trial], rounds: int, repetitions: int = 3, report: Report = no_report) -> list[Timing]:
        """The trials' builds timed again in interleaved rounds (:func:`time_interleaved`), where the default was."""
        return self._run(time_interleaved, [trial.vmfb for trial in trials], [trial.trial for trial in trials], report,
                         rounds, repetitions)


def make_pool(jobs: int) -> ProcessPoolExecutor:
    """The compile pool (spawned workers: the MLIR bindings and XGBoost do not survive fork well)."""
    return ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=multiprocessing.get_context("spawn"), initializer=stop_on_sigterm)

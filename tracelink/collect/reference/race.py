"""Run each chosen reference: warm it up, check its outputs against IREE's, race it against IREE's build,
then profile it per op where the framework can.

The race is tune's (:mod:`tracelink.collect.rounds`): alternating rounds, IREE's build through
``iree-benchmark-module`` then the reference in this process, never at the same time; each round gives
one median per side, which the aggregate stage turns into IREE's time over the reference's with its
95 % interval (:mod:`tracelink.aggregate.speedup`, the one speedup statistic). The profiled calls come after the race, so the profiler's
overhead touches no timed call. A reference that fails (an exception, out of memory) becomes a failed
result with its first line; IREE's profile goes on.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from tracelink.collect.machine import machine_cores
from tracelink.collect.outputs import outputs_agree, run_outputs
from tracelink.collect.reference import IreeBuild, ReferenceResult, Subject
from tracelink.collect.rounds import alternate, time_program
from tracelink.errors import first_line

ROUNDS = 5
ROUND_SECONDS = 0.3  # each side's share of a round: enough calls for a stable median on a small model
MIN_CALLS, MAX_CALLS = 1, 50
WARMUP_CALLS = 3
PROFILED_CALLS = 5  # odd: the median call of each op
# fp32 on both sides, with sums reordered: tune's tolerance for a reassociated build (collect.outputs)
TOLERANCE = 1e-3


class Runner(Protocol):
    """One reference, loaded: a call, its outputs, and its calls under the framework's profiler."""

    def call(self) -> None: ...

    def outputs(self) -> list[np.ndarray]: ...

    def profile(self, calls: int) -> tuple[pd.DataFrame, float] | None: ...

    def close(self) -> None: ...


def runner_for(name: str, subject: Subject, threads: int, directory: Path) -> Runner:
    """The framework's runner for reference ``name`` (the framework loads here)."""
    if name in ("eager", "inductor"):
        from tracelink.collect.reference.torch_eager import TorchRunner

        return TorchRunner(subject.target, subject.args, threads, compiled=name == "inductor", log=directory / "profiler.log")
    if name == "xla":
        from tracelink.collect.reference.jax_jit import JaxRunner

        return JaxRunner(subject.target, subject.args, directory)
    from tracelink.collect.reference.onnxrt import OnnxRuntimeRunner

    return OnnxRuntimeRunner(Path(subject.target), subject.args, threads, directory)


def run_references(subject: Subject, build: IreeBuild, directory: Path, rounds: int = ROUNDS,
                   started: Callable[[str], None] = lambda _: None) -> list[ReferenceResult]:
    """Each of ``subject.references`` in turn (``started`` is told its name), results in that order."""
    results = []
    for name in subject.references:
        started(name)
        results.append(run_one(name, subject, build, directory / name, rounds))
    return results


def run_one(name: str, subject: Subject, build: IreeBuild, directory: Path, rounds: int) -> ReferenceResult:
    """One reference, every failure of it caught into the result."""
    result = ReferenceResult(name, machine_cores())
    runner: Runner | None = None
    try:
        runner = runner_for(name, subject, result.threads, directory)
        estimate = warm_up(runner)
        result.outputs = compared_outputs(runner, build, directory)
        result.rounds = race(runner, build, calls_per_round(max(estimate, build.seconds_per_call)), rounds)
        profiled = runner.profile(PROFILED_CALLS)
        if profiled is not None:
            result.samples, result.profiled_ns_per_call = profiled
            result.per_line = "ops"
        else:
            result.per_line = "whole call only: the framework names no source line per op here"
    except (Exception, MemoryError) as error:  # noqa: BLE001 - any failure of the user's framework is one line
        result.status, result.error = "failed", f"{type(error).__name__}: {first_line(error)}"
    finally:
        if runner is not None:
            runner.close()
    return result


def warm_up(runner: Runner) -> float:
    """A few calls (compiles, caches, allocator); the seconds of the last."""
    seconds = 0.0
    for _ in range(WARMUP_CALLS):
        start = time.perf_counter()
        runner.call()
        seconds = time.perf_counter() - start
    return seconds


def calls_per_round(seconds: float) -> int:
    """Calls of each side per round: about :data:`ROUND_SECONDS` of the slower side's time (``seconds`` per call)."""
    return int(min(MAX_CALLS, max(MIN_CALLS, ROUND_SECONDS / max(seconds, 1e-6))))


def timed_calls(runner: Runner, calls: int) -> float:
    """The median (ns) of ``calls`` plain calls, no profiler."""
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        runner.call()
        times.append(time.perf_counter_ns() - start)
    return float(statistics.median(times))


def race(runner: Runner, build: IreeBuild, calls: int, rounds: int) -> dict:
    """Alternating rounds of IREE's build and the reference: each side's median per round (ns)."""
    (iree,), reference = race_builds(runner, [build], calls, rounds)
    return {"iree_ns": iree, "reference_ns": reference, "calls_per_round": calls}


def race_builds(runner: Runner, builds: Sequence[IreeBuild], calls: int, rounds: int) -> tuple[list[list[float]], list[float]]:
    """Alternating rounds of several IREE builds and the reference (the reference last in each round's
    order, reversed every other round): each build's medians per round (ns), and the reference's."""
    sides: list[Callable[[int], float]] = [
        lambda _, build=build: time_program(build.vmfb, build.function, build.inputs, build.parameters, calls, build.timeout_s)
        for build in builds]
    *iree, reference = alternate([*sides, lambda _: timed_calls(runner, calls)], rounds)
    return iree, reference


def compared_outputs(runner: Runner, build: IreeBuild, directory: Path) -> dict:
    """Whether the reference's outputs equal IREE's build's on the same inputs."""
    theirs = runner.outputs()
    ours = run_outputs(build.vmfb, build.function, build.inputs, build.parameters, len(theirs), directory / "iree_outputs", build.timeout_s)
    agree, detail = outputs_agree(ours, theirs, TOLERANCE, against="IREE's build")
    return {"agree": agree, "detail": detail}

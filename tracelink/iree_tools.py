"""IREE's compile, run, benchmark and profile-export tools: their command lines and the benchmark tool's report.

Every stage that compiles or runs a program builds its command here, so the flags IREE 3.13 takes
(``--module``, ``--device``, ``--function``, ``--parameters``, ``--input``) are spelled in one place, and
the one reader of Google Benchmark's JSON report guards against output before it and a missing column.
Every timing of a build by the benchmark tool (tune's candidates and races, the machine's probes, the
framework reference's race, ``tracelink diff``) goes through :func:`benchmark_repetitions`. Like :mod:`tracelink.tools` (which starts and stops the processes), it sits below every stage.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tracelink.errors import TracelinkError
from tracelink.tools import run_checked, tool_path

COMPILE_TOOL, RUN_TOOL, BENCHMARK_TOOL = "iree-compile", "iree-run-module", "iree-benchmark-module"
TUNING_SPEC_FLAG = "--iree-codegen-tuning-spec-path"
# Given a tuning spec, IREE 3.13's compiler deadlocked in 3 of 300 compiles of a two-dispatch program: the
# executables are configured in parallel, and a worker waited forever for the lock of the codegen
# dialect's transform libraries (IREECodegenDialect::getOrLoadTransformLibraryModule) while the others
# slept. On one thread it did not, in 900.
SINGLE_THREAD_FLAG = "--mlir-disable-threading"
TIME_UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def compile_command(source: Path | str, output: Path | str, flags: Sequence[str]) -> list[str]:
    """The ``iree-compile`` command compiling ``source`` into ``output`` with ``flags`` (:func:`safe_threading`)."""
    return [tool_path(COMPILE_TOOL), str(source), "-o", str(output), *safe_threading(flags)]


def safe_threading(flags: Sequence[str]) -> list[str]:
    """``flags``, with the compiler on one thread when they give it a tuning spec (:data:`SINGLE_THREAD_FLAG`)."""
    flags = list(flags)
    if any(flag.startswith(f"{TUNING_SPEC_FLAG}=") for flag in flags) and SINGLE_THREAD_FLAG not in flags:
        flags.append(SINGLE_THREAD_FLAG)
    return flags


def module_command(tool: str, vmfb: Path | str, function: str, inputs: Sequence[str] = (), parameters: Sequence[str] = (),
                   device: str = "local-task", extra: Sequence[str] = ()) -> list[str]:
    """``tool`` (:data:`RUN_TOOL` or :data:`BENCHMARK_TOOL`) calling ``function`` of ``vmfb`` on ``device``
    with the given ``--parameters`` archives and ``--input`` values, then ``extra`` flags."""
    return [tool_path(tool), f"--module={vmfb}", f"--device={device}", f"--function={function}",
            *(f"--parameters={p}" for p in parameters), *(f"--input={i}" for i in inputs), *extra]


def run_module_command(vmfb: Path | str, function: str, inputs: Sequence[str] = (), parameters: Sequence[str] = (),
                       device: str = "local-task", extra: Sequence[str] = ()) -> list[str]:
    """The ``iree-run-module`` command calling ``function`` once."""
    return module_command(RUN_TOOL, vmfb, function, inputs, parameters, device, extra)


def benchmark_command(vmfb: Path | str, function: str, inputs: Sequence[str], parameters: Sequence[str], iterations: int,
                      device: str = "local-task") -> list[str]:
    """The ``iree-benchmark-module`` command running ``function`` exactly ``iterations`` times."""
    return module_command(BENCHMARK_TOOL, vmfb, function, inputs, parameters, device, [f"--benchmark_min_time={iterations}x"])


def device_listing_command(driver: str) -> list[str]:
    """The ``iree-run-module`` command listing ``driver``'s devices."""
    return [tool_path(RUN_TOOL), f"--dump_devices={driver}"]


def profile_export_command(bundle: Path, exported: Path) -> list[str]:
    """``iree-profile export`` of a ``.ireeprof`` bundle to ireeperf JSON lines."""
    return [tool_path("iree-profile"), "export", "--format=ireeperf-jsonl", f"--output={exported}", str(bundle)]


def benchmark_times_ns(report: str, column: str = "real_time") -> list[float]:
    """Each repetition's time (ns, per iteration) in a Google Benchmark JSON report, which may follow
    other output (``iree-benchmark-module --benchmark_format=json`` prints a header first); [] when none."""
    start = report.find("{")
    try:
        rows = json.loads(report[start:]).get("benchmarks", []) if start >= 0 else []
    except json.JSONDecodeError:
        return []
    return [float(row[column]) * TIME_UNIT_NS[row.get("time_unit", "ns")] for row in rows
            if row.get("run_type") == "iteration" and column in row]


def benchmark_repetitions(vmfb: Path, function: str, inputs: Sequence[str], parameters: Sequence[str] = (), *, repetitions: int,
                          timeout: float, min_time: str = "1x", device: str = "local-task", column: str = "real_time",
                          doing: str = "timing the program") -> list[float]:
    """Each repetition's time (ns per call of ``function``) as ``iree-benchmark-module`` measures it: ``repetitions``
    repetitions, each running for ``min_time`` (``--benchmark_min_time``: ``1x`` one call, ``0.1s``), by the
    ``column`` clock (``real_time`` or ``cpu_time``). A failure, a crash or no repetition reported is one
    line naming ``vmfb`` and what it was ``doing``; past ``timeout`` seconds, a :class:`~tracelink.tools.ToolTimedOut`."""
    command = module_command(BENCHMARK_TOOL, vmfb, function, inputs, parameters, device, [
        f"--benchmark_min_time={min_time}", f"--benchmark_repetitions={repetitions}", "--benchmark_format=json"])
    times = benchmark_times_ns(run_checked(command, timeout, vmfb, doing).stdout, column)
    if not times:
        raise TracelinkError(f"{vmfb}: {doing}: {BENCHMARK_TOOL} reported no repetitions")
    return times

"""Benchmark: `tracelink profile` against bare iree-compile + iree-benchmark-module, same run.

For every example and shared workload, prints the wall time of the whole tracelink pipeline
divided by the time of the bare tools doing the same compile and the same repetitions (target
≤ 1.3×), and the time to build the provenance graph of the largest workload.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.test_workloads import WORKLOAD_RUNS, WORKLOADS  # noqa: E402
from tracelink.collect.hal import benchmark_command  # noqa: E402
from tracelink.compile import TARGET_FLAGS, tool_path  # noqa: E402
from tracelink.pipeline import ProfileOptions, profile  # noqa: E402
from tracelink.provenance.build import build_provenance  # noqa: E402
from tracelink.provenance.program import read_input_program  # noqa: E402

REPETITIONS = 10
PROGRAMS = {
    **{name: (REPO / "examples" / f"{name}.mlir", None, [], []) for name in ("mlp", "attention", "convnet")},
    **{name: (WORKLOADS / f"{name}.mlir", function, inputs, parameters) for name, (function, inputs, parameters) in WORKLOAD_RUNS.items()},
}


def bare_seconds(program: Path, function: str, inputs: list[str], parameters: list[str], work: Path) -> float:
    """iree-compile then iree-benchmark-module with the same inputs and repetitions (warm-up included)."""
    vmfb = work / "bare.vmfb"
    started = time.perf_counter()
    subprocess.run([tool_path("iree-compile"), str(program), "-o", str(vmfb), *TARGET_FLAGS, "--iree-llvmcpu-target-cpu=host"], check=True, capture_output=True)
    subprocess.run(benchmark_command(vmfb, function, inputs, parameters, REPETITIONS + 1), check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    console = Console()
    console.print(f"[bold]tracelink profile vs bare iree-compile + iree-benchmark-module ({REPETITIONS} repetitions + 1 warm-up)[/]")
    for name, (program, function, inputs, parameters) in PROGRAMS.items():
        with tempfile.TemporaryDirectory() as work_dir:
            work = Path(work_dir)
            started = time.perf_counter()
            result = profile(program, work / "out", ProfileOptions(function=function, inputs=inputs, parameters=parameters, repetitions=REPETITIONS), Console(quiet=True))
            traced = time.perf_counter() - started
            generated = result.summary["inputs"]
            bare = bare_seconds(program, result.summary["function"], generated, parameters, work)
            console.print(f"{name:32s} tracelink {traced:6.2f} s  bare {bare:6.2f} s  ratio {traced / bare:4.2f}x (target <= 1.3x)")
    largest = max(PROGRAMS.values(), key=lambda p: p[0].stat().st_size if p[0].parent == WORKLOADS and p[0].name != "mnist_mlp_trained.mlir" else 0)
    with tempfile.TemporaryDirectory() as work_dir:
        result = profile(largest[0], Path(work_dir) / "out", ProfileOptions(function=largest[1], inputs=largest[2], parameters=largest[3], repetitions=1), Console(quiet=True))
        source = read_input_program(largest[0].resolve())
        started = time.perf_counter()
        built = build_provenance(source, result.artifacts, result.summary["function"])
        seconds = time.perf_counter() - started
        console.print(f"provenance graph of {largest[0].name}: {built.graph.number_of_nodes()} nodes, {built.graph.number_of_edges()} edges in {seconds:.3f} s")


if __name__ == "__main__":
    main()

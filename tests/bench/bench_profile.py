"""Benchmark: `tracelink profile` against bare iree-compile + iree-benchmark-module, same run.

For every example and shared workload, runs the `tracelink profile` command (as a user does: its
start-up, report and all) and the bare tools doing the same compile and the same repetitions,
alternately for a few rounds, and prints the ratio of the median wall times (target ≤ 1.3×) and of
the median CPU times. Alternating rounds and medians, because on this shared VM the wall time of one
identical compile varies up to 3×. Last, the time to build the provenance graph of the largest workload.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.conftest import WORKLOAD_RUNS, WORKLOADS  # noqa: E402
from tracelink.iree_tools import benchmark_command  # noqa: E402
from tracelink.compile import TARGET_FLAGS  # noqa: E402
from tracelink.provenance.build import build_provenance  # noqa: E402
from tracelink.provenance.program import read_input_program  # noqa: E402
from tracelink.tools import tool_path  # noqa: E402

REPETITIONS = 10
ROUNDS = 3
PROGRAMS = {
    **{name: (REPO / "examples" / f"{name}.mlir", [], []) for name in ("mlp", "attention", "convnet")},
    **{name: (WORKLOADS / f"{name}.mlir", inputs, parameters) for name, (_, inputs, parameters) in WORKLOAD_RUNS.items()},
}


def timed(commands: list[list[str]]) -> tuple[float, float]:
    """Wall and CPU seconds (children's user + system) of running ``commands`` one after the other."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    for command in commands:
        subprocess.run(command, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    print(f"tracelink profile vs bare iree-compile + iree-benchmark-module ({REPETITIONS} repetitions + 1 warm-up), "
          f"median of {ROUNDS} alternating rounds")
    for name, (program, inputs, parameters) in PROGRAMS.items():
        with tempfile.TemporaryDirectory() as work_dir:
            work = Path(work_dir)
            traced_command = [str(Path(sys.executable).parent / "tracelink"), "profile", str(program), "-o", str(work / "out"),
                              f"--repetitions={REPETITIONS}", *(f"--input={i}" for i in inputs), *(f"--parameters={p}" for p in parameters)]
            timed([traced_command])  # first run: generates the inputs the bare run reuses
            function = __import__("json").loads((work / "out" / "profile.json").read_text())
            vmfb = work / "bare.vmfb"
            bare_commands = [
                [tool_path("iree-compile"), str(program), "-o", str(vmfb), *TARGET_FLAGS, "--iree-llvmcpu-target-cpu=host"],
                benchmark_command(vmfb, function["function"], function["inputs"], parameters, REPETITIONS + 1),
            ]
            traced, bare = [], []
            for _ in range(ROUNDS):
                bare.append(timed(bare_commands))
                traced.append(timed([traced_command]))
            wall_t, wall_b = statistics.median(t[0] for t in traced), statistics.median(b[0] for b in bare)
            cpu_t, cpu_b = statistics.median(t[1] for t in traced), statistics.median(b[1] for b in bare)
            print(f"{name:32s} wall {wall_t:5.2f} s vs {wall_b:5.2f} s = {wall_t / wall_b:4.2f}x (target <= 1.3x)   "
                  f"cpu {cpu_t:5.2f} s vs {cpu_b:5.2f} s = {cpu_t / cpu_b:4.2f}x", flush=True)
    largest = WORKLOADS / "clip_text_toy_f32.mlir"
    function, inputs, parameters = WORKLOAD_RUNS["clip_text_toy_f32"]
    with tempfile.TemporaryDirectory() as work_dir:
        out = Path(work_dir) / "out"
        subprocess.run([str(Path(sys.executable).parent / "tracelink"), "profile", str(largest), "-o", str(out), "--repetitions=1",
                        *(f"--input={i}" for i in inputs), *(f"--parameters={p}" for p in parameters)], check=True, capture_output=True)
        source = read_input_program(largest.resolve())
        started = time.perf_counter()
        built = build_provenance(source, out / "artifacts", function)
        seconds = time.perf_counter() - started
    print(f"provenance graph of {largest.name} (40 call sites, the most of the workloads): "
          f"{built.graph.number_of_nodes()} nodes, {built.graph.number_of_edges()} edges in {seconds:.3f} s")


if __name__ == "__main__":
    main()

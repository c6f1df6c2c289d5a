"""Benchmark: does profiling disturb what it measures? Recorded vs standalone dispatch time, per collector.

For each program, the dispatch time per iteration that `tracelink profile --collector C` records (its
profile.json, warm-up dropped) is compared with the same compiled program run alone: the bare
`iree-benchmark-module` under IREE's HAL profiler, started by this script with no tracelink process
around it (the baseline). Runs alternate (standalone, then each collector) for a few rounds and the
printed ratio is of the medians. Target: ≤ 1.03× for the HAL collector. The Tracy and hook collectors
change the build or the runtime (Tracy-enabled tools, system-library executables, per-workgroup hooks),
so their ratios are their overhead.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.conftest import WORKLOAD_RUNS, WORKLOADS  # noqa: E402
from tracelink.collect.hal import PROFILING_MODES, benchmark_command, export_bundle, hal_events  # noqa: E402

REPETITIONS = 20
ROUNDS = 3
COLLECTORS = ("hal", "tracy", "hook")
PROGRAMS = {
    "attention": (REPO / "examples" / "attention.mlir", [], []),
    "convnet": (REPO / "examples" / "convnet.mlir", [], []),
    **{name: (WORKLOADS / f"{name}.mlir", WORKLOAD_RUNS[name][1], WORKLOAD_RUNS[name][2]) for name in ("linalg_squeezenet1_1_64x64", "clip_text_toy_f32")},
}


def recorded(program: Path, out: Path, collector: str, inputs: list[str], parameters: list[str]) -> dict:
    """Run `tracelink profile` as a user does; its profile.json."""
    command = [str(Path(sys.executable).parent / "tracelink"), "profile", str(program), "-o", str(out), f"--repetitions={REPETITIONS}",
               f"--collector={collector}", *(f"--input={i}" for i in inputs), *(f"--parameters={p}" for p in parameters)]
    subprocess.run(command, check=True, capture_output=True)
    return json.loads((out / "profile.json").read_text())


def standalone(vmfb: Path, summary: dict, parameters: list[str], exports: list[str], work: Path) -> float:
    """Dispatch ns per iteration of the bare benchmark under the HAL profiler, warm-up dropped."""
    work.mkdir(parents=True, exist_ok=True)
    command = benchmark_command(vmfb, summary["function"], summary["inputs"], parameters, REPETITIONS + 1) + [
        f"--device_profiling_mode={PROFILING_MODES}", f"--device_profiling_output={work / 'run.ireeprof'}",
    ]
    subprocess.run(command, check=True, capture_output=True)
    events = hal_events(export_bundle(work, 600.0), exports)
    timed = events[events["iteration"] >= 1]
    return float(timed["duration_ns"].sum()) / REPETITIONS


def main() -> None:
    print(f"recorded / standalone dispatch time per iteration ({REPETITIONS} repetitions, median of {ROUNDS} alternating rounds)")
    for name, (program, inputs, parameters) in PROGRAMS.items():
        with tempfile.TemporaryDirectory() as work_dir:
            work = Path(work_dir)
            base = recorded(program, work / "hal0", "hal", inputs, parameters)  # compiles, generates the inputs
            calls = pd.read_csv(work / "hal0" / "call_sites.csv")
            exports = list(calls.loc[calls["phase"] == "run", "export"])
            vmfb = work / "hal0" / "artifacts" / "app.vmfb"
            alone: list[float] = []
            by_collector: dict[str, list[float]] = {c: [] for c in COLLECTORS}
            for round_index in range(ROUNDS):
                alone.append(standalone(vmfb, base, parameters, exports, work / f"alone{round_index}"))
                for collector in COLLECTORS:
                    summary = recorded(program, work / collector, collector, inputs, parameters)
                    by_collector[collector].append(summary["dispatch_ns_per_iteration"])
            reference = statistics.median(alone)
            ratios = "  ".join(f"{c} {statistics.median(v) / reference:4.2f}x" for c, v in by_collector.items())
            print(f"{name:28s} standalone {reference / 1e3:9.1f} µs/iter   {ratios}   (target hal <= 1.03x)", flush=True)


if __name__ == "__main__":
    main()

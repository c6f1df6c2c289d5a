"""Benchmark: does profiling disturb what it measures? Recorded vs standalone dispatch time, per collector.

For each program, the dispatch time per iteration that `tracelink profile --collector C` records (its
profile.json, warm-up dropped) is compared with the same compiled program run alone: the bare
`iree-benchmark-module` under IREE's HAL profiler, started by this script with no tracelink process
around it (the baseline). Each run is long enough (≥ ~0.3 s of dispatches) that the first slow
iterations after the warm-up do not decide the mean. Rounds alternate the order (standalone first, then
last) so a drift in machine load hits both sides alike; each round gives one paired ratio per collector,
and the printed figure is the median of those ratios with its distribution-free 95 % interval (the order
statistics tracelink uses for its own medians; with 11 rounds: the 2nd and 10th ratio). Target: ≤ 1.03×
for the HAL collector. The Tracy and hook collectors change the build or the runtime (Tracy-enabled
tools, system-library executables, per-workgroup hooks), so their ratios are their overhead.

Usage: .venv/bin/python tests/bench/bench_perturbation.py [--rounds 11] [--collectors hal tracy hook] [--programs NAME ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.conftest import WORKLOAD_RUNS, WORKLOADS  # noqa: E402
from tracelink.aggregate import median_interval_ranks  # noqa: E402
from tracelink.iree_tools import benchmark_command  # noqa: E402
from tracelink.collect.hal import PROFILING_MODES, export_bundle, hal_events  # noqa: E402

ROUNDS = 11
RUN_DISPATCH_NS = 3e8  # dispatch time per run: enough iterations that start-up effects average out
MIN_REPETITIONS, MAX_REPETITIONS = 20, 3000
COLLECTORS = ("hal", "tracy", "hook")
PROGRAMS = {
    "attention": (REPO / "examples" / "attention.mlir", [], []),
    "convnet": (REPO / "examples" / "convnet.mlir", [], []),
    **{name: (WORKLOADS / f"{name}.mlir", WORKLOAD_RUNS[name][1], WORKLOAD_RUNS[name][2]) for name in ("linalg_squeezenet1_1_64x64", "clip_text_toy_f32")},
}


def recorded(program: Path, out: Path, collector: str, inputs: list[str], parameters: list[str], repetitions: int) -> dict:
    """Run `tracelink profile` as a user does; its profile.json."""
    command = [str(Path(sys.executable).parent / "tracelink"), "profile", str(program), "-o", str(out), f"--repetitions={repetitions}", "--force",
               f"--collector={collector}", *(f"--input={i}" for i in inputs), *(f"--parameters={p}" for p in parameters)]
    subprocess.run(command, check=True, capture_output=True)
    return json.loads((out / "profile.json").read_text())


def standalone(vmfb: Path, summary: dict, parameters: list[str], exports: list[str], work: Path, repetitions: int) -> float:
    """Dispatch ns per iteration of the bare benchmark under the HAL profiler, warm-up dropped as tracelink does."""
    work.mkdir(parents=True, exist_ok=True)
    warmup = int(summary["warmup"])
    command = benchmark_command(vmfb, summary["function"], summary["inputs"], parameters, warmup + repetitions) + [
        f"--device_profiling_mode={PROFILING_MODES}", f"--device_profiling_output={work / 'run.ireeprof'}",
    ]
    subprocess.run(command, check=True, capture_output=True)
    events = hal_events(export_bundle(work, 600.0), exports)
    timed = events[events["iteration"] >= warmup]
    return float(timed["duration_ns"].sum()) / repetitions


def repetitions_for(ns_per_iteration: float) -> int:
    """Repetitions giving about ``RUN_DISPATCH_NS`` of dispatch time per run."""
    return min(MAX_REPETITIONS, max(MIN_REPETITIONS, math.ceil(RUN_DISPATCH_NS / max(ns_per_iteration, 1.0))))


def median_with_interval(ratios: list[float]) -> str:
    """``median× (low-high)``: the median of the ratios and its distribution-free 95 % interval."""
    ordered = sorted(ratios)
    low, high = (int(ranks[0]) for ranks in median_interval_ranks(np.array([len(ordered)])))
    return f"{statistics.median(ordered):4.2f}x ({ordered[low]:.2f}-{ordered[high]:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--collectors", nargs="+", choices=COLLECTORS, default=list(COLLECTORS))
    parser.add_argument("--programs", nargs="+", choices=list(PROGRAMS), default=list(PROGRAMS))
    args = parser.parse_args()
    print(f"recorded / standalone dispatch time per iteration: median of {args.rounds} paired rounds (95 % interval), order alternating")
    for name in args.programs:
        program, inputs, parameters = PROGRAMS[name]
        with tempfile.TemporaryDirectory() as work_dir:
            work = Path(work_dir)
            probe = recorded(program, work / "hal0", "hal", inputs, parameters, MIN_REPETITIONS)  # compiles, generates the inputs
            repetitions = repetitions_for(probe["dispatch_ns_per_iteration"])
            calls = pd.read_csv(work / "hal0" / "call_sites.csv")
            exports = list(calls.loc[calls["phase"] == "run", "export"])
            vmfb = work / "hal0" / "artifacts" / "app.vmfb"
            alone: list[float] = []
            ratios: dict[str, list[float]] = {c: [] for c in args.collectors}
            for round_index in range(args.rounds):
                order = ["alone", *args.collectors]
                measured: dict[str, float] = {}
                for side in order if round_index % 2 == 0 else order[::-1]:
                    if side == "alone":
                        measured[side] = standalone(vmfb, probe, parameters, exports, work / f"alone{round_index}", repetitions)
                    else:
                        measured[side] = recorded(program, work / side, side, inputs, parameters, repetitions)["dispatch_ns_per_iteration"]
                alone.append(measured["alone"])
                for collector in args.collectors:
                    ratios[collector].append(measured[collector] / measured["alone"])
            shown = "  ".join(f"{c} {median_with_interval(v)}" for c, v in ratios.items())
            print(f"{name:28s} {repetitions:5d} reps, standalone {statistics.median(alone) / 1e3:9.1f} µs/iter   {shown}   (target hal <= 1.03x)", flush=True)


if __name__ == "__main__":
    main()

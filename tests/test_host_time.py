"""A call's wall time beside its dispatch time (`profile.json` → `host_time`), checked against IREE's own timing.

A chain of 40 tiny matmuls is host time by construction (each dispatch does 128 multiply-adds, far
less than launching it costs); a 512³ matmul pair is dispatch time. The wall time per call that
tracelink reads from the profiled run is raced against the bare `iree-benchmark-module` on the same
build, alternately.
"""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, run_profile
from tracelink.aggregate.host_time import call_spans, host_time
from tracelink.collect.collectors import RunRequest, start_collection
from tracelink.iree_tools import benchmark_command, benchmark_times_ns
from tracelink.collect.hal import wall_ns_per_call
from tracelink.report.summary import host_time_text
from tracelink.compare.diff import run_inputs

ROUNDS = 4
# Calls per run: a call's period is bimodal on local-task (1.8 ms or 2-4 ms longer for this program),
# so the mean of 10 moved 0.76-1.0x between runs; of 40 it holds still
CALLS = 40


def chain_program(path: Path, links: int = 40) -> Path:
    lines = ["func.func @main(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> {", "  %c0 = arith.constant 0.0 : f32"]
    previous = "%x"
    for index in range(links):
        lines += [
            f"  %e{index} = tensor.empty() : tensor<4x4xf32>",
            f"  %f{index} = linalg.fill ins(%c0 : f32) outs(%e{index} : tensor<4x4xf32>) -> tensor<4x4xf32>",
            f"  %m{index} = linalg.matmul ins({previous}, %w : tensor<4x4xf32>, tensor<4x4xf32>) outs(%f{index} : tensor<4x4xf32>) -> tensor<4x4xf32>",
        ]
        previous = f"%m{index}"
    path.write_text("\n".join([*lines, f"  return {previous} : tensor<4x4xf32>", "}"]) + "\n")
    return path


def test_host_time_dominates_a_chain_of_tiny_dispatches(tmp_path):
    profile = run_profile(chain_program(tmp_path / "chain.mlir"), tmp_path / "out", repetitions=20)
    host = profile.summary["host_time"]
    assert host["calls"] == 20
    assert host["host_share"] > 0.5  # 40 launches cost more than 40 × 128 multiply-adds
    # the split adds up to the wall time: busy + between + outside
    parts = host["dispatch_busy_ns_per_call"] + host["between_dispatches_ns_per_call"] + host["outside_dispatches_ns_per_call"]
    assert parts == pytest.approx(host["wall_ns_per_call"], rel=1e-6)
    # each call's busy time is at most its summed dispatch durations (overlapping dispatches count once)
    spans = call_spans(profile.events)
    summed = profile.events.groupby("iteration")["duration_ns"].sum().loc[spans["iteration"]].to_numpy()
    assert (spans["busy_ns"].to_numpy() <= summed).all() and (spans["busy_ns"] > 0).all()
    text = host_time_text(profile.summary)
    assert "host time dominates" in text and "local-sync" in text
    report = (tmp_path / "out" / "report.html").read_text()
    assert "wall time per call" in report and "host time dominates" in report


def walls_by_tracelink(vmfb: Path, function: str, inputs: list[str], exports: list[str], artifacts: Path) -> tuple[float, float]:
    """The HAL collector's run (1 warm-up + CALLS calls): the wall time per call as the profile reads it from
    the events, and as the benchmark tool timed the same calls (its mean, the warm-up among them)."""
    artifacts.mkdir()
    collected = start_collection("hal", RunRequest(vmfb, function, inputs, [], CALLS + 1, artifacts, 300.0)).finish(exports, 1)
    return host_time(collected.events)["wall_ns_per_call"], wall_ns_per_call(artifacts)


def wall_by_iree(vmfb: Path, function: str, inputs: list[str]) -> float:
    """The bare benchmark tool, no profiler: the median of 3 repetitions of CALLS calls."""
    command = benchmark_command(vmfb, function, inputs, [], CALLS) + ["--benchmark_repetitions=3", "--benchmark_format=json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    return statistics.median(benchmark_times_ns(done.stdout))


def test_wall_time_per_call_agrees_with_iree_benchmark_module(tmp_path):
    """Within one profiled run, the period the events give against the benchmark tool's own timer of the
    same calls: within 15 %. Against the bare tool without the profiler, raced alternately: within the
    spread of the bare tool's own runs, widened by 30 %. Separate processes cannot be held closer here:
    a run's period is bimodal on local-task, so the bare tool alone read 1.96-3.55 ms across 8 rounds,
    and CI once read 2.13-3.14 ms while the profiled runs read 2.32-3.65 ms. What the profiler costs a
    run is measured by `tests/bench/bench_perturbation.py`, not by a timed test."""
    profile = run_profile(EXAMPLES / "matmul_heavy.mlir", tmp_path / "out", repetitions=10)
    vmfb, function, inputs = profile.artifacts / "app.vmfb", profile.summary["function"], run_inputs(profile)
    exports = list(profile.call_sites.sort_values("call_site")["export"])
    ours, same_run, bare = [], [], []
    for round_ in range(ROUNDS):  # alternately, so a busy moment of the machine hits both
        period, timer = walls_by_tracelink(vmfb, function, inputs, exports, tmp_path / f"round{round_}")
        ours.append(period)
        same_run.append(timer)
        bare.append(wall_by_iree(vmfb, function, inputs))
    assert 0.85 <= statistics.median(o / s for o, s in zip(ours, same_run)) <= 1.15, (ours, same_run)
    assert 0.7 * min(bare) <= statistics.median(ours) <= 1.3 * max(bare), (ours, bare)

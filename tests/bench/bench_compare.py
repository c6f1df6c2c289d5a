"""Benchmark: are comparisons honest, and how much of the shared workloads can `tune` reach? Not a test.

1. A/A test: two profiles of the same program (examples/mlp.mlir, so the two builds are the same
   vmfb), compared `trials` times by `tracelink diff` with its default rounds. Every trial must say
   "no significant difference" end to end; target: at least 19 of 20 (a 95 % interval is allowed
   one miss in 20). Also the share of per-op rows wrongly called different, and how the recorded
   profiles alone (--rounds 0) compare: their speedup is what the old diff reported with confidence.
   Each trial also runs the CI gates (`diff --fail-if-slower 5 --fail-if-larger 1`): target 0 failures.
2. Reach: for every shared workload, the share of timed dispatch time in dispatches `tune` can tune
   (no tuning is run; the dispatches are read and checked as `tune` does), and the skip reasons.

The machine is shared: timings are noisy, and that is what the A/A test measures.
Usage: .venv/bin/python tests/bench/bench_compare.py [--trials 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from rich.console import Console

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.conftest import run_profile  # noqa: E402
from tests.conftest import WORKLOAD_RUNS, WORKLOADS  # noqa: E402
from tracelink.compile.benchmarks import ensure_benchmark_dumps  # noqa: E402
from tracelink.profile_dir.profile import load_profile  # noqa: E402
from tracelink.compare.diff import DEFAULT_ROUNDS, diff_profiles, gate_verdicts  # noqa: E402
from tracelink.aggregate.speedup import NOT_SIGNIFICANT  # noqa: E402
from tracelink.tune.targets import examine  # noqa: E402

REACH_RUNS = {**WORKLOAD_RUNS, "linalg_resnet18": ("forward", ["1x3x224x224xf32=0.5"], []),
              "linalg_squeezenet1_1_64x64": ("forward", ["1x3x64x64xf32=0.5"], [])}


GATE_SLOWER_PCT, GATE_LARGER_PCT = 5.0, 1.0


def a_a_test(out: Path, trials: int, iterations: int, console: Console) -> None:
    program = REPO / "examples" / "mlp.mlir"
    first, second = out / "aa_first", out / "aa_second"
    for directory in (first, second):
        run_profile(program, directory, repetitions=iterations)
    recorded = diff_profiles(first, second, rounds=0).attrs["end_to_end"]
    console.print(f"recorded profiles alone (--rounds 0): {recorded['speedup']:.2f}x, {recorded['verdict']}")
    quiet, wrong_rows, rows, gated, started = 0, 0, 0, 0, time.perf_counter()
    for trial in range(trials):
        frame = diff_profiles(first, second, rounds=DEFAULT_ROUNDS, iterations=iterations)
        total = frame.attrs["end_to_end"]
        quiet += total["verdict"] == NOT_SIGNIFICANT
        gated += any(gate["failed"] for gate in gate_verdicts(frame, GATE_SLOWER_PCT, GATE_LARGER_PCT).values())
        rows += len(frame)
        wrong_rows += int((frame["verdict"] != NOT_SIGNIFICANT).sum())
        console.print(f"  trial {trial + 1}: {total['speedup']:.3f}x (95% CI {total['ci_low']:.3f}-{total['ci_high']:.3f}) "
                      f"{total['verdict']}{' [busy]' if total['load_warning'] else ''}")
    console.print(f"A/A: 'no significant difference' end to end in {quiet} of {trials} trials "
                  f"({DEFAULT_ROUNDS} rounds x {iterations} iterations each, {time.perf_counter() - started:.0f} s); "
                  f"per-op rows called different: {wrong_rows} of {rows}; target >= 19 of 20 -> "
                  f"{'met' if quiet >= trials - trials // 20 else 'NOT met'}")
    console.print(f"A/A gates (--fail-if-slower {GATE_SLOWER_PCT:g} --fail-if-larger {GATE_LARGER_PCT:g}): failed in {gated} of {trials} "
                  f"trials; target 0 -> {'met' if gated == 0 else 'NOT met'}")


def reach(out: Path, console: Console) -> None:
    for name, (function, inputs, parameters) in REACH_RUNS.items():
        directory = out / f"reach_{name}"
        try:
            run_profile(WORKLOADS / f"{name}.mlir", directory, function=function, inputs=inputs,
                        parameters=parameters, repetitions=3)
        except Exception as error:  # a workload that does not profile is reported, the others go on
            console.print(f"{name}: not profiled ({error})")
            continue
        profile = load_profile(directory)
        # as tune does: the benchmark dumps are written from the phase dumps when first needed
        ensure_benchmark_dumps(profile.artifacts, profile.exports["benchmark_file"])
        examined = [examine(row, profile.artifacts) for row in profile.exports.itertuples()]
        share = sum(t.share for t in examined if t.dispatch is not None)
        reasons = Counter()
        for target in examined:
            if target.dispatch is None:
                reasons[_reason_kind(target.reason)] += target.share
        top = ", ".join(f"{reason} {part:.1%}" for reason, part in reasons.most_common(3))
        console.print(f"{name}: tunable {share:.1%} of timed dispatch time; skipped: {top or 'nothing'}")


def _reason_kind(reason: str) -> str:
    """A skip reason without the dispatch-specific part (file and export names)."""
    for kind in ("no tunable root op", "initializer-only", "rewritten during configuration", "dynamic shape",
                 "cannot evaluate", "element type"):
        if kind in reason:
            return kind
    return reason.split(": ")[-1][:60]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench_compare")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--iterations", type=int, default=10)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    console = Console(highlight=False)
    console.rule("A/A test: diff of two profiles of the same program")
    a_a_test(args.out, args.trials, args.iterations, console)
    console.rule("share of dispatch time tune can reach (shared workloads)")
    reach(args.out, console)


if __name__ == "__main__":
    main()

"""Benchmark: how fast the tuners find good tile configs, and what tuning gains end to end. Not a test.

1. Search efficiency, on the 512^3 f32 matmul and the space of examples/tune.toml. Every configuration
   of the space is measured once for real (compiled, verified against the default, timed; cached in
   the output directory, so reruns are cheap), then each tuner is replayed against that table with
   several seeds: the number of trials it needs to reach 95% of the best throughput of the whole
   space. Target: the XGBoost tuner within 15% of the space; random search is the baseline.
2. End to end, on examples/matmul_heavy.mlir: `tracelink profile`, `tracelink tune` (examples/tune.toml),
   `tracelink profile` of the tuned build and `diff --rounds`, which runs both programs again
   alternately (so both see the same machine load): the speedup of all dispatches per iteration with
   its 95% interval from the per-round medians. Target: >= 1.3x with the interval above 1. For
   reference also the whole program under iree-benchmark-module with and without the spec.

Usage: .venv/bin/python tests/bench/bench_tune.py [--out DIR] [--seeds 20] [--skip-end-to-end]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tracelink.tools import tool_path  # noqa: E402
from tracelink.tune.config import load_config  # noqa: E402
from tracelink.tune.diff import diff_profiles  # noqa: E402
from tracelink.tune.dispatch import load_dispatch  # noqa: E402
from tracelink.tune.measure import Measurer, make_pool, progress_bar  # noqa: E402
from tracelink.tune.space import TileSpace  # noqa: E402
from tracelink.tune.tuners import make_tuner, search  # noqa: E402

CONFIG = REPO / "examples" / "tune.toml"
MATMUL = """
func.func @main(%a: tensor<512x512xf32>, %b: tensor<512x512xf32>) -> tensor<512x512xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<512x512xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<512x512xf32>) -> tensor<512x512xf32>
  %c = linalg.matmul ins(%a, %b : tensor<512x512xf32>, tensor<512x512xf32>)
                     outs(%acc : tensor<512x512xf32>) -> tensor<512x512xf32>
  return %c : tensor<512x512xf32>
}
"""
TARGET = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
          "--iree-llvmcpu-target-cpu=host"]
TRACELINK = [sys.executable, "-m", "tracelink.cli"]
APP_INPUTS = ("512x512xf32", "512x512xf32", "512xf32", "512x512xf32", "512xf32")  # matmul_heavy's @main


def exhaustive_table(out: Path, console: Console) -> tuple[TileSpace, pd.DataFrame, float]:
    """Measure every configuration of the space once (cached in out/table.csv); also the default's GFLOP/s."""
    program = out / "matmul512.mlir"
    program.write_text(MATMUL)
    dump = out / "dump"
    dump.mkdir(exist_ok=True)
    subprocess.run([tool_path("iree-compile"), str(program), "-o", str(dump / "app.vmfb"), *TARGET,
                    f"--iree-hal-dump-executable-benchmarks-to={dump}"], check=True, capture_output=True)
    dispatch = load_dispatch(next(dump.glob("*_benchmark.mlir")))
    config = load_config(CONFIG)
    space = TileSpace(dispatch, config.space)
    table_path = out / "table.csv"
    if table_path.exists():
        table = pd.read_csv(table_path)
        if len(table) == len(space):
            default = json.loads((out / "default.json").read_text())["gflops"]
            return space, table, default
    pool = make_pool(config.measure.jobs)
    started = time.perf_counter()
    try:
        measurer = Measurer(dispatch, out / "work", config.measure, pool, console)
        with progress_bar(console) as progress:
            default = measurer.measure_default(progress)
            rows = []
            batch = 16
            for start in range(0, len(space), batch):
                indices = range(start, min(start + batch, len(space)))
                trials = measurer.measure([(i, "exhaustive", space.knob_values(i), space.config(i)) for i in indices], progress)
                rows += [{"index": i, **t.row()} for i, t in zip(indices, trials)]
    finally:
        pool.shutdown()
    table = pd.DataFrame(rows)
    table.to_csv(table_path, index=False)
    (out / "default.json").write_text(json.dumps({"gflops": default.gflops, "runtime_ms": default.runtime_ms}))
    console.print(f"measured {len(space)} configurations in {time.perf_counter() - started:.0f} s")
    return space, table, default.gflops


def trials_to_reach(space: TileSpace, throughput: np.ndarray, tuner_name: str, seed: int, goal: float) -> int | None:
    """Trials a tuner needs (replayed against the table) until one reaches ``goal`` GFLOP/s."""
    tuner = make_tuner(tuner_name, space, seed=seed, budget=len(space))
    seen: list[float] = []

    def measure(indices: list[int]) -> list[float]:
        values = [float(throughput[i]) for i in indices]
        seen.extend(values)
        return values

    search(tuner, measure, len(space), batch_size=8)
    for count, value in enumerate(seen, start=1):
        if value >= goal:
            return count
    return None


def search_efficiency(out: Path, seeds: int, console: Console) -> None:
    space, table, default_gflops = exhaustive_table(out, console)
    throughput = table.sort_values("index")["gflops"].fillna(0).to_numpy()
    best = throughput.max()
    goal = 0.95 * best
    ok = table["verification"] == "ok"
    console.print(f"space: {len(space)} configs, {int((~ok).sum())} failed "
                  f"({', '.join(f'{k}: {v}' for k, v in table.loc[~ok, 'verification'].value_counts().items()) or 'none'}); "
                  f"best {best:.1f} GFLOP/s = {best / default_gflops:.2f}x the default ({default_gflops:.1f}); "
                  f"{int((throughput >= goal).sum())} configs within 95% of the best")
    results = {}
    for name in ("xgb", "random", "grid"):
        counts = [trials_to_reach(space, throughput, name, seed, goal) for seed in range(seeds if name != "grid" else 1)]
        found = [c for c in counts if c is not None]
        results[name] = found
        console.print(f"{name:>6}: trials to 95% of the best, over {len(counts)} seed(s): median {np.median(found):.0f} "
                      f"({np.median(found) / len(space):.1%} of the space), mean {np.mean(found):.1f}, "
                      f"90th percentile {np.percentile(found, 90):.0f} ({np.percentile(found, 90) / len(space):.1%})")
    xgb, rnd = np.median(results["xgb"]), np.median(results["random"])
    console.print(f"xgb needs {xgb / rnd:.2f}x the trials of random search (median); "
                  f"target: xgb <= 15% of the space -> {'met' if xgb <= 0.15 * len(space) else 'NOT met'}")


def whole_app_rounds(program: Path, spec: Path, out: Path, rounds: int) -> dict[str, tuple[float, float, float]]:
    """iree-benchmark-module on the whole program with and without the spec (local-task, the device the
    profile uses), alternating in rounds; per clock, the median of the per-round ratios and its 95% CI."""
    from tracelink.tune.measure import Timing

    vmfbs = {}
    for name, extra in (("base", []), ("tuned", [f"--iree-codegen-tuning-spec-path={spec}"])):
        vmfbs[name] = out / f"app_{name}.vmfb"
        subprocess.run([tool_path("iree-compile"), str(program), "-o", str(vmfbs[name]), *TARGET, *extra],
                       check=True, capture_output=True)
    inputs = [f"--input={shape}=1" for shape in APP_INPUTS]
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for name, vmfb in vmfbs.items():
            done = subprocess.run([tool_path("iree-benchmark-module"), f"--module={vmfb}", "--device=local-task",
                                   "--function=main", *inputs, "--benchmark_repetitions=3",
                                   "--benchmark_min_time=0.2s", "--benchmark_format=json"],
                                  check=True, capture_output=True, text=True)
            rows = [r for r in json.loads(done.stdout[done.stdout.find("{"):])["benchmarks"] if r["run_type"] == "iteration"]
            for clock in ("real_time", "cpu_time"):
                samples.setdefault((name, clock), []).append(float(np.median([r[clock] for r in rows])))
    result = {}
    for clock in ("real_time", "cpu_time"):
        ratios = Timing([b / t for b, t in zip(samples[("base", clock)], samples[("tuned", clock)])])
        result[clock] = (ratios.median, *ratios.ci())
    return result


def end_to_end(out: Path, repetitions: int, rounds: int, console: Console) -> None:
    program = REPO / "examples" / "matmul_heavy.mlir"
    first, spec = out / "e2e_base", out / "e2e_spec.mlir"
    started = time.perf_counter()
    for command in (
        ["profile", str(program), "-o", str(first), "--repetitions", str(repetitions)],
        ["tune", str(first), "--config", str(CONFIG), "-o", str(spec)],
    ):
        done = subprocess.run([*TRACELINK, *command], capture_output=True, text=True)
        if done.returncode != 0:
            console.print(f"tracelink {command[0]} failed: {done.stderr.strip()}")
            return
        if command[0] == "tune":
            console.print(done.stdout.strip())
    console.print(f"profile + tune: {time.perf_counter() - started:.0f} s")
    if not spec.exists():
        console.print("no spec was written (no significantly faster config): end-to-end speedup 1.00x")
        return
    tuned = out / "e2e_tuned"
    subprocess.run([*TRACELINK, "profile", str(program), "-o", str(tuned), "--repetitions", str(repetitions),
                    "--tuning-spec", str(spec)], check=True, capture_output=True)
    # Both programs run again alternately, so drifts of the machine's load hit both.
    frame = diff_profiles(first, tuned, rounds=rounds, iterations=repetitions)
    console.print(f"per source op (`tracelink diff --rounds {rounds}`, {repetitions} iterations per run):")
    for row in frame.head(4).itertuples():
        console.print(f"  {row.label}: {row.base_ns / 1e6:.3f} -> {row.tuned_ns / 1e6:.3f} ms, "
                      f"{row.speedup:.2f}x (95% CI {row.ci_low:.2f}-{row.ci_high:.2f}), {row.verdict}")
    total = frame.attrs["end_to_end"]
    met = total["speedup"] >= 1.3 and total["ci_low"] > 1
    console.print(f"end to end, {rounds} alternating rounds: {total['base_ns'] / 1e6:.3f} -> {total['tuned_ns'] / 1e6:.3f} ms "
                  f"of dispatches per iteration, {total['speedup']:.2f}x (95% CI {total['ci_low']:.2f}-{total['ci_high']:.2f}), "
                  f"{total['verdict']}; target >= 1.3x with the interval above 1 -> {'met' if met else 'NOT met'}"
                  + (f"\n  warning: {total['load_warning']}" if total["load_warning"] else ""))
    for clock, (speedup, low, high) in whole_app_rounds(program, spec, out, 2 * rounds + 2).items():
        console.print(f"whole program, iree-benchmark-module local-task, {clock} ({2 * rounds + 2} paired rounds): "
                      f"{speedup:.2f}x (95% CI {low:.2f}-{high:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench_tune")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--repetitions", type=int, default=40, help="iterations of each end-to-end profile")
    parser.add_argument("--rounds", type=int, default=6, help="alternating runs of each build")
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--skip-end-to-end", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    console = Console(highlight=False)
    if not args.skip_search:
        console.rule("search efficiency (512^3 f32 matmul)")
        search_efficiency(args.out, args.seeds, console)
    if not args.skip_end_to_end:
        console.rule("end to end (examples/matmul_heavy.mlir)")
        end_to_end(args.out, args.repetitions, args.rounds, console)


if __name__ == "__main__":
    main()

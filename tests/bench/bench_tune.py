"""Benchmark: how fast the tuners find good tile configs, and what tuning gains end to end. Not a test.

1. Search efficiency, on the 512^3 f32 matmul and the space of examples/tune.toml. Every configuration
   of the space is measured once for real (compiled, verified against the default, timed; cached in
   the output directory, so reruns are cheap), then each tuner is replayed against that table with
   several seeds: the number of trials it needs to reach 95% of the best throughput of the whole
   space. Target: the XGBoost tuner within 15% of the space; random search is the baseline.
2. Live search race, on the hottest matmul of examples/matmul_heavy.mlir and the hottest convolution of
   examples/convnet.mlir: the XGBoost tuner and random search each run the real search (compile, verify,
   time) with the same trial budget, for several seeds; a configuration measured once is not measured
   again (so both see the same number for it). Printed: the trials each needed to reach 95 % of the best
   time found by either, and their ratio (xgb / random; below 1: the cost model finds good configs sooner).
3. End to end, on linalg_resnet18.mlir, clip_text_toy_f32 and examples/matmul_heavy.mlir: `tracelink
   profile` and `tracelink tune` (its per-config and whole-program checks included), then the default
   build, the flag baselines tune compiled (ukernels, data tiling, both) and the tuned build run
   alternately (iree-benchmark-module, local-task): the tuned program's speedup over IREE's default and
   over the best flag baseline, each with a 95 % interval from the per-round ratios. Target: >= 1.2x over
   the default on at least one real model, never below 1.0 with confidence.

4. Strategies on real weights: squeezenet 1.0, inception_v1 and resnet50 from ONNX's light models, their
   splat weights replaced by seeded random ones (../shared/tools/materialize_weights.py). `tracelink
   profile`, then `tracelink tune` with its default budget (strategy search, then tiles on the winner);
   then IREE's default build, every whole-program option set the strategy search built and checked
   (single options and combinations), and the build tune hands over run alternately: each one's
   speedup over the default with a 95 % interval, and tune's build over the best single option set and
   over each whole-program option set of the same rounds; the per-op compositions tune built are raced
   too, handed over or not. Then the same for a ViT from `transformers` (SDPA attention; random weights
   from a seeded config), profiled from its Python file, with the same model's eager-attention export
   (matmul, softmax, matmul) raced beside it as the anchor. Targets: tune's build >= 5x, 5x, 2x, 2x
   the default, and not significantly slower than the best single option set. `make bench-strategies`
   runs this section alone.

Usage: .venv/bin/python tests/bench/bench_tune.py [--out DIR] [--seeds 20] [--skip-search] [--race-programs NAME ...]
       [--race-budget 24] [--race-seeds 3] [--workloads NAME ...] [--real NAME ...] [--budget 20m] [--real-rounds 40]
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

from tests.conftest import SHARED, WORKLOAD_RUNS, WORKLOADS, run_profile  # noqa: E402
from tests.vit_model import vit_source  # noqa: E402
from tracelink.errors import TracelinkError  # noqa: E402
from tracelink.profile_dir.profile import load_profile  # noqa: E402
from tracelink.tools import tool_path  # noqa: E402
from tracelink.tune.config import load_config  # noqa: E402
from tracelink.compare.diff import run_inputs, run_parameters  # noqa: E402
from tracelink.tune.dispatch import Dispatch, load_dispatch  # noqa: E402
from tracelink.tune.measure import Measurer, make_pool  # noqa: E402
from tracelink.tune.progress import ProgressBar  # noqa: E402
from tracelink.collect.rounds import alternate, time_program  # noqa: E402
from tracelink.aggregate.speedup import summarize  # noqa: E402
from tracelink.tune.program_check import build_baselines  # noqa: E402
from tracelink.tune.space import SpaceOptions, TileSpace  # noqa: E402
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
TRACELINK = [sys.executable, "-m", "tracelink.commands.cli"]
WORKLOADS_E2E = {  # name: (program, (function, inputs, parameters))
    "linalg_resnet18": (WORKLOADS / "linalg_resnet18.mlir", WORKLOAD_RUNS["linalg_resnet18"]),
    "clip_text_toy_f32": (WORKLOADS / "clip_text_toy_f32.mlir", WORKLOAD_RUNS["clip_text_toy_f32"]),
    "matmul_heavy": (REPO / "examples" / "matmul_heavy.mlir", ("main", [], [])),
}


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
        measurer = Measurer(dispatch, out / "work", config.measure, pool)
        with ProgressBar(console) as progress:
            default = measurer.measure_default(progress.report)
            rows = []
            batch = 16
            for start in range(0, len(space), batch):
                indices = range(start, min(start + batch, len(space)))
                trials = measurer.measure([(i, "exhaustive", space.knob_values(i), space.config(i)) for i in indices], progress.report)
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


RACE_PROGRAMS = {"matmul_heavy": REPO / "examples" / "matmul_heavy.mlir", "convnet": REPO / "examples" / "convnet.mlir"}


def hottest_dispatch(program: Path, dump: Path) -> Dispatch:
    """The tunable dispatch of ``program`` with the most flops (its root op's), from a benchmark dump."""
    dump.mkdir(parents=True, exist_ok=True)
    subprocess.run([tool_path("iree-compile"), str(program), "-o", str(dump / "app.vmfb"), *TARGET,
                    f"--iree-hal-dump-executable-benchmarks-to={dump}"], check=True, capture_output=True)
    tunable = []
    for path in sorted(dump.glob("*_benchmark.mlir")):
        try:
            tunable.append(load_dispatch(path))
        except TracelinkError:
            continue
    return max(tunable, key=lambda dispatch: dispatch.flops)


def first_reaching(values: list[float], goal: float) -> int | None:
    """1-based position of the first value at or above ``goal``; None when none reaches it."""
    return next((count for count, value in enumerate(values, start=1) if value >= goal), None)


def search_race(name: str, out: Path, budget: int, seeds: int, console: Console) -> None:
    """XGBoost against random search on one real dispatch, same budget, live measurements shared by both."""
    workdir = out / f"race_{name}"
    dispatch = hottest_dispatch(RACE_PROGRAMS[name], workdir / "dump")
    config = load_config(CONFIG)
    options = config.space if dispatch.kind == "contraction" else SpaceOptions()
    space = TileSpace(dispatch, options)
    console.print(f"{name}: {dispatch.export} ({dispatch.root_op} {dispatch.shapes}), {len(space)} configs; "
                  f"budget {budget} trials, {seeds} seed(s) per tuner")
    measured: dict[int, float] = {}  # point -> GFLOP/s (0: failed); each config is measured once
    pool = make_pool(config.measure.jobs)
    started = time.perf_counter()
    try:
        measurer = Measurer(dispatch, workdir / "work", config.measure, pool)
        with ProgressBar(console) as progress:
            default = measurer.measure_default(progress.report)

            def measure(indices: list[int]) -> list[float]:
                new = [i for i in indices if i not in measured]
                trials = measurer.measure([(i, "race", space.knob_values(i), space.config(i)) for i in new], progress.report)
                measured.update({i: t.gflops if t.ok else 0.0 for i, t in zip(new, trials)})
                return [measured[i] for i in indices]

            runs: dict[str, list[list[float]]] = {"xgb": [], "random": []}
            for seed in range(seeds):
                for tuner_name in runs:
                    seen: list[float] = []

                    def recorded(batch: list[int], seen: list[float] = seen) -> list[float]:
                        values = measure(batch)
                        seen.extend(values)
                        return values

                    search(make_tuner(tuner_name, space, seed=seed), recorded, budget, batch_size=config.search.batch_size)
                    runs[tuner_name].append(seen)
    finally:
        pool.shutdown()
    best = max(measured.values())
    console.print(f"  measured {len(measured)} distinct configs in {time.perf_counter() - started:.0f} s; best "
                  f"{best:.1f} GFLOP/s = {best / default.gflops:.2f}x the default ({default.gflops:.1f})")
    medians = {}
    for tuner_name, seen_runs in runs.items():
        counts = [first_reaching(seen, 0.95 * best) for seen in seen_runs]
        # a run that never reached the goal counts as budget + 1 (a lower bound on what it needed)
        medians[tuner_name] = float(np.median([c if c is not None else budget + 1 for c in counts]))
        shown = ", ".join(str(c) if c is not None else f">{budget}" for c in counts)
        reached = sum(c is not None for c in counts)
        console.print(f"  {tuner_name:>6}: trials to 95% of the best found by either: {shown} (median "
                      f"{medians[tuner_name]:.1f}; reached within the budget in {reached} of {len(counts)} runs)")
    console.print(f"  xgb / random trials to 95% of the best (medians): {medians['xgb'] / medians['random']:.2f}")


def end_to_end(name: str, program: Path, run: tuple[str, list[str], list[str]], out: Path, args: argparse.Namespace,
               console: Console) -> None:
    """Profile, tune (in-program checks included), then time the default build, every flag baseline and
    the tuned build alternately: the tuned program's speedup over IREE's default and over the best flag
    baseline, each with the 95 % interval of the per-round ratios (see tracelink.collect.rounds)."""
    function, inputs, parameters = run
    base = out / f"e2e_{name}"
    started = time.perf_counter()
    run_profile(program, base, function=function, inputs=inputs, parameters=parameters, repetitions=args.repetitions)
    done = subprocess.run([*TRACELINK, "tune", str(base), "--top", str(args.top), "--trials", str(args.trials),
                           "--rounds", str(args.rounds)], capture_output=True, text=True)
    console.print(done.stdout.strip() or done.stderr.strip().splitlines()[-1])
    console.print(f"profile + tune: {time.perf_counter() - started:.0f} s")
    if done.returncode != 0:
        return
    profile = load_profile(base)
    shipped = (base / "tune" / "spec.mlir").exists() or (base / "tune" / "configurations").exists()
    # tune builds the flag baselines only for its whole-program check, when it found something to check
    baselines = base / "tune" / "baselines"
    flag_builds = ({d.name: d / "app.vmfb" for d in sorted(baselines.glob("*")) if (d / "app.vmfb").exists()}
                   if baselines.exists() else build_baselines(profile, baselines, 900.0))
    builds = {"default": profile.artifacts / "app.vmfb", **flag_builds}
    if shipped:
        builds["tuned"] = base / "tune" / "spec_check" / "app.vmfb"
    runs = [lambda _, v=v: time_program(v, function, run_inputs(profile), run_parameters(profile),
                                        max(5, args.repetitions), 600.0) for v in builds.values()]
    times = dict(zip(builds, alternate(runs, args.rounds)))
    for build in builds:
        if build != "default":
            check = summarize(times["default"], times[build])
            console.print(f"  {build} over IREE's default: {check['speedup']:.2f}x (95% CI {check['ci_low']:.2f}-"
                          f"{check['ci_high']:.2f}), {check['verdict']}")
    if not shipped:
        console.print("  tune shipped no tuning (nothing significantly faster in the program): tuned = default, 1.00x")
        return
    flags = [b for b in builds if b not in ("default", "tuned")]
    if flags:
        best = min(flags, key=lambda b: float(np.median(times[b])))
        check = summarize(times[best], times["tuned"])
        console.print(f"  tuned over the best flag baseline ({best}): {check['speedup']:.2f}x (95% CI "
                      f"{check['ci_low']:.2f}-{check['ci_high']:.2f}), {check['verdict']}")
    over_default = summarize(times["default"], times["tuned"])
    console.print(f"  target >= 1.2x over the default on a real model, never below 1.0 with confidence -> "
                  f"{'below 1.0!' if over_default['ci_high'] < 1 else ('>= 1.2x' if over_default['speedup'] >= 1.2 else 'under 1.2x')}"
                  + (f"\n  warning: {over_default['load_warning']}" if over_default["load_warning"] else ""))


LIGHT = Path(__import__("onnx").__file__).parent / "backend" / "test" / "data" / "light"
REAL_MODELS = {  # name: (light model, the speedup over IREE's default that tune's build must reach)
    "squeezenet": (LIGHT / "light_squeezenet.onnx", 5.0),
    "inception_v1": (WORKLOADS / "light_inception_v1.onnx", 5.0),
    "resnet50": (WORKLOADS / "light_resnet50.onnx", 2.0),
}


# A ViT as `transformers` defines it (SDPA attention), 384 wide, 6 heads, 6 layers, 197 tokens; its
# `eager()` (the same weights, matmul-softmax-matmul attention) is the anchor: the speed a hand-written
# attention gets from IREE.
VIT = vit_source(hidden=384, heads=6, layers=6, image=224)
TRANSFORMERS = {"vit": (VIT, 2.0)}  # name: (model file, the speedup over IREE's default tune's build must reach)


def strategies_real(name: str, out: Path, args: argparse.Namespace, console: Console) -> None:
    """Profile a real-weight ONNX model, then tune it and race (:func:`race_tune`)."""
    light, target = REAL_MODELS[name]
    work = out / f"real_{name}"
    work.mkdir(parents=True, exist_ok=True)
    model = work / f"{name}.onnx"
    if not model.exists():
        subprocess.run([sys.executable, str(SHARED / "tools" / "materialize_weights.py"), str(light), str(model)],
                       check=True, capture_output=True)
    base = work / "base"
    started = time.perf_counter()
    if not (base / "profile.json").exists():
        run_profile(model, base, repetitions=args.repetitions)
    race_tune(base, target, time.perf_counter() - started, args, console)


def transformer_real(name: str, out: Path, args: argparse.Namespace, console: Console) -> None:
    """Profile a `transformers` model from its Python file, and its eager-attention twin as the anchor; then
    tune the model and race (:func:`race_tune`), the anchor's default build among the builds."""
    source, target = TRANSFORMERS[name]
    work = out / f"real_{name}"
    work.mkdir(parents=True, exist_ok=True)
    model = work / f"{name}.py"
    model.write_text(source)
    base, anchor = work / "base", work / "eager"
    started = time.perf_counter()
    for directory, entry in ((base, "make"), (anchor, "eager")):
        if not (directory / "profile.json").exists():
            run_profile(f"{model}:{entry}", directory, repetitions=args.repetitions)
    race_tune(base, target, time.perf_counter() - started, args, console,
              {"eager attention": load_profile(anchor).artifacts / "app.vmfb"})


def race_tune(base: Path, target: float, profiled: float, args: argparse.Namespace, console: Console,
              anchors: dict[str, Path] | None = None) -> None:
    """Tune the profile ``base``, then race the default, every whole-program option set and per-op composition
    the search built, the ``anchors`` and tune's build."""
    started = time.perf_counter()
    done = subprocess.run([*TRACELINK, "tune", str(base), "--budget", args.budget, "--json",
                           *(["--resume"] if (base / "tune" / "strategies.json").exists() else [])],
                          capture_output=True, text=True)
    console.print(f"profile {profiled:.0f} s, tune {time.perf_counter() - started:.0f} s (budget {args.budget})")
    if done.returncode != 0:
        console.print(f"tune failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
        return
    document = json.loads(done.stdout)
    apply = document["apply"]
    console.print(f"apply it: {apply['program'] + ' ' + ' '.join(apply['flags']) if apply else '(the default build)'}",
                  soft_wrap=True)
    strategies = document["strategies"]["strategies"]
    # every whole-program option set the search built, checked and timed: single options and combinations
    globals_ = {e["name"]: base / "tune" / "strategies" / e["name"] / "app.vmfb" for e in strategies
                if not e.get("program") and e["status"] in ("faster", "not faster")}
    singles = {name: vmfb for name, vmfb in globals_.items() if "+" not in name}
    profile = load_profile(base)
    builds = {"default": profile.artifacts / "app.vmfb", **globals_}
    # the per-op compositions tune built, raced here unless handed over as they are (not with a spec)
    for composed in strategies:
        handed = apply is not None and (apply["program"], apply["flags"]) == (composed.get("program"), composed["flags"])
        if composed.get("program") and composed["status"] in ("faster", "not faster") and not handed:
            builds[composed["name"]] = Path(composed["program"]).parent / "build" / "app.vmfb"
    builds |= anchors or {}
    if apply:
        builds["tune's build"] = Path(apply["vmfb"])
    runs = [lambda _, v=v: time_program(v, profile.summary["function"], run_inputs(profile), run_parameters(profile),
                                        5, 600.0) for v in builds.values()]
    times = dict(zip(builds, alternate(runs, args.real_rounds)))
    for build, series in times.items():
        check = summarize(times["default"], series)
        console.print(f"  {build:>16}: {np.median(series) / 1e6:8.1f} ms  {check['speedup']:5.2f}x the default "
                      f"(95% CI {check['ci_low']:.2f}-{check['ci_high']:.2f})")
    for entry in strategies:
        if entry["status"] not in ("faster", "not faster"):
            console.print(f"  {entry['name']:>16}: {entry['status']} ({entry['reason']})", soft_wrap=True)
    tuned = times.get("tune's build", times["default"])
    over = summarize(times["default"], tuned)
    line = f"  tune's build {over['speedup']:.2f}x the default: target >= {target:g}x -> {'met' if over['speedup'] >= target else 'NOT met'}"
    for what, among in (("single option set", singles), ("whole-program option set", globals_)):
        best = max(among, key=lambda b: summarize(times["default"], times[b])["speedup"], default=None)
        if best is not None:
            versus = summarize(times[best], tuned)
            line += (f"; over the best {what} ({best}): {versus['speedup']:.2f}x (95% CI {versus['ci_low']:.2f}-"
                     f"{versus['ci_high']:.2f}) -> {'slower!' if versus['ci_high'] < 1 else 'not slower'}")
    console.print(line + (f"\n  warning: {over['load_warning']}" if over["load_warning"] else ""))
    # against each whole-program option set, the fastest first: is tune's build faster than all of them?
    versus = {name: summarize(times[name], tuned) for name in
              sorted(globals_, key=lambda b: -summarize(times["default"], times[b])["speedup"])}
    for name, check in versus.items():
        console.print(f"  tune's build over {name}: {check['speedup']:.2f}x (95% CI {check['ci_low']:.2f}-"
                      f"{check['ci_high']:.2f})")
    if versus:
        verdict = ("faster than every one" if all(c["ci_low"] > 1 for c in versus.values()) else
                   "slower than one!" if any(c["ci_high"] < 1 for c in versus.values()) else "not slower than any")
        console.print(f"  tune's build against all {len(versus)} whole-program option sets: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench_tune")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--repetitions", type=int, default=10, help="iterations of each profile and timed run")
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds of each end-to-end comparison")
    parser.add_argument("--top", type=int, default=6, help="dispatches tuned per program")
    parser.add_argument("--trials", type=int, default=16, help="trials per dispatch on average (allocated by expected gain)")
    parser.add_argument("--race-budget", type=int, default=24, help="trials of each tuner per seed in the live race")
    parser.add_argument("--race-seeds", type=int, default=3, help="seeds per tuner in the live race")
    parser.add_argument("--race-programs", nargs="*", default=list(RACE_PROGRAMS), help="programs of the live race")
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS_E2E), help="end-to-end workloads to run")
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--real", nargs="*", default=[*REAL_MODELS, *TRANSFORMERS], help="real-weight models of the strategy section")
    parser.add_argument("--budget", default="20m", help="tune's --budget for each real-weight model")
    # the compositions are 1.1-1.2x the best whole-program option set; with 10-16 builds in the race,
    # 20 rounds on this 2-core machine did not always resolve that, 40 did
    parser.add_argument("--real-rounds", type=int, default=40, help="alternating rounds of each real-weight race")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    console = Console(highlight=False)
    if not args.skip_search:
        console.rule("search efficiency (512^3 f32 matmul)")
        search_efficiency(args.out, args.seeds, console)
    for name in args.race_programs:
        console.rule(f"live search race, xgb vs random ({name})")
        search_race(name, args.out, args.race_budget, args.race_seeds, console)
    for name in args.workloads:
        console.rule(f"end to end ({name})")
        program, run = WORKLOADS_E2E[name]
        try:
            end_to_end(name, program, run, args.out, args, console)
        except Exception as error:  # one workload failing is reported, the others go on
            console.print(f"{name}: failed ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})")
    for name in args.real:
        console.rule(f"strategies on real weights ({name})")
        try:
            (transformer_real if name in TRANSFORMERS else strategies_real)(name, args.out, args, console)
        except Exception as error:  # one model failing is reported, the others go on
            console.print(f"{name}: failed ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})")


if __name__ == "__main__":
    main()

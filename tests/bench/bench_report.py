"""Benchmark: size of report.html and its time to first render in Chromium, against the targets.

Targets (issue #3): ≤ 5 MB and ≤ 1 s to first render for a program of ~130 executables / ~200 call
sites. Profiles the largest shared workload (squeezenet), clip, and a generated program of that size
(200 matmul + relu layers, 131 distinct shapes: ~131 executables, 200 call sites), builds each report, then
opens it in Debian's Chromium (headless, fresh profile) a few times: time from navigation start to
first contentful paint and to the end of the load event (``performance`` timings), median of the loads.

Usage: .venv/bin/python tests/bench/bench_report.py [--loads 3] [--skip-generated]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.test_report_browser import CHROMIUM, CHROMIUM_ARGS, FIRST_RENDER  # noqa: E402
from tests.conftest import WORKLOAD_RUNS, WORKLOADS  # noqa: E402
from tracelink.options import ProfileOptions  # noqa: E402
from tracelink.pipeline import profile  # noqa: E402
from tracelink.report import build_report  # noqa: E402

TARGET_MB = 5.0
TARGET_RENDER_MS = 1000.0
LAYERS = 200
DISTINCT = 130


def generated_program(path: Path) -> Path:
    """200 matmul + relu layers, 131 distinct shapes, each op with a layer name and a model.py line."""
    widths = [16 + 2 * i for i in range(DISTINCT + 1)]
    chain = [(widths[i], widths[i + 1]) for i in range(DISTINCT)]  # 130 distinct shapes
    while len(chain) < LAYERS:  # then back and forth between the last two widths: repeated executables
        chain.append((chain[-1][1], chain[-1][0]))
    args = ", ".join(f"%w{i}: tensor<{a}x{b}xf32>" for i, (a, b) in enumerate(chain))
    lines = [
        "#id = affine_map<(i, j) -> (i, j)>",
        f"func.func @main(%x: tensor<8x{chain[0][0]}xf32>, {args}) -> tensor<8x{chain[-1][1]}xf32> {{",
        "  %zero = arith.constant 0.0 : f32",
    ]
    value = "%x"
    for i, (a, b) in enumerate(chain):
        where = f'"model.py":{100 + 3 * i}:9'
        lines += [
            f"  %e{i} = tensor.empty() : tensor<8x{b}xf32>",
            f"  %f{i} = linalg.fill ins(%zero : f32) outs(%e{i} : tensor<8x{b}xf32>) -> tensor<8x{b}xf32> loc(\"layer{i}.fc\"({where}))",
            f"  %m{i} = linalg.matmul ins({value}, %w{i} : tensor<8x{a}xf32>, tensor<{a}x{b}xf32>) outs(%f{i} : tensor<8x{b}xf32>) -> tensor<8x{b}xf32> loc(\"layer{i}.fc\"({where}))",
            f"  %r{i} = linalg.generic {{indexing_maps = [#id, #id], iterator_types = [\"parallel\", \"parallel\"]}} ins(%m{i} : tensor<8x{b}xf32>) outs(%e{i} : tensor<8x{b}xf32>) {{",
            "  ^bb0(%v: f32, %o: f32):",
            f"    %s = arith.maximumf %v, %zero : f32 loc(\"layer{i}.relu\"(\"model.py\":{101 + 3 * i}:9))",
            "    linalg.yield %s : f32",
            f"  }} -> tensor<8x{b}xf32> loc(\"layer{i}.relu\"(\"model.py\":{101 + 3 * i}:9))",
        ]
        value = f"%r{i}"
    lines += [f"  return {value} : tensor<8x{chain[-1][1]}xf32>", "}", ""]
    path.write_text("\n".join(lines))
    return path


def render_times(report: Path, loads: int) -> tuple[float | None, float]:
    """Median first contentful paint and load-event end (ms) over ``loads`` fresh loads."""
    from playwright.sync_api import sync_playwright

    paints, ends = [], []
    with tempfile.TemporaryDirectory() as profile_dir, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile_dir, executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True, viewport={"width": 1400, "height": 900},
        )
        for _ in range(loads):
            page = context.new_page()
            page.goto(report.resolve().as_uri())
            timing = page.evaluate(FIRST_RENDER)
            if timing["paint"] is not None:
                paints.append(timing["paint"])
            ends.append(timing["load"])
            page.close()
        context.close()
    return (statistics.median(paints) if paints else None), statistics.median(ends)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--skip-generated", action="store_true", help="only the shared workloads")
    args = parser.parse_args()
    console = Console(soft_wrap=True)
    if not CHROMIUM.is_file():
        console.print("[red]Chromium missing: apt-get install -y chromium[/]")
        sys.exit(1)
    console.print(f"[bold]report.html: size (target <= {TARGET_MB:g} MB) and time to first render in Chromium (target <= {TARGET_RENDER_MS:.0f} ms)[/]")
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        runs = {name: (WORKLOADS / f"{name}.mlir", *WORKLOAD_RUNS[name]) for name in ("onnx_light_squeezenet_nodelocs", "clip_text_toy_f32")}
        if not args.skip_generated:
            runs[f"generated_{LAYERS}_layers"] = (generated_program(work / "generated.mlir"), "main", [], [])
        for name, (program, function, inputs, parameters) in runs.items():
            started = time.perf_counter()
            result = profile(program, work / name, ProfileOptions(function=function, inputs=inputs, parameters=parameters, repetitions=5), Console(quiet=True))
            profiled = time.perf_counter() - started
            started = time.perf_counter()
            report = build_report(result)
            built = time.perf_counter() - started
            size_mb = report.stat().st_size / 1e6
            paint, load = render_times(report, args.loads)
            executables = sum(1 for _, d in result.graph.nodes(data=True) if d.get("kind") == "executable")
            call_sites = len(result.call_sites)
            ok = size_mb <= TARGET_MB and paint is not None and paint <= TARGET_RENDER_MS
            console.print(
                f"{name:32s} {executables:4d} executables {call_sites:4d} call sites | "
                f"{size_mb:5.2f} MB  first paint {paint if paint is not None else float('nan'):6.0f} ms  load {load:6.0f} ms | "
                f"built in {built:5.2f} s (profile {profiled:5.1f} s) | {'meets' if ok else 'MISSES'} the targets"
            )


if __name__ == "__main__":
    main()

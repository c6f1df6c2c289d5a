"""Benchmark: size of report.html and its time to interactive in Chromium, as ratios to the targets.

Targets (issues #11 and #21): a report of a 1,000-call-site program is at most 5 MB and interactive at
most 1 s after navigation starts. Profiles shared workloads (squeezenet and clip by default) and a
generated program of 1,000 matmul + relu layers over 130 distinct shapes (1,000 call sites, ~131 executables),
builds each report, then opens it in Debian's Chromium (headless, fresh profile) a few times.

Time to interactive is when the main thread is first idle after the load event (a
``requestIdleCallback`` registered in a ``setTimeout`` from the load event, by an init script, so no
round trip to the test driver is counted), in ``performance.now()`` from navigation start; the
median of the loads. As a baseline measured in the same browser and run, a blank page's time to
interactive is printed too (on a loaded machine every number grows; the ratio to the blank page
says how much is the report's own), and the CPU time of the renderer's main thread until then
(DevTools ``Performance.getMetrics`` in thread ticks), which a busy machine does not stretch.

Usage: .venv/bin/python tests/bench/bench_report.py [--loads 3] [--layers 1000] [--distinct 130] [--workloads NAME ...] [--skip-generated]
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

from tests.conftest import WORKLOAD_RUNS, WORKLOADS  # noqa: E402
from tests.test_report_browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from tests.test_report_scale import generated_program  # noqa: E402
from tracelink.pipeline.options import ProfileOptions  # noqa: E402
from tracelink.pipeline import profile  # noqa: E402
from tracelink.report import build_report  # noqa: E402

TARGET_MB = 5.0
TARGET_INTERACTIVE_MS = 1000.0
DEFAULT_WORKLOADS = ("onnx_light_squeezenet_nodelocs", "clip_text_toy_f32")
# Records, in every page of the context, the first idle moment after the load event and the first paint.
MARK_INTERACTIVE = """addEventListener('load', () => setTimeout(() => requestIdleCallback(() => {
    const paint = performance.getEntriesByName('first-contentful-paint')[0];
    window.__tracelinkTimes = {interactive: performance.now(), load: performance.getEntriesByType('navigation')[0].loadEventEnd,
                               paint: paint ? paint.startTime : null};
}, {timeout: 20000})));"""
BLANK_PAGE = "<!DOCTYPE html><html><head><meta charset='utf-8'><title>blank</title></head><body><p>blank</p></body></html>"


def page_times(pages: list[Path], loads: int) -> dict[Path, dict[str, float | None]]:
    """Median time to interactive, load event end, first paint and renderer main-thread CPU time (ms) of each page over ``loads`` fresh loads."""
    from playwright.sync_api import sync_playwright

    samples: dict[Path, list[dict]] = {page: [] for page in pages}
    with tempfile.TemporaryDirectory() as profile_dir, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile_dir, executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True, viewport={"width": 1400, "height": 900},
        )
        context.add_init_script(MARK_INTERACTIVE)
        for _ in range(loads):
            for path in pages:  # alternately, so a busy moment of the machine hits every page alike
                tab = context.new_page()
                devtools = context.new_cdp_session(tab)
                devtools.send("Performance.enable", {"timeDomain": "threadTicks"})
                tab.goto(path.resolve().as_uri())
                tab.wait_for_function("window.__tracelinkTimes !== undefined", timeout=60000)
                metrics = {m["name"]: m["value"] for m in devtools.send("Performance.getMetrics")["metrics"]}
                samples[path].append({**tab.evaluate("window.__tracelinkTimes"), "cpu": metrics["ThreadTime"] * 1e3})
                tab.close()
        context.close()
    return {
        path: {key: (statistics.median(values) if (values := [s[key] for s in runs if s[key] is not None]) else None) for key in ("interactive", "load", "paint", "cpu")}
        for path, runs in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--layers", type=int, default=1000, help="call sites of the generated program")
    parser.add_argument("--distinct", type=int, default=130, help="distinct layer shapes (executables) of the generated program")
    parser.add_argument("--workloads", nargs="*", default=list(DEFAULT_WORKLOADS), choices=sorted(WORKLOAD_RUNS), help="shared workloads to profile")
    parser.add_argument("--skip-generated", action="store_true", help="only the shared workloads")
    args = parser.parse_args()
    console = Console(soft_wrap=True)
    if not CHROMIUM.is_file():
        console.print("[red]Chromium missing: apt-get install -y chromium[/]")
        sys.exit(1)
    console.print(f"[bold]report.html: size (target <= {TARGET_MB:g} MB) and time to interactive in Chromium (target <= {TARGET_INTERACTIVE_MS:.0f} ms)[/]")
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        runs = {name: (WORKLOADS / f"{name}.mlir", *WORKLOAD_RUNS[name]) for name in args.workloads}
        if not args.skip_generated:
            runs[f"generated_{args.layers}_layers"] = (generated_program(work / "generated.mlir", args.layers, args.distinct), "main", [], [])
        reports = {}
        for name, (program, function, inputs, parameters) in runs.items():
            started = time.perf_counter()
            result = profile(program, work / name, ProfileOptions(function=function, inputs=inputs, parameters=parameters, repetitions=5), Console(quiet=True))
            profiled = time.perf_counter() - started
            started = time.perf_counter()
            report = build_report(result)
            built = time.perf_counter() - started
            executables = sum(1 for _, d in result.graph.nodes(data=True) if d.get("kind") == "executable")
            reports[name] = (report, executables, len(result.call_sites), built, profiled)
        blank = work / "blank.html"
        blank.write_text(BLANK_PAGE)
        times = page_times([blank, *(report for report, *_ in reports.values())], args.loads)
        baseline = times[blank]["interactive"] or float("nan")
        console.print(f"baseline: a blank page is interactive after {baseline:.0f} ms in this browser and run (main-thread CPU {times[blank]['cpu'] or float('nan'):.0f} ms)")
        for name, (report, executables, call_sites, built, profiled) in reports.items():
            size_mb = report.stat().st_size / 1e6
            measured = times[report]
            interactive = measured["interactive"] or float("nan")
            ok = size_mb <= TARGET_MB and interactive <= TARGET_INTERACTIVE_MS
            console.print(
                f"{name:32s} {executables:4d} executables {call_sites:4d} call sites | "
                f"{size_mb:5.2f} MB = {size_mb / TARGET_MB:4.2f}× target | interactive {interactive:6.0f} ms = {interactive / TARGET_INTERACTIVE_MS:4.2f}× target, "
                f"{interactive / baseline:5.1f}× blank page (main-thread CPU {measured['cpu'] or float('nan'):5.0f} ms, load {measured['load'] or float('nan'):6.0f} ms, "
                f"first paint {measured['paint'] or float('nan'):5.0f} ms) | "
                f"built in {built:5.2f} s (profile {profiled:5.1f} s) | {'meets' if ok else 'MISSES'} the targets"
            )


if __name__ == "__main__":
    main()

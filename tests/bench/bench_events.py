"""Benchmark: how many dispatch events IREE's HAL profiler keeps on a 5,000-call-site function.

The local-task profiler keeps 4,096 host-execution records between flushes, so a call of 5,000
dispatches loses its last ~906 unless something flushes during the call. When a run loses dispatch
records, tracelink runs again with ``--device_profiling_flush_interval_ms=1``
(:data:`tracelink.collect.hal_losses.FLUSH_FLAGS`); the baseline is IREE's default (its first run). The chain program (tests/chain_program.py) is
compiled once; then rounds alternate which run goes first, and each run is read like `tracelink
profile` reads it (events matched to call sites, warm-up dropped). Printed per side: the median share
of the expected events kept, of call sites with every event, and the dispatch time per call (the
flushing thread's cost shows as a ratio against the baseline).

Usage: .venv/bin/python tests/bench/bench_events.py [--call-sites 5000] [--rounds 5] [--repetitions 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.chain_program import INPUTS, write_chain_program  # noqa: E402
from tracelink.aggregate import missing_events  # noqa: E402
from tracelink.collect.events import drop_warmup  # noqa: E402
from tracelink.iree_tools import benchmark_command  # noqa: E402
from tracelink.collect.hal import PROFILING_MODES, export_bundle, hal_events  # noqa: E402
from tracelink.collect.hal_losses import FLUSH_FLAGS  # noqa: E402
from tracelink.compile import CompileOptions, compile_program  # noqa: E402
from tracelink.provenance.build import build_provenance  # noqa: E402
from tracelink.provenance.program import read_input_program  # noqa: E402

SIDES = {"default (no flush)": (), "flush every 1 ms": FLUSH_FLAGS}


def one_run(vmfb: Path, exports: list[str], repetitions: int, flags: tuple[str, ...], work: Path) -> tuple[float, float, float]:
    """Share of expected events kept, share of call sites complete, dispatch ns per call."""
    work.mkdir(parents=True, exist_ok=True)
    calls = repetitions + 1
    command = benchmark_command(vmfb, "main", INPUTS, [], calls) + [
        f"--device_profiling_mode={PROFILING_MODES}", f"--device_profiling_output={work / 'run.ireeprof'}", *flags,
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    events = drop_warmup(hal_events(export_bundle(work, 600.0), exports, calls), 1)
    missing = missing_events(events, set(range(len(exports))), repetitions)
    expected = len(exports) * repetitions
    kept = (expected - sum(site["expected"] - site["seen"] for site in missing)) / expected
    return kept, 1 - len(missing) / len(exports), float(events["duration_ns"].sum()) / repetitions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--call-sites", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        base = Path(directory)
        program = write_chain_program(base / "chain.mlir", args.call_sites)
        compiled = compile_program(program, base / "artifacts", CompileOptions())
        sites = build_provenance(read_input_program(program), base / "artifacts", "main").call_sites
        exports = [site.export for site in sites if site.phase == "run"]
        print(f"{len(exports)} call sites, {args.repetitions} repetitions + 1 warm-up, {args.rounds} alternating rounds "
              f"(compile {compiled.seconds:.0f} s)")
        results: dict[str, list[tuple[float, float, float]]] = {side: [] for side in SIDES}
        for round_index in range(args.rounds):
            order = list(SIDES) if round_index % 2 == 0 else list(reversed(SIDES))
            for side in order:
                results[side].append(one_run(compiled.vmfb, exports, args.repetitions, SIDES[side], base / f"run{round_index}-{len(results[side])}-{order.index(side)}"))
        baseline_ns = statistics.median(r[2] for r in results["default (no flush)"])
        for side, runs in results.items():
            kept = statistics.median(r[0] for r in runs)
            complete = statistics.median(r[1] for r in runs)
            per_call = statistics.median(r[2] for r in runs)
            print(f"{side:24s} events kept {kept:7.2%} (min {min(r[0] for r in runs):.2%})  call sites complete {complete:7.2%}  "
                  f"dispatch time per call {per_call / 1e3:8.1f} µs ({per_call / baseline_ns:.2f}× the default)")


if __name__ == "__main__":
    main()

"""Benchmark: how stable the machine's peaks (the roofline's roof) are when measured again.

Measures both peaks ``--times`` times in a row, as a first profile on a new machine does
(:func:`tracelink.collect.machine.measure_machine`), and prints each peak's median, its spread
(max / min) and the largest ratio between consecutive measurements. The unit test only checks that two
measurements agree within 2x for the bandwidth (a shared VM's memory traffic moves it), 1.2x for compute.

Usage: .venv/bin/python tests/bench/bench_machine.py [--times 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tracelink.collect.machine import machine_cores, measure_machine  # noqa: E402

PEAKS = {"matmul_gflops_per_core": "compute (GFLOP/s per core)", "bandwidth_gbps": "bandwidth (GB/s)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times", type=int, default=5)
    times = parser.parse_args().times
    workers = machine_cores()
    measured = [measure_machine(workers) for _ in range(times)]
    print(f"{times} measurements, {workers} workers, {measured[0]['cpu']}")
    print(f"{'peak':<28} {'median':>9} {'max/min':>8} {'worst consecutive':>18}")
    for key, label in PEAKS.items():
        values = [m[key] for m in measured]
        consecutive = max(max(a, b) / min(a, b) for a, b in zip(values, values[1:])) if times > 1 else 1.0
        print(f"{label:<28} {statistics.median(values):>9.1f} {max(values) / min(values):>7.2f}x {consecutive:>17.2f}x")


if __name__ == "__main__":
    main()

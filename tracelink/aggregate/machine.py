"""The machine's peaks, the roof of the roofline: f32 FLOP/s of all workers and streaming bandwidth.

The compute peak is the one :mod:`tracelink.tune.peak` measures through IREE (the best GFLOP/s of a
cache-resident 128³ f32 matmul on one core, cached in ``~/.cache/tracelink/peak.json``) times the
workers of IREE's ``local-task`` device (one per CPU the process may run on). The bandwidth is the
best of a few numpy copies of a 256 MiB array (far larger than any cache), counting the bytes read and
written; it is measured once per CPU model and cached in ``~/.cache/tracelink/machine.json``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

import numpy as np

from tracelink.tune.measure import MeasureOptions
from tracelink.tune.peak import cache_path, cpu_model, peak_gflops
from tracelink.tune.space import machine_cores

STREAM_BYTES = 256 * 1024 * 1024
STREAM_REPEATS = 5


@dataclass(frozen=True)
class Machine:
    """Peaks of the machine a profile ran on."""

    cpu: str
    workers: int
    peak_gflops: float  # all workers together
    peak_gbps: float

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the roofline turns from memory- to compute-bound."""
        return self.peak_gflops / self.peak_gbps

    def as_dict(self) -> dict:
        return asdict(self)


def stream_bandwidth() -> float:
    """GB/s of the best of a few copies of a 256 MiB float32 array (bytes read plus bytes written)."""
    source = np.ones(STREAM_BYTES // 4, dtype=np.float32)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(STREAM_REPEATS):
        started = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - started)
    return 2 * STREAM_BYTES / best / 1e9


def machine_peaks() -> Machine:
    """This machine's peaks: cached per CPU model, measured on first use (a few seconds)."""
    cpu = cpu_model()
    path = cache_path().with_name("machine.json")
    cached = json.loads(path.read_text()) if path.is_file() else {}
    if cpu not in cached:
        cached[cpu] = {"bandwidth_gbps": stream_bandwidth()}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cached, indent=2))
    workers = machine_cores()
    return Machine(cpu, workers, peak_gflops(MeasureOptions()) * workers, float(cached[cpu]["bandwidth_gbps"]))

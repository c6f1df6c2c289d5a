"""The machine's peaks, the roof of the roofline: f32 FLOP/s of all workers and streaming bandwidth.

Both are measured by tracelink itself in a few seconds (about 12 s on a 2-core VM: compiling IREE's
probe, and 5 s of streaming), once per CPU model, worker count, compiler and method, and cached in
``~/.cache/tracelink/machine.json`` (with the CPU model):

- the **compute peak** is the best GFLOP/s of a cache-resident f32 matmul on one core times the workers
  of IREE's ``local-task`` device (one per CPU the process may run on): the better of numpy's BLAS (192³,
  pinned to one thread, in one child process per core, all at once; the best core) and IREE's own code
  (a chained 256³ matmul under a few tile configs, :func:`probes.iree_gflops_per_core`): with BLAS alone,
  tuned convolutions read above 100 % of the peak on an AVX-512 machine (docs/reference/numbers.md);
- the **bandwidth** is the median of many rounds in which every worker copies its own 32 MiB
  array eight times at the same time (source and target together larger than any cache), counting the bytes read and
  written; numpy releases the GIL while copying, so the threads run on all cores at once.

The compute peak times by the measuring thread's CPU time (time the machine gives to other processes
does not count) and keeps the best of many tries; the bandwidth times each round in wall time (a paused
worker only makes its round longer) and keeps the median of the rounds' rates. Both stay stable on a
machine that other processes load.

This is part of the collect stage (it measures by running programs) so that both the aggregation (the
roofline) and the tuner (its above-peak bound) can use it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from tracelink.atomic import write_text_atomic
from tracelink.collect.machine.host import cache_dir, cache_size, cpu_model, machine_cores, report_damaged_cache
from tracelink.collect.machine.probes import blas_gflops_per_core, iree_gflops_per_core, stream_bandwidth
from tracelink.tools import compiler_version
from tracelink.errors import first_line


@dataclass(frozen=True)
class Machine:
    """Peaks of the machine a profile ran on."""

    cpu: str
    workers: int
    peak_gflops: float  # all workers together
    peak_gbps: float
    # The workers' L2 caches together: a dispatch moving less than this keeps its operands in cache
    # between its producer and itself, so the streaming bandwidth is not its roof.
    cache_bytes: float = 0.0
    kind: str = "cpu"  # "gpu": a GPU device's peaks (:mod:`tracelink.collect.machine.gpu`), whose verdicts and next steps differ

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the roofline turns from memory- to compute-bound."""
        return self.peak_gflops / self.peak_gbps

    @property
    def core_gflops(self) -> float:
        """The compute peak of one worker."""
        return self.peak_gflops / self.workers

    def as_dict(self) -> dict:
        return asdict(self)


def measure_machine(workers: int) -> dict:
    """A fresh measurement of both peaks (what :func:`machine_peaks` caches). The compute peak per core is
    the better of numpy's BLAS and IREE's code: a BLAS built for an older vector ISA (AVX2 kernels on an
    AVX-512 core) reaches half of what the compiled program does, and the roof must be above the program."""
    blas, iree = blas_gflops_per_core(workers), iree_gflops_per_core()
    return {"cpu": cpu_model(), "workers": workers, "matmul_gflops_per_core": max(blas, iree), "blas_gflops_per_core": blas,
            "iree_gflops_per_core": iree, "bandwidth_gbps": stream_bandwidth(workers)}


# Part of the cache key: peaks measured by an earlier method (bandwidth by CPU time, compute by BLAS
# alone, IREE's probe through the tuner) are measured again.
PEAKS_METHOD = "bandwidth: median of wall-time rounds of 8 copies per worker; compute: BLAS and IREE's chained matmul"


def peaks_key(workers: int) -> str:
    """The cache entry of this machine's peaks: CPU model, worker count, compiler and how they were measured."""
    return f"{cpu_model()}|{workers} workers|{compiler_version()}|{PEAKS_METHOD}"


def read_machine_cache(path: Path) -> dict:
    """machine.json's entries; a damaged file is reported and read as empty (measured and written again)."""
    try:
        cached = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError) as error:  # cut short, not UTF-8, not JSON
        report_damaged_cache(path, f"unreadable ({type(error).__name__}: {first_line(error)})")
        return {}
    if not isinstance(cached, dict):
        report_damaged_cache(path, "not a JSON object")
        return {}
    return cached


def valid_entry(entry: object) -> bool:
    """Whether a cached entry holds the CPU and finite, positive peaks."""
    if not isinstance(entry, dict) or not isinstance(entry.get("cpu"), str):
        return False
    numbers = [entry.get(field) for field in ("matmul_gflops_per_core", "bandwidth_gbps")]
    return all(isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n) and n > 0 for n in numbers)


def machine_peaks() -> Machine:
    """This machine's peaks: cached per CPU model and worker count, measured on first use (a few seconds)."""
    workers = machine_cores()
    key = peaks_key(workers)
    path = cache_dir() / "machine.json"
    cached = read_machine_cache(path)
    entry = cached.get(key)
    if entry is not None and not valid_entry(entry):
        report_damaged_cache(path, f"entry {key!r} holds no usable peaks")
        entry = None
    if entry is None:
        entry = cached[key] = measure_machine(workers)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(cached, indent=2))  # a run stopped while writing leaves the old file
    return Machine(entry["cpu"], workers, float(entry["matmul_gflops_per_core"]) * workers, float(entry["bandwidth_gbps"]),
                   float(cache_size(2, 1024 * 1024) * workers))


__all__ = ["Machine", "cache_dir", "cache_size", "cpu_model", "machine_cores", "machine_peaks", "measure_machine", "peaks_key"]

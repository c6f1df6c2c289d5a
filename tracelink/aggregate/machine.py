"""The machine's peaks, the roof of the roofline: f32 FLOP/s of all workers and streaming bandwidth.

Both are measured by tracelink itself in a few seconds (about 7 s on a 2-core VM: compiling IREE's
probe, and 2.5 s of streaming), once per CPU model, worker count and method, and cached in
``~/.cache/tracelink/machine.json`` (with the CPU model):

- the **compute peak** is the best GFLOP/s of a cache-resident f32 matmul on one core times the workers
  of IREE's ``local-task`` device (one per CPU the process may run on): the better of numpy's BLAS (192³,
  pinned to one thread, in one child process per core, all at once; the best core) and IREE's own code
  (the tuner's 128³ probe under a few tile configs, :mod:`tracelink.tune.peak`). On this project's
  AVX-512 machine BLAS reached 130 GFLOP/s per core and IREE 262: with BLAS alone, tuned convolutions
  read 155 % of the peak;
- the **bandwidth** is the median of many rounds in which every worker copies its own 32 MiB
  array at the same time (source and target together larger than any cache), counting the bytes read and
  written; numpy releases the GIL while copying, so the threads run on all cores at once.

The compute peak times by the measuring thread's CPU time (time the machine gives to other processes
does not count) and keeps the best of many tries; the bandwidth times each round in wall time (a paused
worker only makes its round longer) and keeps the median of the rounds' rates. Both stay stable on a
machine that other processes load.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

from tracelink import TracelinkError
from tracelink.tune.peak import cache_path, cpu_model
from tracelink.tune.space import cache_size, machine_cores

MATMUL_SIZE = 192  # three 192² f32 matrices (432 KiB) stay in a core's L2
MATMUL_CPU_SECONDS = 0.4  # CPU time the matmul probe spends trying for a better time (a loaded VM needs more tries)
STREAM_BYTES_PER_WORKER = 32 * 1024 * 1024  # source and target: 64 MiB per worker, more than any cache
STREAM_ROUNDS = 150
# Rounds are spread over about two and a half seconds: other processes' memory traffic comes and goes,
# and the rounds should sample quiet moments as well as busy ones.
ROUND_PAUSE_S = 0.01
# Environment pinning numpy's BLAS (OpenBLAS, MKL or an OpenMP build) to one thread in the probe.
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


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

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the roofline turns from memory- to compute-bound."""
        return self.peak_gflops / self.peak_gbps

    def as_dict(self) -> dict:
        return asdict(self)


def matmul_gflops_here(size: int, cpu_seconds: float) -> float:
    """Best GFLOP/s of a ``size``³ f32 matmul in this thread, by its CPU time, over ``cpu_seconds`` of
    tries (at most ten times that in wall time, on a machine busy with other work)."""
    import time

    import numpy as np

    rng = np.random.default_rng(0)
    left, right = rng.random((size, size), dtype=np.float32), rng.random((size, size), dtype=np.float32)
    product = np.empty_like(left)
    best, spent, deadline = float("inf"), 0.0, time.perf_counter() + 10 * cpu_seconds
    while spent < cpu_seconds and time.perf_counter() < deadline:
        started = time.thread_time()
        np.matmul(left, right, out=product)
        elapsed = time.thread_time() - started
        spent += elapsed
        if elapsed > 0:  # below the clock's resolution the try says nothing
            best = min(best, elapsed)
    return 2 * size**3 / best / 1e9


def matmul_gflops_per_core(workers: int) -> float:
    """One core's f32 matmul peak: :func:`matmul_gflops_here` in ``workers`` child processes at once (one
    per core), each with its BLAS on one thread; the best of them (a core another process shares less).

    The children run the function's own source with numpy alone, so they start in a fraction of a second.
    """
    probe = inspect.getsource(matmul_gflops_here) + f"\nprint(matmul_gflops_here({MATMUL_SIZE}, {MATMUL_CPU_SECONDS}))"
    children = [subprocess.Popen([sys.executable, "-c", probe], env=os.environ | ONE_THREAD, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(workers)]
    results = [child.communicate() + (child.returncode,) for child in children]
    failed = next((err for _, err, code in results if code != 0), None)
    if failed is not None:
        raise TracelinkError(f"measuring the machine's compute peak failed: {failed.strip().splitlines()[-1:]}")
    return max(float(out) for out, _, _ in results)


def stream_bandwidth(workers: int, rounds: int = STREAM_ROUNDS) -> float:
    """GB/s of ``workers`` threads each copying its own 32 MiB float32 array at once (bytes read plus
    written): the median of ``rounds`` rounds spread over about two and a half seconds.

    A round lasts from the first copy's start to the last copy's end in wall time: a thread the
    scheduler pauses only makes its round longer (the copies then run one after the other), never
    shorter. (Timing each copy by its own thread's CPU time counted such serialised rounds as fast: two
    measurements on a busy 2-core VM read 46 and 82 GB/s.) The median, not the fastest rounds: on that
    VM the bandwidth it gets has episodes of a few seconds at 1.4-1.7x its usual rate (other tenants'
    memory traffic coming and going, likely); the fastest rounds of a short window caught them, the
    median of a longer one is the sustained rate the program can count on.
    """
    sources = [np.ones(STREAM_BYTES_PER_WORKER // 4, dtype=np.float32) for _ in range(workers)]
    targets = [np.ones_like(source) for source in sources]  # ones, not empty: its pages are mapped before timing
    round_seconds: list[float] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in range(rounds):
            start_together = threading.Barrier(workers)

            def copy(worker: int, barrier: threading.Barrier = start_together) -> tuple[float, float]:
                barrier.wait()
                started = time.perf_counter()
                np.copyto(targets[worker], sources[worker])
                return started, time.perf_counter()

            spans = list(pool.map(copy, range(workers)))
            round_seconds.append(max(end for _, end in spans) - min(start for start, _ in spans))
            time.sleep(ROUND_PAUSE_S)
    return 2 * STREAM_BYTES_PER_WORKER * workers / float(np.median(round_seconds)) / 1e9


def iree_gflops_per_core() -> float:
    """One core's f32 matmul peak as IREE's own code reaches it: the tuner's probe (a cache-resident
    128³ matmul under a few tile configs, by CPU time on one core; :mod:`tracelink.tune.peak`), measured
    afresh."""
    from tracelink.tune.measure import MeasureOptions
    from tracelink.tune.peak import measure_peak

    return measure_peak(MeasureOptions(device="local-sync", clock="cpu"))


def measure_machine(workers: int) -> dict:
    """A fresh measurement of both peaks (what :func:`machine_peaks` caches). The compute peak per core is
    the better of numpy's BLAS and IREE's code: a BLAS built for an older vector ISA (AVX2 kernels on an
    AVX-512 core) reaches half of what the compiled program does, and the roof must be above the program."""
    blas, iree = matmul_gflops_per_core(workers), iree_gflops_per_core()
    return {"cpu": cpu_model(), "workers": workers, "matmul_gflops_per_core": max(blas, iree), "blas_gflops_per_core": blas,
            "iree_gflops_per_core": iree, "bandwidth_gbps": stream_bandwidth(workers)}


# Part of the cache key: peaks measured by an earlier method (bandwidth by CPU time, compute by BLAS
# alone) are measured again.
PEAKS_METHOD = "bandwidth: median of wall-time rounds; compute: BLAS and IREE"


def peaks_key(workers: int) -> str:
    """The cache entry of this machine's peaks: CPU model, worker count and how they were measured."""
    return f"{cpu_model()}|{workers} workers|{PEAKS_METHOD}"


def machine_peaks() -> Machine:
    """This machine's peaks: cached per CPU model and worker count, measured on first use (a few seconds)."""
    workers = machine_cores()
    key = peaks_key(workers)
    path = cache_path().with_name("machine.json")
    cached = json.loads(path.read_text()) if path.is_file() else {}
    if key not in cached:
        cached[key] = measure_machine(workers)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cached, indent=2))
    entry = cached[key]
    return Machine(entry["cpu"], workers, float(entry["matmul_gflops_per_core"]) * workers, float(entry["bandwidth_gbps"]),
                   float(cache_size(2, 1024 * 1024) * workers))

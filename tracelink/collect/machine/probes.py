"""Small programs that measure the machine's peaks: f32 matmul GFLOP/s of one core (numpy's BLAS and
IREE's own code) and the streaming bandwidth of all workers together."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tracelink.iree_tools import benchmark_repetitions, compile_command
from tracelink.errors import TracelinkError
from tracelink.tools import kill_group, last_lines, reap, run_tool, start_process

MATMUL_SIZE = 192  # three 192² f32 matrices (432 KiB) stay in a core's L2
MATMUL_CPU_SECONDS = 0.4  # CPU time the matmul probe spends trying for a better time (a loaded VM needs more tries)
STREAM_BYTES_PER_WORKER = 32 * 1024 * 1024  # source and target: 64 MiB per worker, more than any cache
# Each worker copies its array this many times per round: one copy is as short as the workers'
# start skew, and then the copies of a round only half overlap (see stream_bandwidth).
COPIES_PER_ROUND = 8
STREAM_ROUNDS = 100
# Rounds are spread over about five seconds: other processes' memory traffic comes and goes, and the
# rounds should sample quiet moments as well as busy ones.
ROUND_PAUSE_S = 0.02
# Environment pinning numpy's BLAS (OpenBLAS, MKL or an OpenMP build) to one thread in the probe.
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# IREE's probe: a 256³ f32 matmul chained CHAIN times in one call, so the call's fixed cost is a small
# part of its time. Its input is all ones and the right operand 1/256, so every product is exactly 1:
# no overflow, no denormals, the same arithmetic in every link.
IREE_SIZE = 256
CHAIN = 64
IREE_PROBE = """
func.func @main(%a: tensor<{n}x{n}xf32>, %b: tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32> {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %links = arith.constant {chain} : index
  %zero = arith.constant 0.0 : f32
  %r = scf.for %i = %c0 to %links step %c1 iter_args(%x = %a) -> tensor<{n}x{n}xf32> {{
    %e = tensor.empty() : tensor<{n}x{n}xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>
    %y = linalg.matmul {attributes} ins(%x, %b : tensor<{n}x{n}xf32>, tensor<{n}x{n}xf32>)
                       outs(%acc : tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>
    scf.yield %y : tensor<{n}x{n}xf32>
  }}
  return %r : tensor<{n}x{n}xf32>
}}
"""
# Tile configs that ran near the FMA peak on AVX2 and AVX-512 hosts; IREE's default is always tried too.
IREE_PROBE_CONFIGS = (
    "distribution = [128, 128, 0], vector_common_parallel = [8, 32, 0], vector_reduction = [0, 0, 4]",
    "distribution = [64, 128, 0], vector_common_parallel = [8, 16, 0], vector_reduction = [0, 0, 1]",
    "distribution = [64, 64, 0], vector_common_parallel = [8, 32, 0], vector_reduction = [0, 0, 1]",
    "distribution = [32, 64, 0], vector_common_parallel = [4, 32, 0], vector_reduction = [0, 0, 1]",
)
CPU_TARGET = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
              "--iree-llvmcpu-target-cpu=host"]
PROBE_TIMEOUT_S = 120.0


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


def blas_gflops_per_core(workers: int) -> float:
    """One core's f32 matmul peak with numpy's BLAS: :func:`matmul_gflops_here` in ``workers`` child
    processes at once (one per core), each with its BLAS on one thread; the best of them (a core another
    process shares less).

    The children run the function's own source with numpy alone, so they start in a fraction of a second.
    """
    probe = inspect.getsource(matmul_gflops_here) + f"\nprint(matmul_gflops_here({MATMUL_SIZE}, {MATMUL_CPU_SECONDS}))"
    # started as tools: an interrupt or tracelink's death kills them (see tracelink.tools), none runs on
    children = [start_process([sys.executable, "-c", probe], env=os.environ | ONE_THREAD, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(workers)]
    try:
        results = [child.communicate() + (reap(child),) for child in children]
    finally:
        for child in children:
            kill_group(child)
            reap(child)
    failed = next((err for _, err, code in results if code != 0), None)
    if failed is not None:
        raise TracelinkError(f"measuring the machine's compute peak failed: {last_lines(failed, 1)}")
    return max(float(out) for out, _, _ in results)


def iree_gflops_per_core() -> float:
    """One core's f32 matmul peak as IREE's own code reaches it: the chained 256³ matmul under IREE's
    default tile config and :data:`IREE_PROBE_CONFIGS`, on ``local-sync`` (the calling thread), timed by
    that thread's CPU time (time the machine gives to other processes does not count); the best config."""
    best = 0.0
    with tempfile.TemporaryDirectory(prefix="tracelink_peak_") as scratch:
        for number, config in enumerate((None, *IREE_PROBE_CONFIGS)):
            source, vmfb = Path(scratch) / f"probe{number}.mlir", Path(scratch) / f"probe{number}.vmfb"
            source.write_text(IREE_PROBE.format(n=IREE_SIZE, chain=CHAIN, attributes=probe_attributes(config)))
            if run_tool(compile_command(source, vmfb, CPU_TARGET), PROBE_TIMEOUT_S).returncode != 0:
                continue  # a config this CPU cannot build; the others still measure the peak
            best = max(best, 2 * IREE_SIZE**3 * CHAIN / probe_cpu_seconds(vmfb) / 1e9)
    if best <= 0:
        raise TracelinkError("measuring the machine's compute peak: iree-compile built none of the probe matmuls")
    return best


def probe_attributes(config: str | None) -> str:
    """The probe matmul's attribute dictionary: a ``compilation_info`` for ``config``, or none (IREE's default)."""
    if config is None:
        return ""
    return ("{compilation_info = #iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<" + config
            + ">, translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>}")


def probe_cpu_seconds(vmfb: Path) -> float:
    """The fastest of a few repetitions of one call of the probe, by CPU time."""
    inputs = [f"{IREE_SIZE}x{IREE_SIZE}xf32=1", f"{IREE_SIZE}x{IREE_SIZE}xf32={1 / IREE_SIZE}"]
    times = benchmark_repetitions(vmfb, "main", inputs, repetitions=5, timeout=PROBE_TIMEOUT_S, min_time="0.1s", device="local-sync",
                                  column="cpu_time", doing="measuring the machine's compute peak")
    return min(times) * 1e-9


def stream_bandwidth(workers: int, rounds: int = STREAM_ROUNDS) -> float:
    """GB/s of ``workers`` threads each copying its own 32 MiB float32 array :data:`COPIES_PER_ROUND`
    times at once (bytes read plus written): the median of the rates of ``rounds`` rounds spread over
    about five seconds.

    A round lasts from the first worker's start to the last one's end in wall time: a thread the
    scheduler pauses only makes its round longer (its copies then run after the others'), never
    shorter (timing each copy by its own thread's CPU time counted such serialised rounds as fast).
    Several copies per round: with one, the workers' start skew was as long as a copy, and the rates
    fell in two groups whose shares moved between measurements; with eight, the copies overlap for
    most of the round. The median, not the fastest rounds nor a high percentile: the bandwidth has
    episodes of a few seconds well above its usual rate (other tenants' memory traffic coming and
    going, likely), which those catch. The measurements behind this are in docs/reference/numbers.md.
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
                for _ in range(COPIES_PER_ROUND):
                    np.copyto(targets[worker], sources[worker])
                return started, time.perf_counter()

            spans = list(pool.map(copy, range(workers)))
            round_seconds.append(max(end for _, end in spans) - min(start for start, _ in spans))
            time.sleep(ROUND_PAUSE_S)
    rates = 2 * STREAM_BYTES_PER_WORKER * COPIES_PER_ROUND * workers / np.array(round_seconds) / 1e9
    return float(np.median(rates))

"""The machine's measured peak f32 throughput: no candidate can honestly run faster.

A 128^3 f32 matmul (its operands stay in cache, so it is bound by the FMA units, not memory) is built
from its dumped benchmark with IREE's default tile config and a few register-heavy alternatives, timed through the same harness as candidates (seeded inputs),
and the best GFLOP/s is the peak. It is always measured on one core by process CPU time (local-sync):
time the process spends preempted does not count, so a busy machine does not lower it, and the bound
for local-task is this peak times the cores. It takes a few seconds and is cached per CPU model and
compiler version in ``$XDG_CACHE_HOME/tracelink/peak.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path

from tracelink import TracelinkError
from tracelink.tools import compiler_version, tool_path
from tracelink.tune.candidates import materialize
from tracelink.tune.harness import write_inputs

SIZE = 128
PROBE = f"""
func.func @main(%a: tensor<{SIZE}x{SIZE}xf32>, %b: tensor<{SIZE}x{SIZE}xf32>) -> tensor<{SIZE}x{SIZE}xf32> {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{SIZE}x{SIZE}xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<{SIZE}x{SIZE}xf32>) -> tensor<{SIZE}x{SIZE}xf32>
  %c = linalg.matmul ins(%a, %b : tensor<{SIZE}x{SIZE}xf32>, tensor<{SIZE}x{SIZE}xf32>)
                     outs(%acc : tensor<{SIZE}x{SIZE}xf32>) -> tensor<{SIZE}x{SIZE}xf32>
  return %c : tensor<{SIZE}x{SIZE}xf32>
}}
"""
# Configs that ran near the FMA peak on AVX2 hosts (the default is always tried too).
PROBE_CONFIGS = (
    {"distribution": [128, 128, 0], "vector_common_parallel": [8, 32, 0], "vector_reduction": [0, 0, 4]},
    {"distribution": [64, 128, 0], "vector_common_parallel": [8, 16, 0], "vector_reduction": [0, 0, 1]},
    {"distribution": [64, 64, 0], "vector_common_parallel": [8, 32, 0], "vector_reduction": [0, 0, 1]},
    {"distribution": [32, 64, 0], "vector_common_parallel": [4, 32, 0], "vector_reduction": [0, 0, 1]},
)
TARGET = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
          "--iree-llvmcpu-target-cpu=host"]


def cache_path() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tracelink" / "peak.json"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def machine_key(device: str, clock: str) -> str:
    """What the peak depends on: the CPU, the compiler, the device and the clock."""
    return f"{cpu_model()}|{compiler_version()}|{device}|{clock}"


def peak_gflops(options) -> float:
    """The machine's peak f32 GFLOP/s on one core (``options``, a MeasureOptions, may set it by hand):
    cached, else measured."""
    if options.peak_gflops > 0:
        return options.peak_gflops
    path, key = cache_path(), machine_key("local-sync", "cpu")
    cached = json.loads(path.read_text()) if path.is_file() else {}
    if key not in cached:
        cached[key] = measure_peak(dataclasses.replace(options, device="local-sync", clock="cpu"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cached, indent=2))
    return float(cached[key])


def measure_peak(options) -> float:
    """Best GFLOP/s of the probe matmul over IREE's default and the probe configs."""
    from tracelink.tune.dispatch import load_dispatch
    from tracelink.tune.measure import run_benchmark

    with tempfile.TemporaryDirectory(prefix="tracelink_peak_") as scratch:
        work = Path(scratch)
        (work / "probe.mlir").write_text(PROBE)
        done = subprocess.run([tool_path("iree-compile"), str(work / "probe.mlir"), "-o", str(work / "probe.vmfb"),
                               *TARGET, f"--iree-hal-dump-executable-benchmarks-to={work}"],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise TracelinkError(f"measuring the machine's peak: iree-compile failed: {done.stderr.strip()[:200]}")
        benchmark = next(work.glob("*_benchmark.mlir"))
        dispatch = load_dispatch(benchmark)
        inputs = write_inputs(dispatch, work / "inputs")
        best = 0.0
        for number, fields in enumerate((None, *PROBE_CONFIGS)):
            source, vmfb = work / f"c{number}.mlir", work / f"c{number}.vmfb"
            materialize(benchmark, fields, source)
            if subprocess.run([tool_path("iree-compile"), str(source), "-o", str(vmfb)], capture_output=True,
                              check=False).returncode != 0:
                continue  # a probe config this CPU cannot build; the others still measure the peak
            timing = run_benchmark(vmfb, inputs, options, 4, 600.0, repetitions=3)
            best = max(best, dispatch.flops / min(timing.samples) / 1e9)
    if best <= 0:
        raise TracelinkError("measuring the machine's peak: no probe matmul could be built")
    return best

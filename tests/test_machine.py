"""The machine's peaks (the roofline's roof): measured into an empty cache, then measured afresh where the
cache was damaged (cut short, or NaN peaks): a damaged cache is reported once and rebuilt, the fresh
measurements agree with the first, and the cache records the CPU.

Each measurement takes about 20 s, so the two rebuilds of a damaged cache are also the fresh
measurements the agreement is checked on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracelink.collect.machine import cpu_model, machine_cores, machine_peaks, peaks_key


# How far apart two fresh measurements may be. The compute peak (the best of many tries by CPU time)
# holds within 20 %. The bandwidth is a median of wall-time rounds: on a shared VM it moves with other
# tenants' memory traffic, by up to 1.38x between two back-to-back measurements in one CI run (70 and
# 51 GB/s), and once by 2.3x (85 and 37 GB/s, a disturbed measurement); 2x still catches a method that
# miscounts bytes or workers. Of three measurements, the two closest must agree, as a profiler measures
# a disturbed sample again. Its spread over repeated measurements is printed by
# tests/bench/bench_machine.py, not timed here.
AGREEMENT = {"matmul_gflops_per_core": 1.2, "bandwidth_gbps": 2.0}
DAMAGES = ("cut short", "NaN peaks")


def spread(values: list[float]) -> float:
    """The ratio of the two closest of ``values``."""
    ordered = sorted(values)
    return min(high / low for low, high in zip(ordered, ordered[1:]))


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """The peaks as ``machine_peaks`` measures and caches them (in a cache of this test's own), and the cache."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache))
        machine = machine_peaks()
        yield machine, json.loads((cache / "tracelink" / "machine.json").read_text())[peaks_key(machine.workers)], cache


def machine_cache_run(cache: Path) -> subprocess.CompletedProcess:
    """``machine_peaks`` in a process of its own, with ``cache`` as its cache folder."""
    return subprocess.run([sys.executable, "-c", "from tracelink.collect.machine import machine_peaks; print(machine_peaks().peak_gflops)"],
                          capture_output=True, text=True, env=os.environ | {"XDG_CACHE_HOME": str(cache)}, timeout=300)


@pytest.fixture(scope="module")
def rebuilt(cached, tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, subprocess.CompletedProcess, dict]]:
    """Per damage of a copy of the module's cache: the run that found it damaged, the run after, and the
    entry the first wrote afresh (a fresh measurement)."""
    key = peaks_key(machine_cores())
    whole = (cached[2] / "tracelink" / "machine.json").read_text()
    assert key in json.loads(whole)
    runs = {}
    for damage in DAMAGES:
        cache = tmp_path_factory.mktemp("damaged")
        folder = cache / "tracelink"
        folder.mkdir()
        if damage == "cut short":
            (folder / "machine.json").write_text(whole[: len(whole) // 2])
        else:
            (folder / "machine.json").write_text(json.dumps({key: {"cpu": "x", "matmul_gflops_per_core": float("nan"), "bandwidth_gbps": 1}}))
        first = machine_cache_run(cache)
        entry = json.loads((folder / "machine.json").read_text())[key] if first.returncode == 0 else {}
        runs[damage] = first, machine_cache_run(cache), entry
    return runs


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_machine_cache_is_reported_once_and_rebuilt(rebuilt, damage):
    first, second, entry = rebuilt[damage]
    assert first.returncode == 0, first.stderr
    warnings = [line for line in first.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and "machine.json" in warnings[0] and "written afresh" in warnings[0], first.stderr
    assert float(first.stdout) > 0
    assert entry["matmul_gflops_per_core"] > 0  # rebuilt
    assert second.returncode == 0 and second.stderr == "" and second.stdout == first.stdout  # reported once


def test_peaks_measured_three_times_agree(cached, rebuilt):
    workers = machine_cores()
    fresh = [entry for _, _, entry in rebuilt.values()]
    assert len(fresh) == 2 and all(fresh), rebuilt  # both rebuilt: the cached measurement and two fresh ones
    for entry in fresh:
        # the compute roof is the better of numpy's BLAS and IREE's own matmul
        assert entry["matmul_gflops_per_core"] == max(entry["blas_gflops_per_core"], entry["iree_gflops_per_core"])
        assert entry["cpu"] == cpu_model() and entry["workers"] == workers
    for peak, ratio in AGREEMENT.items():
        values = [m[peak] for m in (cached[1], *fresh)]
        assert min(values) > 0 and spread(values) <= ratio, (peak, values)


def test_peaks_are_cached_with_the_cpu_model(cached, monkeypatch):
    machine, entry, cache = cached
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert entry["cpu"] == machine.cpu == cpu_model()
    assert machine.peak_gflops == pytest.approx(entry["matmul_gflops_per_core"] * machine.workers)
    assert machine.peak_gbps == entry["bandwidth_gbps"]
    assert machine_peaks() == machine  # the second call reads the cache

"""The machine's peaks (the roofline's roof): measured twice (cached, then fresh), they agree; the cache records the CPU."""

from __future__ import annotations

import json

import pytest

from tracelink.collect.machine import cpu_model, machine_cores, machine_peaks, measure_machine, peaks_key


# How far apart two fresh measurements may be. The compute peak (the best of many tries by CPU time)
# holds within 20 %. The bandwidth is a median of wall-time rounds: on a shared VM it moves with other
# tenants' memory traffic, by up to 1.38x between two back-to-back measurements in one CI run (70 and
# 51 GB/s), and once by 2.3x (85 and 37 GB/s, a disturbed measurement); 2x still catches a method that
# miscounts bytes or workers. Two measurements that disagree get a third, and the two closest must agree,
# as a profiler measures a disturbed sample again. Its spread over repeated measurements is printed by
# tests/bench/bench_machine.py, not timed here.
AGREEMENT = {"matmul_gflops_per_core": 1.2, "bandwidth_gbps": 2.0}


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


def test_peaks_measured_twice_agree(cached):
    workers = machine_cores()
    measured = [cached[1], measure_machine(workers)]  # the cached measurement and a fresh one
    if any(spread([m[peak] for m in measured]) > ratio for peak, ratio in AGREEMENT.items()):
        measured.append(measure_machine(workers))
    for first in measured[1:]:
        # the compute roof is the better of numpy's BLAS and IREE's own matmul
        assert first["matmul_gflops_per_core"] == max(first["blas_gflops_per_core"], first["iree_gflops_per_core"])
        assert first["cpu"] == cpu_model() and first["workers"] == workers
    for peak, ratio in AGREEMENT.items():
        values = [m[peak] for m in measured]
        assert min(values) > 0 and spread(values) <= ratio, (peak, values)


def test_peaks_are_cached_with_the_cpu_model(cached, monkeypatch):
    machine, entry, cache = cached
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert entry["cpu"] == machine.cpu == cpu_model()
    assert machine.peak_gflops == pytest.approx(entry["matmul_gflops_per_core"] * machine.workers)
    assert machine.peak_gbps == entry["bandwidth_gbps"]
    assert machine_peaks() == machine  # the second call reads the cache

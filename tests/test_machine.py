"""The machine's peaks (the roofline's roof): measured fresh twice, they agree; the cache records the CPU."""

from __future__ import annotations

import json

import pytest

from tracelink.collect.machine import cpu_model, machine_cores, machine_peaks, measure_machine, peaks_key


def test_peaks_measured_twice_agree_within_20_percent():
    workers = machine_cores()
    first, second = measure_machine(workers), measure_machine(workers)
    # the compute roof is the better of numpy's BLAS and IREE's own matmul
    assert first["matmul_gflops_per_core"] == max(first["blas_gflops_per_core"], first["iree_gflops_per_core"])
    for peak in ("matmul_gflops_per_core", "bandwidth_gbps"):
        assert first[peak] > 0 and second[peak] > 0
        assert max(first[peak], second[peak]) / min(first[peak], second[peak]) <= 1.2, (peak, first[peak], second[peak])
    assert first["cpu"] == cpu_model() and first["workers"] == workers


def test_peaks_are_cached_with_the_cpu_model(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    machine = machine_peaks()
    cached = json.loads((tmp_path / "tracelink" / "machine.json").read_text())
    entry = cached[peaks_key(machine.workers)]
    assert entry["cpu"] == machine.cpu == cpu_model()
    assert machine.peak_gflops == pytest.approx(entry["matmul_gflops_per_core"] * machine.workers)
    assert machine.peak_gbps == entry["bandwidth_gbps"]
    assert machine_peaks() == machine  # the second call reads the cache

"""A GPU device's facts and peaks: its name and type as IREE lists them, and the compute and bandwidth
roofs measured on it.

The peaks come from one small program compiled for the device and run twice: a chain of 256³ f32
matmuls and a chain of elementwise updates of a 64 MiB array. Each dispatch is timed by the device's
own timestamps (the HAL profiler's on Vulkan, the tracy build's GPU zones on CUDA and HIP), so launch
and host time do not count; the fastest dispatch of each
kind gives the compute peak (2·256³ FLOP) and the bandwidth (bytes read plus written). They are
IREE's default code on that device, not the hardware's data-sheet peaks: a dispatch can beat them
with better tiles. Cached per device name, target and compiler in ``~/.cache/tracelink/gpu.json``.

On lavapipe (Mesa's Vulkan on the CPU, what CI tests with) the device is the CPU: its peaks are a
CPU's, its compute units the CPU's cores (llvmpipe runs one thread per core), and its cache the CPU's
L2 caches. CUDA's and HIP's device listings give the multiprocessor (compute unit) count and the L2
size; a real GPU's Vulkan listing has neither: they stay 0 there, and the verdicts that need them (too
few workgroups to fill the device, operands that stay in cache) are not given.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tracelink.errors import TracelinkError
from tracelink.iree_tools import BENCHMARK_TOOL, benchmark_command, compile_command, device_listing_command
from tracelink.collect.hal import export_bundle, read_records, start_hal_profile
from tracelink.collect.machine import Machine
from tracelink.collect.machine.host import cache_dir, cache_size, machine_cores
from tracelink.collect.tracy import capture_tracy, read_capture, tracy_tools
from tracelink.compile.targets import device_target, target_flags
from tracelink.tools import compiler_version, run_tool

SIZE = 256
MATMULS = 8
STREAM_ELEMENTS = 16 * 1024 * 1024  # 64 MiB of f32, larger than any GPU's L2
STREAMS = 6
PROBE = """
func.func @main(%a: tensor<{n}x{n}xf32>, %b: tensor<{n}x{n}xf32>, %v: tensor<{m}xf32>) -> (tensor<{n}x{n}xf32>, tensor<{m}xf32>) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %matmuls = arith.constant {matmuls} : index
  %streams = arith.constant {streams} : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %r = scf.for %i = %c0 to %matmuls step %c1 iter_args(%x = %a) -> tensor<{n}x{n}xf32> {{
    %e = tensor.empty() : tensor<{n}x{n}xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>
    %y = linalg.matmul ins(%x, %b : tensor<{n}x{n}xf32>, tensor<{n}x{n}xf32>) outs(%acc : tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>
    scf.yield %y : tensor<{n}x{n}xf32>
  }}
  %s = scf.for %i = %c0 to %streams step %c1 iter_args(%x = %v) -> tensor<{m}xf32> {{
    %e = tensor.empty() : tensor<{m}xf32>
    %y = linalg.generic {{indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}}
        ins(%x : tensor<{m}xf32>) outs(%e : tensor<{m}xf32>) {{
    ^bb0(%in: f32, %out: f32):
      %z = arith.addf %in, %one : f32
      linalg.yield %z : f32
    }} -> tensor<{m}xf32>
    scf.yield %y : tensor<{m}xf32>
  }}
  return %r, %s : tensor<{n}x{n}xf32>, tensor<{m}xf32>
}}
"""
PROBE_TIMEOUT_S = 300.0
PEAKS_METHOD = "fastest device-timed dispatch of a 256^3 matmul and a 64 MiB elementwise update"


def device_info(driver: str, timeout_s: float) -> dict[str, str]:
    """The first device of ``driver`` as ``iree-run-module --dump_devices`` lists it (empty when none)."""
    return parse_device_listing(run_tool(device_listing_command(driver), timeout_s).stdout)


def parse_device_listing(listing: str) -> dict[str, str]:
    """The first device of a ``--dump_devices`` listing: ``name`` (the driver's own ``name:`` line, else the
    ``#   NAME`` line IREE's tool prints under ``# --device=``) and every ``key: value`` (Vulkan) or
    ``- key: value`` (CUDA, HIP) line of the driver's dump: ``type``, ``gpu-multiprocessor-count``,
    ``memory-l2-cache-size``, ..."""
    info: dict[str, str] = {}
    lines = listing.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("# --device="):
            if info:
                break  # the next device
            if number + 1 < len(lines) and lines[number + 1].startswith("#   "):
                info["listed_name"] = lines[number + 1][1:].strip()
            continue
        key, colon, value = line.removeprefix("- ").partition(":")
        if colon and not line.startswith(("#", " ")) and key not in info:
            info[key] = value.strip()
    if "name" not in info and "listed_name" in info:
        info["name"] = info["listed_name"]
    return info


def compute_units_and_cache(info: dict[str, str]) -> tuple[int, float]:
    """The device's compute units and L2 bytes: lavapipe's are the CPU's cores and L2s (it runs on them);
    CUDA lists ``gpu-multiprocessor-count``, HIP ``gpu-compute-unit-count``, both ``memory-l2-cache-size: N
    bytes``; Vulkan's listing has neither for a real GPU (0: unknown)."""
    if info.get("type") == "cpu":
        cores = machine_cores()
        return cores, float(cache_size(2, 1024 * 1024) * cores)
    units = info.get("gpu-multiprocessor-count") or info.get("gpu-compute-unit-count") or "0"
    l2 = info.get("memory-l2-cache-size", "0").split()[0]
    return (int(units), float(l2)) if units.isdigit() and l2.isdigit() else (0, 0.0)


def measure_device(device: str, chip: str | None, features: str | None) -> dict:
    """A fresh measurement of the device's compute peak and bandwidth (what :func:`device_peaks` caches)."""
    with tempfile.TemporaryDirectory(prefix="tracelink_gpu_peak_") as scratch:
        folder = Path(scratch)
        source, vmfb = folder / "probe.mlir", folder / "probe.vmfb"
        source.write_text(PROBE.format(n=SIZE, m=STREAM_ELEMENTS, matmuls=MATMULS, streams=STREAMS))
        built = run_tool(compile_command(source, vmfb, target_flags(device, "host", chip, features)), PROBE_TIMEOUT_S)
        if built.returncode != 0:
            raise TracelinkError(f"measuring {device}'s peaks: iree-compile failed: {built.stderr.strip()[-300:]}")
        inputs = [f"{SIZE}x{SIZE}xf32=1", f"{SIZE}x{SIZE}xf32={1 / SIZE}", f"{STREAM_ELEMENTS}xf32=0"]
        timed = device_timed_dispatches(vmfb, inputs, folder, device)
    durations: dict[str, list[int]] = {"matmul": [], "stream": []}
    for export, duration in timed:
        kind = "matmul" if "matmul" in export else "stream" if "elementwise" in export or "generic" in export else None
        if kind and duration > 0:
            durations[kind].append(duration)
    if not durations["matmul"] or not durations["stream"]:
        raise TracelinkError(f"measuring {device}'s peaks: the probe's run recorded no timed dispatches")
    return {"gflops": 2 * SIZE**3 / min(durations["matmul"]), "bandwidth_gbps": 2 * 4 * STREAM_ELEMENTS / min(durations["stream"])}


def device_timed_dispatches(vmfb: Path, inputs: list[str], folder: Path, device: str) -> list[tuple[str, int]]:
    """(export, device ns) of every dispatch of two calls of the probe, by the device's clock: the HAL
    profiler's dispatch events, or on CUDA/HIP the tracy build's GPU zones (:mod:`tracelink.collect.tracy.gpu`)."""
    if device_target(device).timed_by == "tracy":
        command = benchmark_command(vmfb, "main", inputs, [], 2, device)
        command[0] = str(tracy_tools().tool(BENCHMARK_TOOL))
        zones = read_capture(capture_tracy(command, folder / "probe.tracy", PROBE_TIMEOUT_S)).gpu_zones
        zones = zones[zones["gpu_end_ns"] >= zones["gpu_start_ns"]]
        return list(zip(zones["name"].astype(str), (zones["gpu_end_ns"] - zones["gpu_start_ns"]).astype(int)))
    run = start_hal_profile(vmfb, "main", inputs, [], 2, folder, device, "dispatch-events,executable-metadata")
    run.wait(PROBE_TIMEOUT_S)
    return [(r["key"], r["duration_ns"]) for r in read_records(export_bundle(folder, PROBE_TIMEOUT_S)) if r.get("record_type") == "dispatch_event"]


def device_peaks(device: str, chip: str | None, features: str | None, info: dict[str, str]) -> Machine:
    """The device's peaks and facts: measured on first use (a few seconds), cached per device name, target and compiler."""
    name = info.get("name") or device
    key = f"{name}|{device_target(device).backend}|{chip}|{features}|{compiler_version()}|{PEAKS_METHOD}"
    path = cache_dir() / "gpu.json"
    cached = json.loads(path.read_text()) if path.is_file() else {}
    if key not in cached:
        cached[key] = measure_device(device, chip, features)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cached, indent=2))
    entry = cached[key]
    workers, cache_bytes = compute_units_and_cache(info)
    return Machine(name, workers, float(entry["gflops"]), float(entry["bandwidth_gbps"]), cache_bytes, kind="gpu")

"""Dispatch executions from a capture's GPU zones: per-dispatch device time on CUDA and HIP.

IREE 3.13's CUDA and HIP drivers implement no HAL-native profiling (``profiling_begin`` returns
UNIMPLEMENTED), so the HAL collector has nothing to read there. Their tracy-enabled build traces
each stream instead (``--cuda_tracing`` / ``--hip_tracing``, 2 by default: one GPU zone per kernel
launch, timed by device events, ``iree/hal/utils/stream_tracing.c``), named by the kernel's function,
which is the dispatch's export. Each finished GPU zone named by a run call site's export is one
execution, timed by the GPU clock; the zone's CPU time (when the host recorded the launch) puts it
in the ``iree_vm_invoke`` of its iteration, as for CPU zones, and launches outside every call
(initializers at module load) are left out and counted.

IREE 3.13's Vulkan driver records no Tracy GPU zones (its device time goes to the HAL profiler):
on Vulkan the HAL collector is the one with device time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from tracelink.errors import TracelinkError
from tracelink.collect.events import make_events, match_call_sites
from tracelink.collect.tracy.decoder import TracyCapture
from tracelink.collect.tracy.views import INVOKE_ZONE, Rebuilt, _window_of, _windows


def gpu_executions(capture: TracyCapture, call_site_exports: Sequence[str]) -> Rebuilt:
    """Dispatch events (the shared schema) of the capture's GPU zones, matched to call sites in GPU time order."""
    zones = capture.gpu_zones
    finished = zones[zones["name"].isin(set(call_site_exports)) & (zones["gpu_end_ns"] >= zones["gpu_start_ns"]) & (zones["gpu_start_ns"] >= 0)]
    if zones.empty:
        raise TracelinkError("the Tracy capture has no GPU zones: on Vulkan use --collector hal; on CUDA/HIP keep --cuda_tracing/--hip_tracing at 2")
    windows = _windows(capture, INVOKE_ZONE)
    iteration = _window_of(windows, finished["cpu_start_ns"].to_numpy(np.int64)) if windows is not None else np.zeros(len(finished), np.int64)
    inside = finished[iteration >= 0].sort_values("gpu_start_ns", kind="stable")
    origin = int(inside["gpu_start_ns"].min()) if len(inside) else 0
    events = make_events(pd.DataFrame({
        "collector": "tracy", "export": inside["name"].astype(str),
        "start_ns": inside["gpu_start_ns"].astype(np.int64) - origin,
        "duration_ns": (inside["gpu_end_ns"] - inside["gpu_start_ns"]).astype(np.int64),
        "queue": "GPU context " + inside["context"].astype(str),
    }))
    return Rebuilt(match_call_sites(events, call_site_exports), int((iteration < 0).sum()))

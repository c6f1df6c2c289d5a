"""A JAX function as its user runs it: ``jax.jit`` on XLA's CPU backend, and once more under JAX's profiler.

The function is lowered and compiled once, on a thread of its own as the IREE side's export is (so each
op's Python stack starts at the function, not at tracelink's callers), and that executable is what every
call runs: the module whose ops the profile names is the one that ran. JAX's profiler trace has one event
per XLA thunk, named after the instruction it runs (``hlo_op``) and tagged with its call (``run_id``);
:mod:`.xla_hlo` gives each instruction's ops with their stacks and work, and each thunk's time is split
over its ops by their work. An op's time per call is its median over the profiled calls.
"""

from __future__ import annotations

import gzip
import json
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import numpy as np
import pandas as pd

from tracelink.atomic import make_directory
from tracelink.collect.reference.samples import per_call_medians
from tracelink.collect.reference.xla_hlo import Op, thunk_ops

TRACE_DIR = "xla_trace"  # under the reference's directory: JAX writes plugins/profile/<time>/<host>.trace.json.gz there


class JaxRunner:
    """The compiled ``jax.jit(fn)`` on the example arguments, placed on the CPU once; profiler files
    under ``directory``."""

    def __init__(self, function: object, args: tuple, directory: Path) -> None:
        cpu = jax.devices("cpu")[0]
        self.args = jax.device_put(args, cpu)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tracelink-jax-reference") as pool:
            self.compiled = pool.submit(jax.jit(function).lower, *self.args).result().compile()
        self.directory = directory

    def call(self) -> object:
        return jax.block_until_ready(self.compiled(*self.args))

    def outputs(self) -> list[np.ndarray]:
        return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(self.call())]

    def profile(self, calls: int) -> tuple[pd.DataFrame, float]:
        """Samples per call of ``calls`` calls under JAX's profiler, and the profiled call's median ns."""
        trace_dir = make_directory(self.directory / TRACE_DIR, inside=self.directory.parent.parent)
        times = []
        jax.profiler.start_trace(str(trace_dir))
        try:
            for _ in range(calls):
                start = time.perf_counter_ns()
                self.call()
                times.append(time.perf_counter_ns() - start)
        finally:
            jax.profiler.stop_trace()
        module, ops = thunk_ops(self.compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto())
        runs = thunk_times(newest_trace(trace_dir), module)
        return per_call_medians([list(samples(thunks, ops)) for thunks in runs.values()]), float(np.median(times))

    def close(self) -> None:
        pass


def newest_trace(trace_dir: Path) -> Path:
    """The trace the last profiling wrote (each start writes a directory of its own)."""
    return max(trace_dir.glob("plugins/profile/*/*.trace.json.gz"), key=lambda path: path.stat().st_mtime_ns)


def thunk_times(trace: Path, module: str) -> dict[str, list[tuple[str, float]]]:
    """Per call (``run_id``), each thunk of ``module`` that ran: its instruction's name and its ns."""
    with gzip.open(trace, "rt") as stream:
        events = json.load(stream)["traceEvents"]
    runs: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for event in events:
        args = event.get("args", {})
        if event.get("ph") == "X" and args.get("hlo_module") == module and "hlo_op" in args:
            runs[args.get("run_id", "")].append((args["hlo_op"], float(event["dur"]) * 1e3))
    return dict(runs)


def samples(thunks: list[tuple[str, float]], ops: dict[str, list[Op]]) -> list[tuple[str, str, str, float]]:
    """(stack, component, op, ns) of each op of each thunk: the thunk's time split by its ops' work."""
    rows = []
    for name, ns in thunks:
        members = ops.get(name, [])
        total = sum(op.work for op in members)
        rows.extend((op.stack, op.component, op.op, ns * op.work / total) for op in members if total > 0)
    return rows

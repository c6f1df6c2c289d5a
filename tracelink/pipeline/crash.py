"""A crashed run, named: the dispatch whose code took the fault, the op it was made from and the user's line.

The profiled run's tool says only that it died of a signal. Unless its collector was the hook, which
names the dispatch itself, the run is repeated once under the hook
(:func:`~tracelink.collect.crash_site.rerun_under_hook`) and the dispatch it names is looked up in the
provenance graph, as every dispatch of a profile is. The repeated run gets twice the time the crashed
one took, and :data:`LOAD_S` more, so a crash that was not the program's (a signal sent from outside, a
fault that does not come back) costs little more than the run it follows.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pandas as pd
from rich.console import Console

from tracelink.aggregate import held_lines
from tracelink.collect.crash_site import rerun_under_hook
from tracelink.compile import CompileResult
from tracelink.compile.targets import device_target
from tracelink.errors import Crashed, TracelinkError, first_line
from tracelink.pipeline.options import ProfileOptions
from tracelink.provenance.graph import root_ops_of_export

MAX_NAMED_OPS = 3
LOAD_S = 10.0  # beyond twice the crashed run's time: loading the module and its parameters again


def named_crash(crash: Crashed, crashed_after_s: float, compiled: CompileResult, entry: str, inputs: list[str], options: ProfileOptions,
                artifacts: Path, graph: nx.DiGraph, line_shares: pd.DataFrame, console: Console) -> Crashed:
    """``crash`` (of a run that ended after ``crashed_after_s``) with the dispatch that took the fault and its
    source ops' lines, or with why none is named."""
    if crash.export is not None:  # the hook collector's run: its message names the dispatch
        return Crashed(f"{crash}; that dispatch is made from {made_from(graph, line_shares, crash.export)}", crash.export)
    if device_target(options.compile.device).is_gpu:  # the hook records llvm-cpu executables only
        return crash
    with console.status(f"{entry} crashed: running it once more under the perf hook to name the dispatch"):
        try:
            rerun = rerun_under_hook(compiled, options.compile, entry, inputs, options.parameters, options.warmup + options.repetitions,
                                     artifacts, min(options.timeout_s, 2 * crashed_after_s + LOAD_S))
        except TracelinkError as error:
            return Crashed(f"{crash}; the dispatch was not named: {first_line(error)}")
    if not rerun.crashed:
        return Crashed(f"{crash}; run again under the perf hook it did not crash (see {rerun.directory})")
    if rerun.export is None:
        return Crashed(f"{crash}; run again under the perf hook, it crashed outside every dispatch's code, in IREE's runtime "
                       f"(see {rerun.directory})")
    return Crashed(f"{crash}; the fault was in dispatch {rerun.export}, made from {made_from(graph, line_shares, rerun.export)}", rerun.export)


def made_from(graph: nx.DiGraph, line_shares: pd.DataFrame, export: str) -> str:
    """``OP at FILE:LINE, ...``: the root source ops of ``export``'s call sites at their user lines."""
    lines = held_lines(line_shares)
    named = []
    for op in root_ops_of_export(graph, export)[:MAX_NAMED_OPS]:
        data = graph.nodes[op]
        kind = (data.get("op_kinds") or data.get("op_names") or data["label"]).split(", ")[-1]
        file, line = lines.get(op, (data["file"], data["line"]))
        named.append(f"{kind} at {file}:{line}" if file else kind)
    return ", ".join(named) or "no source op the provenance graph knows"

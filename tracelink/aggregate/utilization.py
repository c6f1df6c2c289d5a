"""Why a dispatch takes its time: achieved throughput against the machine's roofline, and a verdict.

Per call site, from its cost model (FLOPs and compulsory bytes of :mod:`tracelink.provenance.regions`)
and its **median** execution time: achieved GFLOP/s and GB/s, arithmetic intensity (FLOP/byte), the
shares of the machine's compute and bandwidth peaks, and a verdict, the first that holds:

1. *overhead-bound*: a median under 5 µs, where launching the dispatch costs as much as its work;
2. *parallelism-bound*: fewer workgroups than the device has workers, so some cores idle (on a GPU:
   compute units, its occupancy; not given where the device's unit count is unknown);
3. *far from both roofs*: under 10 % of the compute peak **and** under 10 % of the bandwidth
   (:data:`FAR_FROM_ROOFS`): neither the arithmetic units nor the memory system is what limits it, the
   generated code is;
4. *memory-bound*: an intensity below the machine's ridge point (peak FLOP/s ÷ peak bytes/s), and more
   bytes than the workers' L2 caches hold (smaller operands stay in cache from their producer, and the
   streaming bandwidth is not what bounds them); or under 10 % of the compute peak while at 10 % or
   more of the bandwidth: what it achieves is traffic, not arithmetic;
5. *compute-bound*: otherwise, so at 10 % of the compute peak or more.

A dispatch whose FLOPs or bytes are a lower bound (a dynamic size the profiled run did not fix, counted
as 1: ``lower_bound``) gets no verdict: its rates would read far below what it achieves.

Each verdict comes with a next step (:data:`NEXT_STEPS`) that says what the verdict means and that
nothing was measured on it yet: no compiler option is recommended without a measurement on this
program (`tracelink tune` measures them; :mod:`tracelink.aggregate.advice` then names the ones that
helped). Source ops and source lines get FLOPs, bytes and time credited the way time is (each call
site's attribution fractions; a line through its ops' user-self fractions), their rates from those
sums, and the verdict of the call site that gives them the most time; they are lower bounds when any
part is.
"""

from __future__ import annotations

import networkx as nx
import pandas as pd

from tracelink.collect.machine import Machine

OVERHEAD_NS = 5_000.0  # below this median a dispatch is dominated by its launch
FAR = "far-from-roofs"
# What each verdict means, to be followed by the shares of the peaks it reached (module docstring).
NEXT_STEPS = {
    "overhead-bound": "launch overhead dominates (under 5 µs a run)",
    "parallelism-bound": "fewer workgroups than workers: some cores idle",
    FAR: "the generated code, not the machine, is the limit",
    "memory-bound": "traffic, not arithmetic, limits it",
    "compute-bound": "the arithmetic itself is the limit",
}
NOT_MEASURED = "no compiler strategy measured on it yet: `tracelink tune PROFILE` measures which help"
LOWER_BOUND_STEP = "no verdict: its FLOPs and bytes are lower bounds (a dynamic size the run did not fix counted as 1)"
# Below this share of both peaks a dispatch is far from both roofs, and no dispatch below it of the
# compute peak is compute-bound: a dispatch an order of magnitude below a roof is not bound by it
# (docs/reference/numbers.md).
FAR_FROM_ROOFS = 0.10
UTILIZATION_COLUMNS = [
    "flops", "bytes", "lower_bound", "intensity", "gflops_s", "gbytes_s", "flops_peak_share", "bandwidth_peak_share", "verdict", "next_step",
]
# On a GPU (a ``gpu`` machine, :mod:`tracelink.collect.machine.gpu`) the workers are compute units, and
# `tracelink tune` (llvm-cpu only) measures nothing.
GPU_NEXT_STEPS = NEXT_STEPS | {"parallelism-bound": "fewer workgroups than the device has compute units: some idle (occupancy)"}
GPU_NOT_MEASURED = "no strategy measured on it: tracelink tune supports llvm-cpu only for now"


def verdict(flops: float, moved: float, median_ns: float, workgroup_count: int, machine: Machine, lower_bound: bool = False) -> tuple[str, str]:
    """(verdict, next step) of one dispatch; empty when it was not timed or has no cost model, and no
    verdict when its costs are lower bounds."""
    if not median_ns > 0 or not (flops > 0 or moved > 0):
        return "", ""
    if lower_bound:
        return "", LOWER_BOUND_STEP
    compute, bandwidth = flops / median_ns / machine.peak_gflops, moved / median_ns / machine.peak_gbps
    if median_ns < OVERHEAD_NS:
        name = "overhead-bound"
    elif 0 < workgroup_count < machine.workers:
        name = "parallelism-bound"
    elif max(compute, bandwidth) < FAR_FROM_ROOFS:
        name = FAR
    elif (moved > machine.cache_bytes and flops / moved < machine.ridge) or compute < FAR_FROM_ROOFS:
        name = "memory-bound"
    else:
        name = "compute-bound"
    steps, unmeasured = (GPU_NEXT_STEPS, GPU_NOT_MEASURED) if machine.kind == "gpu" else (NEXT_STEPS, NOT_MEASURED)
    return name, f"{steps[name]} ({compute:.1%} of the compute peak, {bandwidth:.1%} of the bandwidth); {unmeasured}"


def rates(flops: pd.Series, moved: pd.Series, ns: pd.Series, machine: Machine) -> pd.DataFrame:
    """Intensity, achieved GFLOP/s and GB/s, and their shares of the peaks (NaN where undefined)."""
    seconds = ns.where(ns > 0) / 1e9
    gflops = flops / seconds / 1e9
    gbytes = moved / seconds / 1e9
    return pd.DataFrame({
        "intensity": flops / moved.where(moved > 0), "gflops_s": gflops, "gbytes_s": gbytes,
        "flops_peak_share": gflops / machine.peak_gflops, "bandwidth_peak_share": gbytes / machine.peak_gbps,
    })


def call_site_utilization(call_sites: pd.DataFrame, graph: nx.DiGraph, machine: Machine) -> pd.DataFrame:
    """``call_sites`` with :data:`UTILIZATION_COLUMNS`: per execution FLOPs and bytes, rates at the median."""
    if call_sites.empty:
        return call_sites.assign(**{column: [] for column in UTILIZATION_COLUMNS})
    nodes = {int(data["index"]): data for _, data in graph.nodes(data=True) if data.get("kind") == "call_site"}
    table = call_sites.assign(
        flops=[float(nodes[int(i)].get("flops", 0.0)) for i in call_sites["call_site"]],
        bytes=[float(nodes[int(i)].get("bytes", 0.0)) for i in call_sites["call_site"]],
        lower_bound=[not bool(nodes[int(i)].get("cost_exact", True)) for i in call_sites["call_site"]],
    )
    table = pd.concat([table, rates(table["flops"], table["bytes"], table["median_ns"].astype(float), machine)], axis=1)
    verdicts = [
        verdict(row.flops, row.bytes, float(row.median_ns) if row.phase == "run" else 0.0, int(row.workgroup_count), machine, bool(row.lower_bound))
        for row in table.itertuples()
    ]
    return table.assign(verdict=[v for v, _ in verdicts], next_step=[s for _, s in verdicts])


def credited(call_sites: pd.DataFrame, attribution: pd.DataFrame) -> pd.DataFrame:
    """Per (call site, op): FLOPs, bytes and median-based time over the run, split by the time fractions."""
    sites = call_sites[["call_site", "flops", "bytes", "lower_bound", "median_ns", "count", "verdict", "next_step"]]
    rows = attribution[attribution["fraction"] > 0].merge(sites, on="call_site")  # init ops take no part
    executions = rows["count"].astype(float) * rows["fraction"]
    return pd.DataFrame({
        "call_site": rows["call_site"], "op": rows["op"], "flops": rows["flops"] * executions, "bytes": rows["bytes"] * executions,
        "lower_bound": rows["lower_bound"].astype(bool), "ns": rows["median_ns"].astype(float) * executions,
        "verdict": rows["verdict"], "next_step": rows["next_step"],
    })


def grouped_utilization(parts: pd.DataFrame, keys: list[str], machine: Machine) -> pd.DataFrame:
    """Sum credited FLOPs, bytes and time per key; the verdict of the call site giving each key the most
    time; a lower bound when any part is (then no verdict)."""
    if parts.empty:
        return pd.DataFrame(columns=[*keys, *UTILIZATION_COLUMNS])
    grouped = parts.groupby(keys, sort=False)
    sums = grouped[["flops", "bytes", "ns"]].sum()
    lower_bound = grouped["lower_bound"].any()
    dominant = parts.sort_values("ns", ascending=False, kind="stable").groupby(keys, sort=False)[["verdict", "next_step"]].first()
    dominant.loc[lower_bound, "verdict"] = ""
    dominant.loc[lower_bound, "next_step"] = LOWER_BOUND_STEP
    table = pd.concat([sums[["flops", "bytes"]], lower_bound, rates(sums["flops"], sums["bytes"], sums["ns"], machine), dominant], axis=1)
    return table.reset_index()


def with_utilization(table: pd.DataFrame, keys: list[str], values: pd.DataFrame) -> pd.DataFrame:
    """``table`` joined with utilization ``values`` on ``keys``; rows without any get empty verdicts."""
    joined = table.drop(columns=[c for c in UTILIZATION_COLUMNS if c in table], errors="ignore").merge(values, on=keys, how="left")
    joined[["verdict", "next_step"]] = joined[["verdict", "next_step"]].fillna("")
    joined[["flops", "bytes"]] = joined[["flops", "bytes"]].fillna(0.0)
    joined["lower_bound"] = joined["lower_bound"].astype("boolean").fillna(False).astype(bool)
    return joined


def with_empty_utilization(table: pd.DataFrame) -> pd.DataFrame:
    """An empty table with :data:`UTILIZATION_COLUMNS` too, so its file has the columns of any other."""
    return table.reindex(columns=[*table.columns, *(c for c in UTILIZATION_COLUMNS if c not in table)])


def op_and_line_utilization(
    call_sites: pd.DataFrame, source_ops: pd.DataFrame, source_lines: pd.DataFrame,
    attribution: pd.DataFrame, line_shares: pd.DataFrame, machine: Machine,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``source_ops`` and ``source_lines`` with :data:`UTILIZATION_COLUMNS` (see the module docstring)."""
    parts = credited(call_sites, attribution)
    ops = with_utilization(source_ops, ["op"], grouped_utilization(parts, ["op"], machine)) if not source_ops.empty else \
        with_empty_utilization(source_ops)
    if source_lines.empty:
        return ops, with_empty_utilization(source_lines)
    on_lines = parts.merge(line_shares[["op", "file", "line", "user_self"]], on="op")
    for column in ("flops", "bytes", "ns"):
        on_lines[column] = on_lines[column] * on_lines["user_self"]
    lines = with_utilization(source_lines, ["file", "line"], grouped_utilization(on_lines[on_lines["ns"] > 0], ["file", "line"], machine))
    return ops, lines


"""Why a dispatch takes its time: achieved throughput against the machine's roofline, and a verdict.

Per call site, from its cost model (FLOPs and compulsory bytes of :mod:`tracelink.provenance.regions`)
and its **median** execution time: achieved GFLOP/s and GB/s, arithmetic intensity (FLOP/byte), the
shares of the machine's compute and bandwidth peaks, and a verdict, the first that holds:

1. *overhead-bound*: a median under 5 µs, where launching the dispatch costs as much as its work;
2. *parallelism-bound*: fewer workgroups than the device has workers, so some cores idle (on a GPU:
   compute units, its occupancy; not given where the device's unit count is unknown);
3. *memory-bound*: an intensity below the machine's ridge point (peak FLOP/s ÷ peak bytes/s), and more
   bytes than the workers' L2 caches hold: smaller operands stay in cache from their producer, and the
   streaming bandwidth is not what bounds them;
4. *compute-bound*: otherwise.

A compute- or memory-bound dispatch below 10 % of its roof is far from the machine's limit; its next
step says so (the code, not the hardware, is what to improve: a memory-bound one is then pointed at its
tile sizes, not at fusion).

Each verdict comes with the one next step that fits it (:data:`NEXT_STEPS`). Source ops and source
lines get FLOPs, bytes and time credited the way time is (each call site's attribution fractions; a
line through its ops' user-self fractions), their rates from those sums, and the verdict of the call
site that gives them the most time.
"""

from __future__ import annotations

import networkx as nx
import pandas as pd

from tracelink.collect.machine import Machine

OVERHEAD_NS = 5_000.0  # below this median a dispatch is dominated by its launch
CONTRACTION_WORDS = ("matmul", "conv", "contract", "mmt4d", "matvec", "vecmat", "dot")
NEXT_STEPS = {
    "overhead-bound": "batch: fuse it with its neighbours or batch the calls, launch overhead dominates",
    "parallelism-bound": "tune tile sizes: smaller distribution tiles give every worker a workgroup",
    "memory-bound": "fuse with its producer: traffic, not arithmetic, limits it",
    "compute-bound contraction": "enable ukernels/data tiling (--iree-opt-data-tiling --iree-llvmcpu-enable-ukernels=all)",
    "compute-bound": "tune tile sizes: the arithmetic itself is the limit",
}
# On a GPU (a ``gpu`` machine, :mod:`tracelink.collect.machine.gpu`) the workers are compute units, and
# the CPU's flags do not apply.
GPU_NEXT_STEPS = NEXT_STEPS | {
    "parallelism-bound": "tune workgroup tiles: fewer workgroups than the device has compute units leave some idle (occupancy)",
    "compute-bound contraction": "tune tile and workgroup sizes for the GPU (matrix-core intrinsics where it has them; tracelink tune is llvm-cpu only for now)",
    "compute-bound": "tune tile and workgroup sizes: the arithmetic itself is the limit",
}
# Below this share of the roof that bounds it, a dispatch is far from its limit: the code, not the
# machine, is what to improve, and the next step says how far.
FAR_BELOW_PEAK = 0.10
UTILIZATION_COLUMNS = ["flops", "bytes", "intensity", "gflops_s", "gbytes_s", "flops_peak_share", "bandwidth_peak_share", "verdict", "next_step"]


def verdict(flops: float, moved: float, median_ns: float, workgroup_count: int, kind: str, machine: Machine) -> tuple[str, str]:
    """(verdict, next step) of one dispatch; empty when it was not timed or has no cost model.

    ``kind`` is the root op and export name (a convolution is a ``linalg.generic`` by the time it is
    dispatched; its export still says ``conv``).
    """
    if not median_ns > 0 or not (flops > 0 or moved > 0):
        return "", ""
    if median_ns < OVERHEAD_NS:
        name = "overhead-bound"
    elif 0 < workgroup_count < machine.workers:
        name = "parallelism-bound"
    elif moved > machine.cache_bytes and flops / moved < machine.ridge:
        name = "memory-bound"
    else:
        name = "compute-bound"
    contraction = name == "compute-bound" and any(word in kind for word in CONTRACTION_WORDS)
    steps = GPU_NEXT_STEPS if machine.kind == "gpu" else NEXT_STEPS
    step = steps[f"{name} contraction" if contraction else name]
    if name in ("compute-bound", "memory-bound"):
        share = flops / median_ns / machine.peak_gflops if name == "compute-bound" else moved / median_ns / machine.peak_gbps
        if share < FAR_BELOW_PEAK:  # the code, not the roof: a memory-bound one too is a matter of tiles
            roof = "compute" if name == "compute-bound" else "bandwidth"
            first = step.split(":")[0] if name == "compute-bound" else steps["compute-bound"].split(":")[0]
            step = f"{first}: it runs at {share:.1%} of the {roof} peak, far from the machine's limit"
    return name, step


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
    )
    table = pd.concat([table, rates(table["flops"], table["bytes"], table["median_ns"].astype(float), machine)], axis=1)
    verdicts = [
        verdict(row.flops, row.bytes, float(row.median_ns) if row.phase == "run" else 0.0, int(row.workgroup_count), f"{row.root_op} {row.export}", machine)
        for row in table.itertuples()
    ]
    return table.assign(verdict=[v for v, _ in verdicts], next_step=[s for _, s in verdicts])


def credited(call_sites: pd.DataFrame, attribution: pd.DataFrame) -> pd.DataFrame:
    """Per (call site, op): FLOPs, bytes and median-based time over the run, split by the time fractions."""
    sites = call_sites[["call_site", "flops", "bytes", "median_ns", "count", "verdict", "next_step"]]
    rows = attribution[attribution["fraction"] > 0].merge(sites, on="call_site")  # init ops take no part
    executions = rows["count"].astype(float) * rows["fraction"]
    return pd.DataFrame({
        "call_site": rows["call_site"], "op": rows["op"], "flops": rows["flops"] * executions, "bytes": rows["bytes"] * executions,
        "ns": rows["median_ns"].astype(float) * executions, "verdict": rows["verdict"], "next_step": rows["next_step"],
    })


def grouped_utilization(parts: pd.DataFrame, keys: list[str], machine: Machine) -> pd.DataFrame:
    """Sum credited FLOPs, bytes and time per key; the verdict of the call site giving each key the most time."""
    if parts.empty:
        return pd.DataFrame(columns=[*keys, *UTILIZATION_COLUMNS])
    sums = parts.groupby(keys, sort=False)[["flops", "bytes", "ns"]].sum()
    dominant = parts.sort_values("ns", ascending=False, kind="stable").groupby(keys, sort=False)[["verdict", "next_step"]].first()
    table = pd.concat([sums[["flops", "bytes"]], rates(sums["flops"], sums["bytes"], sums["ns"], machine), dominant], axis=1)
    return table.reset_index()


def with_utilization(table: pd.DataFrame, keys: list[str], values: pd.DataFrame) -> pd.DataFrame:
    """``table`` joined with utilization ``values`` on ``keys``; rows without any get empty verdicts."""
    joined = table.drop(columns=[c for c in UTILIZATION_COLUMNS if c in table], errors="ignore").merge(values, on=keys, how="left")
    joined[["verdict", "next_step"]] = joined[["verdict", "next_step"]].fillna("")
    joined[["flops", "bytes"]] = joined[["flops", "bytes"]].fillna(0.0)
    return joined


def op_and_line_utilization(
    call_sites: pd.DataFrame, source_ops: pd.DataFrame, source_lines: pd.DataFrame,
    attribution: pd.DataFrame, line_shares: pd.DataFrame, machine: Machine,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``source_ops`` and ``source_lines`` with :data:`UTILIZATION_COLUMNS` (see the module docstring)."""
    parts = credited(call_sites, attribution)
    ops = with_utilization(source_ops, ["op"], grouped_utilization(parts, ["op"], machine)) if not source_ops.empty else source_ops
    if source_lines.empty:
        return ops, source_lines
    on_lines = parts.merge(line_shares[["op", "file", "line", "user_self"]], on="op")
    for column in ("flops", "bytes", "ns"):
        on_lines[column] = on_lines[column] * on_lines["user_self"]
    lines = with_utilization(source_lines, ["file", "line"], grouped_utilization(on_lines[on_lines["ns"] > 0], ["file", "line"], machine))
    return ops, lines


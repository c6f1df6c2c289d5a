"""Aggregate stage: dispatch events → time per call site, export, source op and source line.

Statistics (``count, total_ns, mean_ns, median_ns, p10_ns, p90_ns, ci95_low_ns, ci95_high_ns,
share``) are taken over single executions for call sites and exports, and over iterations (one call
of the function) for source ops and source lines, whose time per iteration is the sum of what every
call site credits them. The 95 % CI of the mean uses Student's t. ``share`` is the part of all
dispatch time; for source lines it is inclusive (an op's time counts for every line of its stack
and fused members, once per line), so line shares can add up to more than 1.

A call site's time is split between its source ops by the edge weights of the provenance graph (the
cost estimate of :mod:`tracelink.provenance.regions`), renormalised over the ops that have a node, so
the per-op numbers of a dispatch add up exactly to its measured total.
"""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pandas as pd

from tracelink.provenance.graph import audit_of, nodes_of_kind

STAT_COLUMNS = ["count", "total_ns", "mean_ns", "median_ns", "p10_ns", "p90_ns", "ci95_low_ns", "ci95_high_ns", "share"]


# Student's t 0.975 quantiles for 1..30 degrees of freedom (standard table values).
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile_975(degrees_of_freedom: int) -> float:
    """Student's t 0.975 quantile: the table up to 30, then the Cornish-Fisher expansion (error < 1e-3).

    A table instead of scipy.stats keeps scipy's ~1 s import out of every tracelink command.
    """
    if degrees_of_freedom <= len(T_975):
        return T_975[degrees_of_freedom - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * degrees_of_freedom) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * degrees_of_freedom**2)


def grouped_stats(frame: pd.DataFrame, keys: list[str], value: str, grand_total: float) -> pd.DataFrame:
    """The statistics (:data:`STAT_COLUMNS`) of ``value`` for every group of ``keys``, in first-seen order."""
    if frame.empty:
        return pd.DataFrame(columns=[*keys, *STAT_COLUMNS])
    values = frame.assign(**{value: frame[value].astype(float)}).groupby(keys, sort=False)[value]
    table = values.agg(["count", "sum", "mean", "median", "std"])
    quantiles = values.quantile([0.1, 0.9]).unstack()  # linear interpolation, as numpy.percentile
    t = table["count"].map(lambda n: t_quantile_975(n - 1) if n > 1 else 0.0)
    half_width = (t * table["std"].fillna(0.0) / np.sqrt(table["count"])).fillna(0.0)
    result = pd.DataFrame({
        "count": table["count"],
        "total_ns": table["sum"],
        "mean_ns": table["mean"],
        "median_ns": table["median"],
        "p10_ns": quantiles[0.1],
        "p90_ns": quantiles[0.9],
        "ci95_low_ns": table["mean"] - half_width,
        "ci95_high_ns": table["mean"] + half_width,
        "share": table["sum"] / grand_total if grand_total else 0.0,
    })
    return result.reset_index()


def attribution(graph: nx.DiGraph) -> pd.DataFrame:
    """One row per (call site, source op) with the op's fraction of that call site's time; fractions sum to 1."""
    rows = []
    for node in nodes_of_kind(graph, "call_site"):
        edges = [(source, data["weight"], data["role"]) for source, _, data in graph.in_edges(node, data=True) if data.get("kind") == "feeds"]
        total = sum(weight for _, weight, _ in edges)
        for source, weight, role in edges:
            fraction = weight / total if total > 0 else (1.0 if role == "root" else 0.0)
            rows.append({"call_site": graph.nodes[node]["index"], "op": source, "role": role, "fraction": fraction})
    return pd.DataFrame(rows, columns=["call_site", "op", "role", "fraction"])


def call_site_table(events: pd.DataFrame, graph: nx.DiGraph) -> pd.DataFrame:
    """Per call site: provenance (export, root op, source ops and lines) and statistics."""
    grand_total = float(events["duration_ns"].sum())
    timed = grouped_stats(events.dropna(subset=["call_site"]), ["call_site"], "duration_ns", grand_total)
    ops_of_site = dict(tuple(attribution(graph).groupby("call_site")))
    no_ops = pd.DataFrame(columns=["call_site", "op", "role", "fraction"])
    lines_of = {op: op_lines(graph, op) for op in nodes_of_kind(graph, "source_op")}
    rows = []
    for node in nodes_of_kind(graph, "call_site"):
        data = graph.nodes[node]
        export = graph.nodes.get(f"export:{data['export']}", {})
        ops = ops_of_site.get(data["index"], no_ops)
        rows.append({
            "call_site": data["index"], "export": data["export"], "executable": export.get("executable", ""),
            "root_op": data["root_op"], "loc": data["loc"], "phase": data["phase"], "workgroups": data["workgroups"],
            "workgroup_count": data["workgroup_count"],
            "root_ops": ";".join(ops.loc[ops["role"] == "root", "op"]),
            "producer_ops": ";".join(ops.loc[ops["role"] == "producer", "op"]),
            "source_lines": ";".join(sorted({line for op in ops["op"] for line in lines_of[op]})),
        })
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table = table.merge(timed.astype({"call_site": int}), on="call_site", how="left") if not timed.empty else table.assign(**{c: np.nan for c in STAT_COLUMNS})
    tiles = events.dropna(subset=["call_site"]).groupby("call_site")[["tile_count", "tile_duration_sum_ns"]].mean()
    tiles.index = tiles.index.astype(int)
    table = table.join(tiles.rename(columns={"tile_count": "tile_count_mean", "tile_duration_sum_ns": "tile_duration_sum_mean_ns"}), on="call_site")
    table[STAT_COLUMNS] = table[STAT_COLUMNS].fillna(0)
    return table


def export_table(events: pd.DataFrame, graph: nx.DiGraph) -> pd.DataFrame:
    """Per export (dispatch function): what it is, how many call sites use it, and statistics."""
    grand_total = float(events["duration_ns"].sum())
    timed = grouped_stats(events, ["export"], "duration_ns", grand_total)
    rows = []
    for node in nodes_of_kind(graph, "export"):
        data = graph.nodes[node]
        rows.append({
            "export": data["label"], "executable": data.get("executable", ""), "root_op": data.get("root_op", ""),
            "shapes": data.get("shapes", ""), "lowering_config": data.get("lowering_config", ""),
            "benchmark_file": data.get("benchmark_file", ""), "source_file": data.get("source_file", ""),
            "call_sites": graph.in_degree(node),
        })
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table = table.merge(timed.astype({"export": str}), on="export", how="left")
    table[STAT_COLUMNS] = table[STAT_COLUMNS].fillna(0)
    return table.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def op_lines(graph: nx.DiGraph, op: str) -> list[str]:
    """The distinct ``file:line`` of every position of a source op, innermost first."""
    positions = json.loads(graph.nodes[op]["positions"])
    return list(dict.fromkeys(p.rsplit(":", 1)[0] for p in positions))


def op_iteration_times(events: pd.DataFrame, graph: nx.DiGraph) -> pd.DataFrame:
    """Time each source op is credited in each iteration: columns ``op, iteration, ns``."""
    timed = events.dropna(subset=["call_site", "iteration"])[["call_site", "iteration", "duration_ns"]].astype("int64")
    credited = timed.merge(attribution(graph), on="call_site")
    credited["ns"] = credited["duration_ns"] * credited["fraction"]
    return credited.groupby(["op", "iteration"], as_index=False)["ns"].sum()


def with_all_iterations(times: pd.DataFrame, key: list[str], iterations: int) -> pd.DataFrame:
    """Fill iterations where a key got no time with zeros, so statistics are over every iteration."""
    if times.empty or iterations == 0:
        return times
    full = pd.MultiIndex.from_product([times[key].drop_duplicates().itertuples(index=False, name=None), range(iterations)])
    indexed = times.set_index([*key, "iteration"])["ns"]
    index = pd.MultiIndex.from_tuples([(*k, i) for k, i in full], names=[*key, "iteration"])
    return indexed.reindex(index, fill_value=0.0).reset_index()


def source_op_table(events: pd.DataFrame, graph: nx.DiGraph) -> pd.DataFrame:
    """Per source op: location, the call sites it feeds (as root / producer) and per-iteration statistics."""
    grand_total = float(events["duration_ns"].sum())
    iterations = int(events["iteration"].max()) + 1 if events["iteration"].notna().any() else 0
    times = with_all_iterations(op_iteration_times(events, graph), ["op"], iterations)
    timed = grouped_stats(times, ["op"], "ns", grand_total)
    fed: dict[tuple[str, str], list[str]] = {}  # (op, role) -> call sites, in order
    for share in attribution(graph).itertuples():
        fed.setdefault((share.op, share.role), []).append(str(share.call_site))
    rows = []
    for node in nodes_of_kind(graph, "source_op"):
        data = graph.nodes[node]
        rows.append({
            "op": node, "label": data["label"], "name": data["name"], "file": data["file"], "line": data["line"], "col": data["col"],
            "op_names": data["op_names"], "in_input": data["in_input"], "compute": data["compute"],
            "root_of": ";".join(fed.get((node, "root"), [])),
            "producer_in": ";".join(fed.get((node, "producer"), [])),
            "lines": ";".join(op_lines(graph, node)),
        })
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table = table.merge(timed, on="op", how="left") if not timed.empty else table.assign(**{c: np.nan for c in STAT_COLUMNS})
    table[STAT_COLUMNS] = table[STAT_COLUMNS].fillna(0)
    return table.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def source_line_table(events: pd.DataFrame, graph: nx.DiGraph) -> pd.DataFrame:
    """Per source line (every file:line of every op's stack and fused members): inclusive statistics."""
    grand_total = float(events["duration_ns"].sum())
    iterations = int(events["iteration"].max()) + 1 if events["iteration"].notna().any() else 0
    op_times = op_iteration_times(events, graph)
    lines = pd.DataFrame(
        [{"op": op, "file": line.rsplit(":", 1)[0], "line": int(line.rsplit(":", 1)[1])} for op in nodes_of_kind(graph, "source_op") for line in op_lines(graph, op)],
        columns=["op", "file", "line"],
    )
    per_line = op_times.merge(lines, on="op").groupby(["file", "line", "iteration"], as_index=False)["ns"].sum()
    times = with_all_iterations(per_line, ["file", "line"], iterations)
    table = grouped_stats(times, ["file", "line"], "ns", grand_total)
    if table.empty:
        return pd.DataFrame(columns=["file", "line", "ops", "call_site_ids", *STAT_COLUMNS])
    ops_of = lines.groupby(["file", "line"])["op"].agg(";".join)
    sites_of = lines.merge(attribution(graph), on="op").groupby(["file", "line"])["call_site"].agg(lambda sites: ";".join(map(str, sorted(set(sites)))))
    keys = list(zip(table["file"], table["line"]))
    table["ops"] = [ops_of.get(key, "") for key in keys]
    table["call_site_ids"] = [sites_of.get(key, "") for key in keys]
    return table.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def coverage(events: pd.DataFrame, call_sites: pd.DataFrame, graph: nx.DiGraph) -> dict:
    """How much of the run the mapping explains, and the audit counts."""
    # a call site is mapped when any source op (file:line, or a bare name such as an ONNX node) feeds it
    located = {int(row.call_site) for row in call_sites.itertuples() if row.root_ops or row.producer_ops}
    total = float(events["duration_ns"].sum())
    attributed = float(events.loc[events["call_site"].isin(located), "duration_ns"].sum())
    with_lines = float(events.loc[events["call_site"].isin(call_sites.loc[call_sites["source_lines"] != "", "call_site"]), "duration_ns"].sum())
    audit = audit_of(graph)
    return {
        "dispatch_time_attributed_share": attributed / total if total else 0.0,
        "dispatch_time_with_source_lines_share": with_lines / total if total else 0.0,
        "call_sites": len(call_sites),
        "call_sites_mapped": len(located),
        "call_sites_mapped_share": len(located) / len(call_sites) if len(call_sites) else 0.0,
        "events": len(events),
        "events_unmatched": int(events["call_site"].isna().sum()),
        "audit_counts": {key: len(value) for key, value in audit.items()},
    }

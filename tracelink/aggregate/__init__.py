"""Aggregate stage: dispatch events → time per call site, export, source op and source line.

Statistics (``count, total_ns, mean_ns, median_ns, p10_ns, p90_ns, ci95_low_ns, ci95_high_ns,
share, noisy``) are taken over single executions for call sites and exports, and over iterations (one
call of the function) for source ops and source lines, whose time per iteration is the sum of what
every call site credits them. The interval is a distribution-free 95 % CI of the median; ``noisy``
flags a mean well above the median. ``share`` is the part of all dispatch time. :func:`run_load` flags
a run whose iterations spread widely (the machine was busy with something else).

Source lines get *self* time, as CPU profilers do: an op's time is split equally between the members
of its fused location, and each member's part goes to its innermost frame's line, so self times of all
lines add up to the time of the ops that have a line. ``user_self_ns`` does the same with library
frames (:mod:`tracelink.compile.frames`: installed packages but the model definitions they ship, the standard
library, and the rules given) skipped, so an op called through a
framework lands on the user's line that called it. ``inclusive_ns`` credits every line of a member's
call stack once (like a caller's inclusive time), so inclusive shares add up to more than 1. A line's
``ops`` lead with the op holding most of its time; its ``call_site_ids`` are the call sites that
give it time. Time by component and op kind: :mod:`tracelink.aggregate.components`.

A call site's time is split between its source ops at the machine's roofs (:func:`set_roofs`): each op
gets its time at the roofs, the larger of its FLOPs over the compute peak and its bytes over the
bandwidth (the edges' ``flops`` and ``bytes``, at the run's sizes, from
:mod:`tracelink.provenance.regions`), and the dispatch's median time beyond the sum of those (how far
the code runs from the roofs) is split by the edge weights (the iteration-space estimate of the work
the code does). Without the roofs, or where no op of a call site has FLOPs or bytes, the whole split
is by the edge weights. Either way it is renormalised over the ops that have a node, so the per-op
numbers of a dispatch add up exactly to its measured total.
"""

from __future__ import annotations

import json
from collections import defaultdict

import networkx as nx
import numpy as np
import pandas as pd

from tracelink.compile.frames import LIBRARY_FRAMES, is_library, user_frame
from tracelink.provenance.graph import audit_of, nodes_of_kind

# what the split at the machine's roofs reads on the graph (set by set_roofs)
PEAK_GFLOPS, PEAK_GBPS, MEDIAN_NS = "peak_gflops", "peak_gbps", "median_ns"
# a source op's own fields in source_ops.csv, before its statistics
SOURCE_OP_FIELDS = ["op", "label", "name", "file", "line", "col", "op_names", "op_kinds", "in_input", "compute", "root_of", "producer_in",
                    "absorbed_in", "lines"]
STAT_COLUMNS = ["count", "total_ns", "mean_ns", "median_ns", "p10_ns", "p90_ns", "ci95_low_ns", "ci95_high_ns", "share", "noisy"]
Z_975 = 1.959964
# A group is flagged noisy when its mean exceeds its median by this factor (a few slow outliers).
NOISY_MEAN_OVER_MEDIAN = 1.25
# The run is flagged loaded when its slow iterations (p90 of the per-iteration dispatch time) take this
# many times its fast ones (p10): the same work took that much longer, so something else used the cores.
LOADED_ITERATION_SPREAD = 1.5


def median_interval_ranks(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """0-based ranks of the order statistics bounding a 95 % confidence interval of the median.

    Distribution-free (binomial, normal approximation): the interval lies between two measured values,
    so it never goes below the smallest one (never negative) and one outlier cannot stretch it.
    Below 6 values no pair reaches 95 % and the interval is the whole range.
    """
    half_width = Z_975 * np.sqrt(n) / 2
    low = np.clip(np.floor(n / 2 - half_width), 1, n).astype(int) - 1
    high = np.clip(np.ceil(1 + n / 2 + half_width), 1, n).astype(int) - 1
    return low, high


def grouped_stats(frame: pd.DataFrame, keys: list[str], value: str, grand_total: float) -> pd.DataFrame:
    """The statistics (:data:`STAT_COLUMNS`) of ``value`` for every group of ``keys``, in first-seen order.

    ``ci95_*`` is the 95 % confidence interval of the median (see :func:`median_interval_ranks`).
    """
    if frame.empty:
        return pd.DataFrame(columns=[*keys, *STAT_COLUMNS])
    frame = frame.assign(**{value: frame[value].astype(float)})
    values = frame.groupby(keys, sort=False)[value]
    table = values.agg(["count", "sum", "mean", "median"])
    quantiles = values.quantile([0.1, 0.9]).unstack()  # linear interpolation, as numpy.percentile
    ordered = frame.sort_values(value, kind="stable")
    rank = ordered.groupby(keys, sort=False).cumcount().to_numpy()
    size = ordered.groupby(keys, sort=False)[value].transform("size").to_numpy()
    low_rank, high_rank = median_interval_ranks(size)
    bounds = ordered.assign(_low=rank == low_rank, _high=rank == high_rank)
    low = bounds[bounds["_low"]].groupby(keys, sort=False)[value].first()
    high = bounds[bounds["_high"]].groupby(keys, sort=False)[value].first()
    result = pd.DataFrame({
        "count": table["count"],
        "total_ns": table["sum"],
        "mean_ns": table["mean"],
        "median_ns": table["median"],
        "p10_ns": quantiles[0.1],
        "p90_ns": quantiles[0.9],
        "ci95_low_ns": low.reindex(table.index),
        "ci95_high_ns": high.reindex(table.index),
        "share": table["sum"] / grand_total if grand_total else 0.0,
        "noisy": table["mean"] > NOISY_MEAN_OVER_MEDIAN * table["median"],
    })
    return result.reset_index()


def attribution(graph: nx.DiGraph) -> pd.DataFrame:
    """One row per (call site, source op) with the op's fraction of that call site's time; fractions sum to 1
    (split at the machine's roofs set on ``graph``: the module docstring). Made once per profile, where it is
    aggregated or loaded, and carried on it (``Profile.attribution``)."""
    flops_per_ns, bytes_per_ns = graph.graph.get(PEAK_GFLOPS), graph.graph.get(PEAK_GBPS)  # GFLOP/s is FLOP/ns
    roofs = bool(flops_per_ns and bytes_per_ns)
    rows = []
    for node in nodes_of_kind(graph, "call_site"):
        edges = [(source, data["weight"], data["role"],
                  max(data.get("flops", 0.0) / flops_per_ns, data.get("bytes", 0.0) / bytes_per_ns) if roofs else 0.0)
                 for source, _, data in graph.in_edges(node, data=True) if data.get("kind") == "feeds"]
        total = sum(weight for _, weight, _, _ in edges)
        roots = sum(role == "root" for _, _, role, _ in edges)
        at_roofs = sum(ns for *_, ns in edges)
        slack = max(float(graph.nodes[node].get(MEDIAN_NS, 0.0)) - at_roofs, 0.0)
        for source, weight, role, ns in edges:
            fraction = weight / total if total > 0 else (1.0 / roots if role == "root" else 0.0)
            if at_roofs > 0:
                fraction = (ns + fraction * slack) / (at_roofs + slack)
            rows.append({"call_site": graph.nodes[node]["index"], "op": source, "role": role, "fraction": fraction})
    return pd.DataFrame(rows, columns=["call_site", "op", "role", "fraction"])


def set_roofs(graph: nx.DiGraph, peak_gflops: float | None, peak_gbps: float | None, medians: dict[int, float]) -> None:
    """Record on ``graph`` what its dispatches' time is split at: the machine's peaks and each call site's
    median time (``medians``, by call-site index), which :func:`attribution` reads."""
    for node in nodes_of_kind(graph, "call_site"):
        graph.nodes[node][MEDIAN_NS] = float(medians.get(graph.nodes[node]["index"], 0.0))
    graph.graph[PEAK_GFLOPS], graph.graph[PEAK_GBPS] = peak_gflops or 0.0, peak_gbps or 0.0


def call_site_table(events: pd.DataFrame, graph: nx.DiGraph, attributed: pd.DataFrame) -> pd.DataFrame:
    """Per call site: provenance (export, root op, source ops and lines) and statistics; ``attributed`` is
    the graph's :func:`attribution`."""
    grand_total = float(events["duration_ns"].sum())
    timed = grouped_stats(events.dropna(subset=["call_site"]), ["call_site"], "duration_ns", grand_total)
    # each call site's ops by role, in attribution order (plain lists: a pandas filter per call site is
    # slow on a large model)
    ops_of_site: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for site, op, role in attributed[["call_site", "op", "role"]].itertuples(index=False):
        ops_of_site[site][role].append(op)
    lines_of = {op: op_lines(graph, op) for op in nodes_of_kind(graph, "source_op")}
    rows = []
    for node in nodes_of_kind(graph, "call_site"):
        data = graph.nodes[node]
        export = graph.nodes.get(f"export:{data['export']}", {})
        roles = ops_of_site.get(data["index"], {})
        rows.append({
            "call_site": data["index"], "export": data["export"], "executable": export.get("executable", ""),
            "root_op": data["root_op"], "loc": data["loc"], "phase": data["phase"], "workgroups": data["workgroups"],
            "workgroup_count": data["workgroup_count"],
            **{f"{role}_ops": ";".join(roles.get(role, ())) for role in ("root", "producer", "absorbed")},
            "source_lines": ";".join(sorted({line for ops in roles.values() for op in ops for line in lines_of[op]})),
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


def op_iteration_times(events: pd.DataFrame, attributed: pd.DataFrame) -> pd.DataFrame:
    """Time each source op is credited in each iteration (through the graph's :func:`attribution`):
    columns ``op, iteration, ns``."""
    timed = events.dropna(subset=["call_site", "iteration"])[["call_site", "iteration", "duration_ns"]].astype("int64")
    credited = timed.merge(attributed, on="call_site")
    credited["ns"] = credited["duration_ns"] * credited["fraction"]
    return credited.groupby(["op", "iteration"], as_index=False)["ns"].sum()


def with_all_iterations(times: pd.DataFrame, key: list[str], iterations: int) -> pd.DataFrame:
    """Fill iterations where a key got no time with zeros, so statistics are over every iteration."""
    if times.empty or iterations == 0:
        return times
    every = times[key].drop_duplicates().merge(pd.DataFrame({"iteration": np.arange(iterations, dtype=times["iteration"].dtype)}), how="cross")
    return every.merge(times[[*key, "iteration", "ns"]], on=[*key, "iteration"], how="left").fillna({"ns": 0.0})


def source_op_table(events: pd.DataFrame, graph: nx.DiGraph, attributed: pd.DataFrame) -> pd.DataFrame:
    """Per source op: location, the call sites it feeds (as root / producer) and per-iteration statistics;
    ``attributed`` is the graph's :func:`attribution`."""
    grand_total = float(events["duration_ns"].sum())
    iterations = int(events["iteration"].max()) + 1 if events["iteration"].notna().any() else 0
    times = with_all_iterations(op_iteration_times(events, attributed), ["op"], iterations)
    timed = grouped_stats(times, ["op"], "ns", grand_total)
    fed: dict[tuple[str, str], list[str]] = {}  # (op, role) -> call sites, in order
    for share in attributed.itertuples():
        fed.setdefault((share.op, share.role), []).append(str(share.call_site))
    rows = []
    for node in nodes_of_kind(graph, "source_op"):
        data = graph.nodes[node]
        rows.append({
            "op": node, "label": data["label"], "name": data["name"], "file": data["file"], "line": data["line"], "col": data["col"],
            "op_names": data["op_names"], "op_kinds": data.get("op_kinds", ""), "in_input": data["in_input"], "compute": data["compute"],
            "root_of": ";".join(fed.get((node, "root"), [])),
            "producer_in": ";".join(fed.get((node, "producer"), [])),
            "absorbed_in": ";".join(fed.get((node, "absorbed"), [])),
            "lines": ";".join(op_lines(graph, node)),
        })
    table = pd.DataFrame(rows, columns=SOURCE_OP_FIELDS)
    if table.empty:
        return table.assign(**{c: pd.Series(dtype=float) for c in STAT_COLUMNS})
    table = table.merge(timed, on="op", how="left") if not timed.empty else table.assign(**{c: np.nan for c in STAT_COLUMNS})
    table[STAT_COLUMNS] = table[STAT_COLUMNS].fillna(0)
    return table.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def op_line_shares(graph: nx.DiGraph, library_globs: tuple[str, ...] = LIBRARY_FRAMES) -> pd.DataFrame:
    """How each source op's time divides over lines: columns ``op, file, line, self, user_self, inclusive``.
    It depends on the graph alone (the provenance job makes it beside the compiler) and is carried on the
    profile (``Profile.line_shares``).

    Each member of an op's location gets an equal part; a member's part is *self* time of its
    innermost line, *user self* time of its innermost line outside library code (its innermost line
    when all are library code), and *inclusive* time of each distinct line of its stack.
    """
    rows: list[tuple[str, str, int, float, float, float]] = []
    for op in nodes_of_kind(graph, "source_op"):
        members = json.loads(graph.nodes[op].get("members") or "[]")
        shares: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for member in members:
            lines = list(dict.fromkeys(split_line(position) for position in member["positions"]))
            if not lines:
                continue
            part = 1.0 / len(members)
            shares[lines[0]][0] += part
            user = lines[user_frame([file for file, _ in lines], library_globs)]
            shares[user][1] += part
            for line in lines:
                shares[line][2] += part
        rows.extend((op, file, line, *values) for (file, line), values in shares.items())
    return pd.DataFrame(rows, columns=["op", "file", "line", "self", "user_self", "inclusive"])


def user_lines(graph: nx.DiGraph, library_globs: tuple[str, ...] = LIBRARY_FRAMES) -> dict[str, tuple[str, int]]:
    """Each source op's user line: the line holding most of its user self time (:func:`op_line_shares`), the
    line the summary ranks its time under."""
    return held_lines(op_line_shares(graph, library_globs))


def held_lines(shares: pd.DataFrame) -> dict[str, tuple[str, int]]:
    """:func:`user_lines` of the graph whose :func:`op_line_shares` are ``shares``."""
    if shares.empty:
        return {}
    held = shares.sort_values("user_self", ascending=False, kind="stable").drop_duplicates("op")
    return {row.op: (row.file, int(row.line)) for row in held.itertuples() if row.user_self > 0}


def split_line(position: str) -> tuple[str, int]:
    """``file:line:col`` → (file, line)."""
    path, line, _ = position.rsplit(":", 2)
    return path, int(line)


def source_line_table(events: pd.DataFrame, attributed: pd.DataFrame, shares: pd.DataFrame,
                      library_globs: tuple[str, ...] = LIBRARY_FRAMES) -> pd.DataFrame:
    """Per source line: self-time statistics over iterations, user-self and inclusive totals (module docstring),
    from the graph's :func:`attribution` and :func:`op_line_shares` (made with ``library_globs``)."""
    columns = ["file", "line", "library", *STAT_COLUMNS, "user_self_ns", "user_self_share", "inclusive_ns", "inclusive_share", "ops", "call_site_ids"]
    grand_total = float(events["duration_ns"].sum())
    iterations = int(events["iteration"].max()) + 1 if events["iteration"].notna().any() else 0
    op_times = op_iteration_times(events, attributed)
    credited = op_times.merge(shares, on="op")
    if credited.empty:
        return pd.DataFrame(columns=columns)
    credited["ns"] = credited["ns"] * credited["self"]
    per_line = credited.groupby(["file", "line", "iteration"], as_index=False)["ns"].sum()
    table = grouped_stats(with_all_iterations(per_line, ["file", "line"], iterations), ["file", "line"], "ns", grand_total)
    op_totals = op_times.groupby("op")["ns"].sum()
    totals = shares.assign(op_ns=shares["op"].map(op_totals).fillna(0.0))
    totals = totals.assign(user_self_ns=totals["op_ns"] * totals["user_self"], inclusive_ns=totals["op_ns"] * totals["inclusive"])
    # a line's ops lead with the one holding most of its time: its own self time there, or on a user line
    # the library work it called (the user view the printed table ranks by)
    held = totals["op_ns"] * totals[["self", "user_self"]].max(axis=1)
    totals = totals.assign(line_ns=held).sort_values(["line_ns", "inclusive_ns"], ascending=False, kind="stable")
    by_line = totals.groupby(["file", "line"]).agg(
        user_self_ns=("user_self_ns", "sum"), inclusive_ns=("inclusive_ns", "sum"), ops=("op", lambda ops: ";".join(dict.fromkeys(ops))),
    )
    table = table.join(by_line, on=["file", "line"], how="outer") if not table.empty else by_line.reset_index()
    table[STAT_COLUMNS] = table[STAT_COLUMNS].fillna({c: 0 for c in STAT_COLUMNS if c != "noisy"}).fillna({"noisy": False})
    table["user_self_share"] = table["user_self_ns"] / grand_total if grand_total else 0.0
    table["inclusive_share"] = table["inclusive_ns"] / grand_total if grand_total else 0.0
    table["library"] = [is_library(path, library_globs) for path in table["file"]]
    fed = attributed[attributed["fraction"] > 0]  # only the call sites that give the line time (not the fills borrowed from it)
    sites_of = shares.merge(fed, on="op").groupby(["file", "line"])["call_site"].agg(lambda sites: ";".join(map(str, sorted(set(sites)))))
    table["call_site_ids"] = [sites_of.get(key, "") for key in zip(table["file"], table["line"])]
    return table[columns].sort_values(["total_ns", "inclusive_ns"], ascending=False, kind="stable").reset_index(drop=True)


def coverage(events: pd.DataFrame, call_sites: pd.DataFrame, graph: nx.DiGraph, calls: int | None = None) -> dict:
    """How much of the run the mapping explains, which call sites lack events, and the audit counts.

    Every call site of the function runs once per call, so each should have ``calls`` events (the
    repetitions run; by default the iterations the events cover): ``missing_events`` lists those with fewer.
    """
    # a call site is mapped when any source op (file:line, or a bare name such as an ONNX node) feeds it
    located = {int(row.call_site) for row in call_sites.itertuples() if row.root_ops or row.producer_ops}
    run = call_sites["phase"] == "run" if len(call_sites) else pd.Series(dtype=bool)
    run_sites = set(call_sites.loc[run, "call_site"].astype(int)) if len(call_sites) else set()
    total = float(events["duration_ns"].sum())
    attributed = float(events.loc[events["call_site"].isin(located), "duration_ns"].sum())
    with_lines = float(events.loc[events["call_site"].isin(call_sites.loc[call_sites["source_lines"] != "", "call_site"]), "duration_ns"].sum())
    audit = audit_of(graph)
    expected = calls if calls is not None else (int(events["iteration"].max()) + 1 if events["iteration"].notna().any() else 0)
    missing = missing_events(events, run_sites, expected)
    return {
        "dispatch_time_attributed_share": attributed / total if total else 0.0,
        "dispatch_time_with_source_lines_share": with_lines / total if total else 0.0,
        "call_sites": len(run_sites),
        "call_sites_mapped": len(located & run_sites),
        "call_sites_mapped_share": len(located & run_sites) / len(run_sites) if run_sites else 0.0,
        "call_sites_initializer": len(call_sites) - len(run_sites),  # run once at load, never timed
        "call_sites_initializer_mapped": len(located - run_sites),
        "events": len(events),
        "events_unmatched": int(events["call_site"].isna().sum()),
        "events_expected_per_call_site": expected,
        "call_sites_missing_events": len(missing),
        "events_missing": sum(site["expected"] - site["seen"] for site in missing),
        "missing_events": missing,
        "audit_counts": {key: len(value) for key, value in audit.items() if key != "reasons"},
        "audit_reasons": audit.get("reasons", {}),
    }


def missing_events(events: pd.DataFrame, run_sites: set[int], expected: int) -> list[dict]:
    """The call sites with fewer than ``expected`` events, in call-site order: ``{call_site, expected, seen}``."""
    seen = events.dropna(subset=["call_site"]).groupby("call_site").size()
    counts = {int(site): int(count) for site, count in seen.items()}
    return [
        {"call_site": site, "expected": expected, "seen": counts.get(site, 0)}
        for site in sorted(run_sites) if counts.get(site, 0) < expected
    ]


def run_load(events: pd.DataFrame) -> dict:
    """Whether the machine was loaded during the run, from the run-to-run spread of the iterations.

    ``iteration_spread`` is p90 / p10 of the dispatch time of each iteration (every iteration runs the
    same dispatches, so on a quiet machine it stays near 1); ``loaded`` is set above
    :data:`LOADED_ITERATION_SPREAD`. With fewer than 2 timed iterations there is no spread (``None``).
    """
    timed = events.dropna(subset=["iteration"])
    per_iteration = timed.groupby("iteration")["duration_ns"].sum().astype(float)
    if len(per_iteration) < 2 or per_iteration.quantile(0.1) <= 0:
        return {"iteration_spread": None, "loaded": False}
    spread = float(per_iteration.quantile(0.9) / per_iteration.quantile(0.1))
    return {"iteration_spread": spread, "loaded": spread > LOADED_ITERATION_SPREAD}

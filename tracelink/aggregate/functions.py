"""Several functions of one program side by side: each one's figures, and the source lines they share."""

from __future__ import annotations

import pandas as pd


def function_figures(name: str, summary: dict) -> dict:
    """One function's figures per call from its profile summary: wall and dispatch time, host share, size."""
    host = summary.get("host_time") or {}
    memory = summary.get("memory") or {}
    return {
        "function": name,
        "iterations": summary["iterations"],
        "wall_ns_per_call": host.get("wall_ns_per_call"),
        "dispatch_ns_per_call": summary.get("dispatch_ns_per_iteration"),
        "host_share": host.get("host_share"),
        "call_sites": summary["coverage"].get("call_sites"),
        "peak_bytes": memory.get("peak_bytes"),
    }


def lines_across_functions(lines: dict[str, tuple[pd.DataFrame, int]]) -> pd.DataFrame:
    """Source lines by the user self time per call they get in each function (ns; 0 where a function has
    none of it), hottest first by their largest share of any one function's time.

    ``lines`` maps each function to its ``source_lines`` table and its iteration count. One row per
    ``file``/``line``; a column per function (its self time per call) and ``top_share`` (the largest share).
    """
    columns = []
    for name, (table, iterations) in lines.items():
        if table.empty:
            continue
        per_call = table.groupby(["file", "line"])[["user_self_ns", "user_self_share"]].sum()
        columns.append(per_call["user_self_ns"].div(max(iterations, 1)).rename(name))
        columns.append(per_call["user_self_share"].rename(f"{name} share"))
    if not columns:
        return pd.DataFrame(columns=["file", "line", *lines, "top_share"])
    joined = pd.concat(columns, axis=1).fillna(0.0)
    shares = [column for column in joined.columns if column.endswith(" share")]
    joined["top_share"] = joined[shares].max(axis=1)
    joined = joined.drop(columns=shares)
    for name in lines:
        if name not in joined:
            joined[name] = 0.0
    joined = joined[joined["top_share"] > 0].sort_values("top_share", ascending=False, kind="stable")
    return joined.reset_index()[["file", "line", *lines, "top_share"]]

"""A reference's samples: one row per (stack, component, op) with its self time per call.

The frameworks' profilers give each profiled call's ops apart; the sample kept is each op's median
over the calls, so a call slowed by the machine's other work does not move one op's share.
"""

from __future__ import annotations

import pandas as pd

SAMPLE_COLUMNS = ["stack", "component", "op", "self_ns"]


def per_call_medians(calls: list[list[tuple[str, str, str, float]]]) -> pd.DataFrame:
    """Each (stack, component, op)'s self time per call: the median over the profiled calls (0 in a call
    without it)."""
    keys = SAMPLE_COLUMNS[:-1]
    frames = [pd.DataFrame(rows, columns=SAMPLE_COLUMNS).groupby(keys, sort=False)["self_ns"].sum() for rows in calls]
    if not frames:
        return pd.DataFrame(columns=SAMPLE_COLUMNS)
    table = pd.concat(frames, axis=1).fillna(0.0)
    return table.median(axis=1).rename("self_ns").reset_index()

"""The dispatch-event schema shared by every collector, and matching events to call sites.

One row is one execution of one dispatch (all its workgroups). Collectors fill what they know;
unknown integers are <NA> (pandas nullable Int64), unknown strings are <NA>.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

# column -> pandas dtype
EVENT_SCHEMA: dict[str, str] = {
    "collector": "string",  # "hal", "tracy" or "hook"
    "iteration": "Int64",  # repetition of the whole function, 0-based
    "export": "string",  # dispatch function name, e.g. main_dispatch_0_matmul_256x256x512_f32
    "call_site": "Int64",  # index of the dispatch call site in the host program's execution order
    "start_ns": "Int64",  # start, relative to the collector's own time origin
    "duration_ns": "Int64",  # wall time of the whole dispatch
    "workgroup_count": "Int64",  # workgroups in the grid (x*y*z)
    "tile_count": "Int64",  # workgroup calls actually executed
    "tile_duration_sum_ns": "Int64",  # sum of per-workgroup durations (CPU time spent in tiles)
    "thread": "string",  # thread that ran (or issued) the dispatch, when known
    "queue": "string",  # device queue the dispatch was submitted to, when known ("device 0 queue 0")
}
EVENT_COLUMNS: list[str] = list(EVENT_SCHEMA)


def make_events(rows: pd.DataFrame | dict | list[dict]) -> pd.DataFrame:
    """Return a DataFrame with exactly the event columns and dtypes; missing columns become <NA>."""
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    out = pd.DataFrame(index=frame.index)
    for column, dtype in EVENT_SCHEMA.items():
        out[column] = frame[column].astype(dtype) if column in frame else pd.Series(pd.NA, index=frame.index, dtype=dtype)
    return out.reset_index(drop=True)


def match_call_sites(events: pd.DataFrame, call_site_exports: Sequence[str]) -> pd.DataFrame:
    """Assign ``call_site`` and ``iteration`` to events given in execution order.

    ``call_site_exports[i]`` is the export dispatched by call site ``i`` (host-program order).
    The j-th event of an export (in the order given) belongs to the (j mod m)-th of the m call
    sites that dispatch that export, in iteration j // m. Matching per export keeps this correct
    when the runtime overlaps independent dispatches, as long as each export's own call sites run
    in program order. Events of exports with no call site keep <NA>.
    """
    sites_of_export: dict[str, list[int]] = {}
    for index, export in enumerate(call_site_exports):
        sites_of_export.setdefault(export, []).append(index)
    out = events.copy()
    occurrence = out.groupby("export", sort=False).cumcount()
    call_site: list[object] = []
    iteration: list[object] = []
    for export, j in zip(out["export"], occurrence):
        sites = sites_of_export.get(export) if isinstance(export, str) else None
        if not sites:
            call_site.append(pd.NA)
            iteration.append(pd.NA)
            continue
        call_site.append(sites[j % len(sites)])
        iteration.append(j // len(sites))
    out["call_site"] = pd.array(call_site, dtype="Int64")
    out["iteration"] = pd.array(iteration, dtype="Int64")
    return out


def drop_warmup(events: pd.DataFrame, warmup: int) -> pd.DataFrame:
    """Drop the first ``warmup`` iterations and renumber the rest from 0 (unmatched events stay)."""
    kept = events[events["iteration"].isna() | (events["iteration"] >= warmup)]
    return kept.assign(iteration=kept["iteration"] - warmup).reset_index(drop=True)

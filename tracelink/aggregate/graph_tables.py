"""Tables that depend on the provenance graph alone, computed once per graph.

The aggregation, the report and the exports each ask for the same graph-only tables (a call site's
attribution fractions, an op's shares of its lines): on a 424-call-site BERT, six and four times per
profile, 0.04 s of serial Python after the run. A finished provenance graph is not changed (the
provenance stage builds it; later stages only read it; what the aggregation sets on it after the run,
the machine's peaks the time is split at, is part of a table's key), so each table is kept with its graph
and dropped with it.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Concatenate, ParamSpec

import networkx as nx
import pandas as pd

Params = ParamSpec("Params")

# graph -> (the function making the table, its arguments) -> table; weak, so a table lives no longer than its graph
_KEPT: weakref.WeakKeyDictionary[nx.DiGraph, dict[tuple, pd.DataFrame]] = weakref.WeakKeyDictionary()


def per_graph(table_of: Callable[Concatenate[nx.DiGraph, Params], pd.DataFrame]) -> Callable[Concatenate[nx.DiGraph, Params], pd.DataFrame]:
    """``table_of(graph, ...)`` computed on its first call for a graph and those arguments, then kept.

    Each caller gets a shallow copy: under pandas' copy-on-write, a column it adds or changes never
    reaches the kept table.
    """

    @functools.wraps(table_of)
    def kept(graph: nx.DiGraph, *args: Params.args, **kwargs: Params.kwargs) -> pd.DataFrame:
        tables = _KEPT.setdefault(graph, {})
        # the machine's peaks (with the call sites' medians: aggregate.set_roofs) change how a dispatch's time splits
        key = (table_of, args, tuple(sorted(kwargs.items())), graph.graph.get("peak_gflops"), graph.graph.get("peak_gbps"))
        if key not in tables:
            tables[key] = table_of(graph, *args, **kwargs)
        return tables[key].copy(deep=False)

    return kept

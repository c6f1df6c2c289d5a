"""Graph-only tables are computed once per provenance graph, and what a caller adds to its copy never
reaches the next caller."""

from __future__ import annotations

import gc
import weakref

import pandas as pd

from tracelink.aggregate import attribution, op_line_shares
from tracelink.aggregate import graph_tables as kept_tables
from tracelink.profile_dir.profile import load_profile


def test_a_graph_table_is_computed_once_and_each_caller_gets_its_own_copy(example_profiles):
    graph = load_profile(example_profiles["attention"].directory).graph  # a graph no other test has asked about
    computed: list[str] = []

    @kept_tables.per_graph
    def counted(graph, label: str) -> pd.DataFrame:
        computed.append(label)
        return attribution.__wrapped__(graph)

    first = counted(graph, "a")
    first["added"] = 1.0  # a caller's own column
    first.loc[first.index[0], "fraction"] = -1.0  # and a changed value
    second = counted(graph, "a")
    assert computed == ["a"]
    assert "added" not in second and (second["fraction"] >= 0).all()
    pd.testing.assert_frame_equal(second, attribution.__wrapped__(graph))
    counted(graph, "b")  # other arguments: computed again
    assert computed == ["a", "b"]


def test_the_kept_tables_are_the_tables_and_leave_with_their_graph(example_profiles):
    graph = load_profile(example_profiles["convnet"].directory).graph
    pd.testing.assert_frame_equal(attribution(graph), attribution.__wrapped__(graph))
    pd.testing.assert_frame_equal(op_line_shares(graph), op_line_shares.__wrapped__(graph))
    assert graph in kept_tables._KEPT
    gone = weakref.ref(graph)
    del graph
    gc.collect()
    assert gone() is None  # its tables did not keep it alive

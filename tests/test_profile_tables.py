"""The tables a profile derives once and carries to every output: the graph's attribution and line shares,
and what the outputs show (the advice, components and kinds). A profile read back from its directory
carries the tables the run that wrote it made."""

from __future__ import annotations

import pandas as pd

from tracelink.aggregate import attribution, op_line_shares
from tracelink.aggregate.components import component_table, kind_table
from tracelink.profile_dir.profile import load_profile


def test_a_loaded_profile_carries_the_tables_its_run_made(example_profiles):
    made = example_profiles["attention"]
    loaded = load_profile(made.directory)
    assert loaded.strategies is None
    for profile in (made, loaded):
        assert_same(profile.attribution, attribution(profile.graph))
        assert_same(profile.line_shares, op_line_shares(profile.graph, tuple(profile.summary["library_frames"])))
    # the split at the roofs read back from the tables and profile.json is the run's (the graph read back
    # lists a node's edges in another order)
    assert_same(ordered(loaded.attribution, ["call_site", "op"]), ordered(made.attribution, ["call_site", "op"]),
                                  check_exact=False)
    assert_same(ordered(loaded.line_shares, ["op", "file", "line"]), ordered(made.line_shares, ["op", "file", "line"]))


def assert_same(left: pd.DataFrame, right: pd.DataFrame, **options) -> None:
    """Equal tables, whichever string storage each was made under: `tracelink profile` run in this process
    switches pandas to Python strings for good, so a table made earlier holds pyarrow's."""
    pd.testing.assert_frame_equal(plain_strings(left), plain_strings(right), **options)


def plain_strings(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its string columns and column names as Python objects."""
    plain = table.astype({column: object for column in table.columns if pd.api.types.is_string_dtype(table[column])})
    plain.columns = pd.Index(list(table.columns), dtype=object)
    return plain


def ordered(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return table.sort_values(keys, kind="stable").reset_index(drop=True)


def test_without_tune_the_outputs_show_the_stored_tables_and_their_components(example_profiles):
    profile = example_profiles["convnet"]
    shown = profile.shown
    assert shown.call_sites is profile.call_sites and shown.source_lines is profile.source_lines
    total = profile.summary["total_dispatch_ns"]
    assert_same(shown.components, component_table(profile.source_ops, total))
    assert_same(shown.kinds, kind_table(profile.source_ops, total))

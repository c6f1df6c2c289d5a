"""What every output of a profile shows beside its stored tables, derived from them once.

The printed summary, the report and ``--json`` each show the next steps of what `tracelink tune` measured
(:func:`tracelink.aggregate.advice.advise`) and the time by component and by op kind
(:mod:`tracelink.aggregate.components`). They are made once, where a profile is aggregated or loaded, and
carried on it (``Profile.shown``); they are never written, so the stored tables keep their own next steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tracelink.aggregate.advice import advise
from tracelink.aggregate.components import component_table, kind_table
from tracelink.profile_dir.tune_record import Strategies


@dataclass(frozen=True)
class Shown:
    """The tables as the outputs show them."""

    call_sites: pd.DataFrame  # with the next steps tune measured; the stored table itself when tune did not run
    source_lines: pd.DataFrame  # the same for the source lines
    components: pd.DataFrame  # time by component, every level of the scope tree
    kinds: pd.DataFrame  # time by op kind across repeated layers


def shown_tables(call_sites: pd.DataFrame, source_lines: pd.DataFrame, source_ops: pd.DataFrame, summary: dict,
                 strategies: Strategies | None) -> Shown:
    """The :class:`Shown` tables of a profile: shares of its ``total_dispatch_ns`` (of the ops' total without it)."""
    total = float(summary.get("total_dispatch_ns") or 0.0) or None
    if strategies is not None:
        call_sites, source_lines = advise(call_sites, source_lines, strategies)
    return Shown(call_sites, source_lines, component_table(source_ops, total), kind_table(source_ops, total))

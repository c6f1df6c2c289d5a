"""The per-line table of a strategy: its profile diffed against the base profile by source location,
one row per model line and op kind (the rows of ``per_line`` in the tune record)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tracelink.aggregate import held_lines
from tracelink.profile_dir.profile import Profile
from tracelink.compare.diff import load_pair, paired_rounds
from tracelink.aggregate.speedup import speedup_of


def per_line_rows(base: Profile, strategy_dir: Path, name: str, rounds: int) -> list[dict]:
    """The per-line rows of one strategy: its profile diffed against the base by source op, one row per
    model line (the line the summary ranks an op's time under: library frames fold into the model line
    calling them) and op kind that takes time in both builds. The ops of one line (a 6-layer model's six
    attention ops, all called from one line) add up: ``base_ns`` and ``strategy_ns`` are the sums of
    their medians over the alternating rounds, ``ratio`` the speedup of their per-round sums
    (:mod:`tracelink.aggregate.speedup`, as every speedup tracelink prints)."""
    _, strategy = load_pair(base.directory, strategy_dir)
    paired = paired_rounds(base, strategy, rounds)
    ops = base.source_ops.drop_duplicates(["label"]).set_index("label")
    kinds = ops["op_kinds"] if "op_kinds" in ops.columns else None
    line_of = model_lines(base)
    columns: dict[tuple[str, int, str], list[int]] = {}
    for column, (label, file, line) in enumerate(paired.keys):
        base_ns, tuned_ns = np.median(paired.base[:, column]), np.median(paired.tuned[:, column])
        if not file or line < 0 or not (base_ns > 0 and tuned_ns > 0):
            continue
        kind = kinds.get(label, "") if kinds is not None else ""
        op = ops["op"].get(label) if "op" in ops.columns else None
        file, line = line_of.get(op, (file, line))
        columns.setdefault((file, line, str(kind) if isinstance(kind, str) else ""), []).append(column)
    rows = []
    for (file, line, kind), chosen in columns.items():
        base_rounds, tuned_rounds = paired.base[:, chosen].sum(axis=1), paired.tuned[:, chosen].sum(axis=1)
        rows.append({"file": file, "line": line, "op_kind": kind, "strategy": name,
                     "base_ns": float(np.median(paired.base[:, chosen], axis=0).sum()),
                     "strategy_ns": float(np.median(paired.tuned[:, chosen], axis=0).sum()),
                     "ratio": speedup_of(base_rounds, tuned_rounds)[0]})
    return rows


def model_lines(profile: Profile) -> dict[str, tuple[str, int]]:
    """Each source op's model line under the profile's own frame rules (:func:`~tracelink.aggregate.user_lines`)."""
    return held_lines(profile.line_shares)

"""Attention in the strategy search, on a ViT from `transformers` (SDPA attention, random weights from a config).

IREE 3.13 lowers each `scaled_dot_product_attention` to one `iree_linalg_ext.attention` dispatch that runs
a query row at a time on the CPU. The search's `decompose-attention` option decomposes it, before global
optimization, into matmuls and a softmax that data tiling then reaches. Checked here: the option is
searched only where the program has attention, its build has no attention dispatch left and computes
what the default build does, the search picks it with data tiling, and the per-line table gives the
model's attention line once. The bench (`tests/bench/bench_tune.py`, section 4) races the handed-over
build on a 197-token ViT against IREE's default and the eager-attention export.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from tests.conftest import EXAMPLES, run_profile
from tests.vit_model import vit_source
from tracelink.profile_dir.profile import load_profile
from tracelink.tune.per_line import per_line_rows
from tracelink.tune.strategy import StrategySearch
from tracelink.tune.strategy_space import StrategyOptions, option_flags
from tracelink.tune.tuners.loop import Budget
from tracelink.commands.tune import _profile_builder


VIT = vit_source(hidden=192, heads=3, layers=2, image=160)  # 101 tokens; two layers: one line calls both attentions


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[StrategySearch, Path]:
    work = tmp_path_factory.mktemp("vit_attention")
    model = work / "vit.py"
    model.write_text(VIT)
    base = work / "base"
    run_profile(f"{model}:make", base)
    # 5 first rounds, not 3: on a loaded machine 3 rounds twice read data tiling alone as faster than the
    # decomposition, and the combination was never built
    options = StrategyOptions(only=["decompose-attention", "data-tiling"], compose=False, first_rounds=5)
    search = StrategySearch(load_profile(base), options, Budget.of_seconds(900.0), 600.0, resume=False)
    search.run()
    return search, model


def test_attention_is_decomposed_checked_and_wins_with_data_tiling(searched):
    search, _ = searched
    by_name = {candidate.name: candidate for candidate in search.result.candidates}
    decomposed = by_name["decompose-attention"]
    # built, its outputs checked against the default build's (else "wrong outputs"), and timed
    assert decomposed.vmfb is not None and decomposed.status in ("faster", "not faster"), decomposed.reason
    winner = search.result.winner
    assert winner is not None and "decompose-attention" in winner.name and winner.ci[0] > 1, \
        [(c.name, c.status, c.ratio, c.ci) for c in search.result.candidates]


def test_attention_line_is_one_row_of_the_per_line_table(searched, tmp_path):
    search, _ = searched
    winner = search.result.winner
    directory = _profile_builder(search.profile, Console(stderr=True))(option_flags(winner.option), tmp_path / "winner")
    # no attention dispatch is left in the winner's build: its call sites' root ops are matmuls and generics
    roots = set(load_profile(directory).call_sites["root_op"])
    assert "iree_linalg_ext.attention" in set(search.profile.call_sites["root_op"]) and "iree_linalg_ext.attention" not in roots
    rows = per_line_rows(search.profile, directory, winner.name, 2)
    attention = [row for row in rows if "scaled_dot_product_attention" in row["op_kind"]]
    # both layers' attention ops, called from the ViT's one line: one row, on the model's line
    assert len(attention) == 1 and attention[0]["file"].endswith("transformers/models/vit/modeling_vit.py")
    assert len({(row["file"], row["line"], row["op_kind"]) for row in rows}) == len(rows)


def test_programs_without_attention_do_not_search_it(tmp_path):
    profile = run_profile(EXAMPLES / "mlp.mlir", tmp_path / "mlp")
    search = StrategySearch(profile, StrategyOptions(), Budget.of_seconds(60.0), 600.0, resume=False)
    names = {candidate.name for candidate in search.result.candidates}
    assert "data-tiling" in names and "decompose-attention" not in names

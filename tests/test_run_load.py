"""The `loaded` flag: a run whose iterations spread widely (run-to-run) says the machine was busy."""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from tracelink.aggregate import LOADED_ITERATION_SPREAD, run_load
from tracelink.collect.events import make_events
from tracelink.report.summary import print_summary
from tests.conftest import EXAMPLES, run_profile


def events_with_iteration_totals(totals_us: list[float]) -> pd.DataFrame:
    """Two dispatches per iteration, splitting each iteration's total 1:3."""
    rows = []
    for iteration, total in enumerate(totals_us):
        for site, part in ((0, 0.25), (1, 0.75)):
            rows.append({"collector": "hal", "iteration": iteration, "call_site": site, "export": f"e{site}", "duration_ns": int(total * 1000 * part)})
    return make_events(rows)


def test_steady_iterations_are_not_loaded():
    totals = [100, 102, 98, 101, 99, 100, 103, 97, 100, 101]
    load = run_load(events_with_iteration_totals(totals))
    assert load["loaded"] is False
    assert load["iteration_spread"] == pytest.approx(np.quantile(totals, 0.9) / np.quantile(totals, 0.1), rel=1e-3)


def test_iterations_slowed_by_another_process_are_loaded():
    # half the iterations shared the cores with a busy loop: twice as long
    totals = [100, 210, 98, 190, 101, 205, 99, 200, 100, 195]
    load = run_load(events_with_iteration_totals(totals))
    assert load["loaded"] is True
    assert load["iteration_spread"] == pytest.approx(np.quantile(totals, 0.9) / np.quantile(totals, 0.1), rel=1e-3)
    assert load["iteration_spread"] > LOADED_ITERATION_SPREAD


def test_one_iteration_has_no_spread():
    assert run_load(events_with_iteration_totals([100])) == {"iteration_spread": None, "loaded": False}


def test_real_run_records_the_flag_and_the_summary_warns_when_loaded(tmp_path):
    profile = run_profile(EXAMPLES / "mlp.mlir", tmp_path / "mlp", repetitions=4)
    written = json.loads((profile.directory / "profile.json").read_text())
    assert isinstance(written["loaded"], bool)
    assert written["loaded"] == run_load(profile.events)["loaded"]
    for loaded in (False, True):
        shown = dataclasses.replace(profile, summary=profile.summary | {"loaded": loaded, "iteration_spread": 2.5})
        out = io.StringIO()
        print_summary(shown, Console(file=out, width=150))
        warnings = [line for line in out.getvalue().splitlines() if "machine was loaded" in line]
        assert len(warnings) == (1 if loaded else 0)
        assert not loaded or "2.5×" in warnings[0]

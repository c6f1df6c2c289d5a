"""`tracelink profile --collector ...`: every collector lands in the same tables and graph."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES, run_profile


@pytest.fixture(scope="module")
def hooked(tmp_path_factory):
    return run_profile(EXAMPLES / "mlp.mlir", tmp_path_factory.mktemp("hook") / "out", collector="hook", hook_events=["task-clock", "page-faults"])


def test_hook_collector_records_every_workgroup_of_every_call_site(hooked, example_profiles):
    assert hooked.summary["collector"] == "hook"
    assert "--iree-llvmcpu-link-embedded=false" in hooked.manifest["compiler"]["flags"]
    sites = hooked.call_sites.set_index("call_site")
    workgroups = hooked.workgroups
    per_site = workgroups.groupby("call_site").size()
    for site, row in sites.iterrows():
        assert per_site[site] == row["workgroup_count"] * 5  # grid × repetitions (warm-up dropped)
        assert row["count"] == 5 and row["tile_count_mean"] == row["workgroup_count"]
    # the same provenance as the HAL profile of the same program
    assert sites["export"].tolist() == example_profiles["mlp"].call_sites["export"].tolist()
    assert hooked.summary["coverage"]["dispatch_time_attributed_share"] == 1.0


def test_hook_counters_are_plausible(hooked):
    workgroups = hooked.workgroups
    assert {"task-clock", "page-faults"} <= set(workgroups.columns)
    ratio = (workgroups["task-clock"] / workgroups["duration_ns"]).median()
    assert 0.5 < ratio < 1.5  # a workgroup call's CPU time is about its wall time
    assert (workgroups["page-faults"] >= 0).all()

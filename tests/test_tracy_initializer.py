"""Iterations rebuilt from a real Tracy capture when an initializer and the run phase share an export.

The program computes a constant at load time with the same executable as one of its run-phase ops, so
the capture holds zones of that export before the first ``iree_vm_invoke``. They must not become
iterations: the Tracy collector must see exactly the repetitions and the call-site counts HAL sees.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import run_profile
from tracelink.compile import CompileOptions
from tracelink.profile_dir.profile import Profile

PROGRAM = Path(__file__).parent / "data" / "tracy_shared_export.mlir"
# No constant evaluation at compile time (so the initializer dispatches at load), and the constant is
# passed to the dispatch as a binding (not inlined), so both dispatches compile to the same executable.
FLAGS = ["--iree-opt-const-eval=false", "--iree-flow-inline-constants-max-byte-length=0"]
REPETITIONS = 4
LOOKUP = re.compile(r"hal\.executable\.lookup\.function .*::@([\w$.-]+)\)")


def profile_with(collector: str, out: Path) -> Profile:
    return run_profile(PROGRAM, out, collector=collector, repetitions=REPETITIONS, compile=CompileOptions(extra_flags=FLAGS))


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Profile]:
    base = tmp_path_factory.mktemp("shared_export")
    return {collector: profile_with(collector, base / collector) for collector in ("hal", "tracy")}


def shared_exports(profile: Profile) -> set[str]:
    """Exports dispatched both by an initializer and by the run phase, per the provenance graph."""
    phases: dict[str, set[str]] = {}
    for _, data in profile.graph.nodes(data=True):
        if data.get("kind") == "call_site":
            phases.setdefault(data["export"], set()).add(data["phase"])
    return {export for export, seen in phases.items() if seen == {"run", "initializer"}}


def test_the_program_really_shares_an_export(profiles: dict[str, Profile]) -> None:
    profile = profiles["tracy"]
    shared = shared_exports(profile)
    assert len(shared) == 1
    (hal_dump,) = (profile.artifacts / "phases").glob("*.hal.mlir")
    lookups = LOOKUP.findall(hal_dump.read_text())
    assert lookups.count(next(iter(shared))) == 2  # one lookup in the initializer, one in the run phase
    # and the capture really holds that export's zones outside every iteration (at load time)
    assert profile.summary["tracy"]["dispatch_zones_outside_iterations"] >= 1


def test_tracy_sees_the_repetitions_and_call_site_counts_hal_sees(profiles: dict[str, Profile]) -> None:
    hal, tracy = profiles["hal"], profiles["tracy"]
    assert hal.summary["iterations"] == tracy.summary["iterations"] == REPETITIONS
    run_sites = hal.call_sites[hal.call_sites["phase"] == "run"]
    assert len(run_sites) == 2
    counts = {name: p.call_sites.set_index("call_site")["count"] for name, p in profiles.items()}
    assert counts["tracy"].fillna(0).tolist() == counts["hal"].fillna(0).tolist()
    assert counts["tracy"][run_sites["call_site"]].tolist() == [REPETITIONS] * len(run_sites)
    assert tracy.events["iteration"].tolist() == sorted(tracy.events["iteration"].tolist())  # time order

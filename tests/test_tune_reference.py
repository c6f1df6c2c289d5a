"""tune aims at the framework's reference: on a PyTorch audio front end (tests/data/audio_frontend.py)
profiled with its eager reference, `tracelink tune` picks the conv1d-as-conv2d rewrite, hands over a
command that runs as printed, races eager against IREE's default build and the build it hands over,
and its per-line table puts IREE before, IREE after and eager side by side. The numbers are checked
against the profiles they come from and an alternating re-measurement of both builds with IREE's own
benchmark tool."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from tests.conftest import REPO
from tests.test_tune_strategy import assert_builds_what_was_raced, run_as_printed
from tracelink.aggregate.reference import iree_lines
from tracelink.aggregate.speedup import speedup_of
from tracelink.collect.rounds import alternate, time_program
from tracelink.commands.tune import print_anchor, losing_line_repros
from tracelink.compare.diff import run_inputs, run_parameters
from tracelink.profile_dir.profile import load_profile
from tracelink.report.json_output import SCHEMA_PATH
from tracelink.profile_dir import files
from tracelink.tune.anchor import Anchor, race_anchor
from tracelink.tune.session import Session, handed_profile
from tracelink.tune.strategy import SearchResult
from tracelink.tune.strategy_space import OPTIONS, Candidate, option_flags

MODEL = REPO / "tests" / "data" / "audio_frontend.py"
CONFIG = """[strategy]
only = ["im2col", "conv1d-as-conv2d"]
first_rounds = 3
final_rounds = 4
diff_rounds = 2
profile_top = 1
compose = false
[select]
top = 1
reference_rounds = 3
"""


def tracelink(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelink.commands.cli", *args], capture_output=True, text=True, cwd=REPO)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> dict:
    where = tmp_path_factory.mktemp("tune_reference")
    done = tracelink("profile", f"{MODEL}:make", "-o", str(where / "base"), "--repetitions=2")
    assert done.returncode == 0, done.stderr
    (where / "tune.toml").write_text(CONFIG)
    done = tracelink("tune", str(where / "base"), "--config", str(where / "tune.toml"), "--trials", "1", "--rounds", "0", "--json")
    assert done.returncode == 0, done.stderr
    return {"base": load_profile(where / "base"), "done": done, "document": json.loads(done.stdout)}


def test_the_reference_is_raced_against_both_builds_and_never_handed_over(tuned):
    document = tuned["document"]
    jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text()))
    anchor = document["reference"]
    assert (anchor["reference"], anchor["label"], anchor["error"]) == ("eager", "PyTorch eager", None)
    rounds = anchor["rounds"]
    assert len(rounds["default_ns"]) == len(rounds["handed_ns"]) == len(rounds["reference_ns"]) == 3
    assert anchor["default_vs_reference"]["base_ns"] == pytest.approx(float(np.median(rounds["reference_ns"])))
    assert anchor["handed_vs_default"]["tuned_ns"] == pytest.approx(float(np.median(rounds["handed_ns"])))
    # what is handed over is IREE's build: the apply line builds the winning rewrite, eager is only reported
    assert document["apply"] is not None and "conv1d-as-conv2d" in document["apply"]["program"]
    assert json.loads((tuned["base"].directory / "tune" / "reference.json").read_text())["rounds"] == rounds


def test_the_race_agrees_with_an_independent_alternating_re_measurement(tuned):
    """The handed build over the default, re-timed here with iree-benchmark-module in alternating rounds:
    the same side wins (the rewrite makes the front end's hot convolution many times faster)."""
    base, document = tuned["base"], tuned["document"]
    builds = [base.artifacts / "app.vmfb", Path(document["apply"]["vmfb"])]
    inputs, parameters = run_inputs(base), run_parameters(base)
    default, handed = alternate([lambda _, vmfb=vmfb: time_program(vmfb, "main", inputs, parameters, 5, 120.0) for vmfb in builds], 3)
    again = speedup_of(default, handed)[0]
    assert again > 1 and document["reference"]["handed_vs_default"]["speedup"] > 1, (again, document["reference"])


def test_the_per_line_table_holds_before_after_and_the_reference(tuned):
    base, anchor = tuned["base"], tuned["document"]["reference"]
    lines = pd.read_csv(base.directory / "tune" / "reference_lines.csv", keep_default_na=False, na_values=[""])
    after = load_profile(Path(anchor["after_profile"]))
    assert after.directory != base.directory  # the winning rewrite's own profile
    model = lines[lines["file"].map(lambda f: Path(str(f)).name) == MODEL.name].set_index("line")
    assert {16, 17, 18} <= set(model.index)
    # each column is its own profile's user self time per call, line for line
    for column, profile in (("before_ns", base), ("after_ns", after)):
        expected = iree_lines(profile.source_lines, int(profile.summary["iterations"])).set_index(["file", "line"])["iree_ns"]
        found = lines.dropna(subset=[column]).set_index(["file", "line"])[column]
        pd.testing.assert_series_equal(found.sort_index(), expected.sort_index(), check_names=False)
    # eager's lines add up to the race's eager time
    assert lines["reference_ns"].sum() == pytest.approx(anchor["default_vs_reference"]["base_ns"], rel=1e-6)
    # the rewritten second convolution is many times faster after tune
    assert model.loc[17, "after_ns"] < model.loc[17, "before_ns"] / 3
    assert (lines["after_loses"] == (lines["after_ratio"] > 1.5)).all()
    assert set(lines.loc[lines["before_ns"].isna() & lines["after_ns"].isna(), "only_in"]) <= {"reference"}
    # what the strategy search measured on a line is its per-line table's rows there, the fastest first
    rows = [row for row in tuned["document"]["strategies"]["per_line"] if row["file"] == str(MODEL) and row["line"] == 17]
    best = max(rows, key=lambda row: row["ratio"])
    assert best["strategy"].startswith("conv1d-as-conv2d")
    assert model.loc[17, "measured"].startswith(f"{best['strategy']} {best['ratio']:.2g}x")
    assert model.loc[17, "measured"].count("x") >= len({row["strategy"] for row in rows})


def test_the_last_lines_name_both_builds_against_eager(tuned):
    text = tuned["done"].stderr
    verdict = next(line for line in text.splitlines() if line.startswith("against PyTorch eager"))
    assert "IREE's default" in verdict and "the build handed over" in verdict and "per call" in verdict
    assert "IREE's default (95% CI" in text and ("faster than PyTorch eager" in text or "slower than PyTorch eager" in text)
    assert "IREE before" in text and "IREE after" in text


def test_a_line_still_losing_gets_a_repro_of_its_hottest_dispatch(tuned):
    base, document = tuned["base"], tuned["document"]
    lines = pd.DataFrame(document["reference"]["lines"])
    hot = f"{MODEL}:17"
    lines["after_loses"] = (lines["file"] == str(MODEL)) & (lines["line"] == 17)
    anchor = Anchor("eager", "PyTorch eager", 2, lines=lines, after=Path(document["reference"]["after_profile"]))
    repros = losing_line_repros(base, anchor)
    folder = Path(repros[hot])
    assert folder.is_relative_to(base.directory / "tune" / "reference" / "repro")
    assert (folder / "run.sh").is_file() and f"{MODEL.name}:17" in (folder / "README.md").read_text()
    # the summary names the line, what tune's strategies measured there and its repro
    out = Console(record=True, width=400)
    print_anchor(out, base, replace(anchor, rounds=document["reference"]["rounds"]), handed=True)
    [said] = [line for line in out.export_text().splitlines() if line.startswith(f"  {hot}: ")]
    assert said.startswith(f"  {hot}: {lines.set_index('line').loc[17, 'measured']}, none enough; {folder}")


def test_a_reference_that_cannot_run_again_is_an_error_line_not_a_failed_tune(tuned, tmp_path):
    base = tuned["base"]
    base.summary["model"] = str(tmp_path / "gone.py") + ":make"
    try:
        anchor = race_anchor(base, None, 2, 60.0, tmp_path)
    finally:
        base.summary["model"] = f"{MODEL}:make"
    assert anchor is not None and anchor.rounds == {} and "gone.py" in anchor.error


def test_tune_picks_the_rewrite_on_a_1d_convolution_front_end(tuned):
    entries = {entry["name"]: entry for entry in tuned["document"]["strategies"]["strategies"]}
    assert entries["im2col"]["status"] == "not faster" or entries["im2col"]["ratio"] < entries["conv1d-as-conv2d"]["ratio"]
    apply = tuned["document"]["apply"]
    winner = next(entry for entry in entries.values() if entry["program"] == apply["program"])
    assert winner["name"].startswith("conv1d-as-conv2d") and winner["status"] == "faster" and winner["ci"][0] > 1
    assert Path(apply["program"]).is_file() and "--iree-global-opt-use-im2col-for-convs" in apply["flags"]


def test_the_handed_over_command_runs_and_keeps_the_user_lines(tuned, tmp_path):
    line = next(line for line in tuned["done"].stderr.splitlines() if line.startswith("apply it: "))
    done = run_as_printed(line, tmp_path, tmp_path / "applied")  # from another directory
    assert done.returncode == 0, done.stderr
    apply = tuned["document"]["apply"]
    tuned_too = any(flag.startswith("--iree-codegen-tuning-spec-path=") for flag in apply["flags"])
    winner = next(entry["name"] for entry in tuned["document"]["strategies"]["strategies"] if entry["program"] == apply["program"])
    base = tuned["base"].directory
    log = (Path(apply["vmfb"]).parent if tuned_too else base / "tune" / "strategies" / winner) / "compile.log"
    assert_builds_what_was_raced(tmp_path / "applied", base, log)
    # the profile of the rewritten program puts the time on the model's two convolution lines
    lines = load_profile(tmp_path / "applied").source_lines
    hot = lines[lines["file"].map(lambda f: Path(str(f)).name) == MODEL.name]
    assert {16, 17} <= set(hot["line"].astype(int)) and hot["total_ns"].sum() > 0


def test_a_winner_the_budget_left_unprofiled_is_still_what_is_raced_and_profiled(tuned, tmp_path):
    """When the budget runs out before the winning strategy is profiled, the build handed over (and raced
    against the reference) is still the winner's own, not the default build the tile search would have run
    on, and its lines come from profiling that build, not from the default's profile."""
    base = tuned["base"]
    option = next(option for option in OPTIONS if option.name == "conv1d-as-conv2d")
    winner = Candidate(option, status="faster", ratio=5.0, vmfb=tmp_path / "winner.vmfb", program=tmp_path / "program.mlir")
    session = Session(SearchResult([winner], winner, []), base)
    assert session.handed_build() == winner.vmfb and not session.winner_profiled()
    asked = []

    def profile_build(flags: list[str], directory: Path, program: Path | None) -> Path:
        asked.append((flags, directory, program))
        return base.directory

    handed_profile(base, session, profile_build, Console(file=io.StringIO()))
    assert asked == [(option_flags(option), base.directory / files.TUNE_HANDED, winner.program)]
    assert Session(SearchResult([winner], None, []), base).handed_build() is None

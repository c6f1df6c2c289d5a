"""Measured advice: verdicts that do not call a dispatch far from both roofs compute-bound, next steps
that name no compiler option without a measurement, and the strategy tables read from
``PROFILE/tune/strategies.json``, on real programs profiled for real.

``tests/data/conv_nchw.mlir`` is an NCHW convolution (its filter an argument: random values, nothing to
fold) and an elementwise pass over another input. It is profiled three times: with IREE's default options, with img2col
and with channels-last (the compiler options of issue 20); ``strategies.json`` is written from those
measurements the way `tracelink tune` writes it: the whole program's ratio, and per source line the
base and strategy time of the two profiles.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from lxml import html as lxml_html
from rich.console import Console

from tests.conftest import REPO, run_profile
from tracelink.aggregate.advice import HELPED
from tracelink.profile_dir.tune_record import STRATEGIES_FILE
from tracelink.aggregate.utilization import FAR_FROM_ROOFS
from tracelink.compile import CompileOptions
from tracelink.profile_dir.profile import load_profile
from tracelink.report import build_report
from tracelink.report.json_output import SCHEMA_PATH, profile_document
from tracelink.report.strategies import advised
from tracelink.report.summary import print_summary

CONV = REPO / "tests" / "data" / "conv_nchw.mlir"
CONV_LINE, OTHER_LINE = 8, 10
STRATEGY_FLAGS = {
    "img2col": ["--iree-preprocessing-pass-pipeline=builtin.module(util.func(iree-global-opt-convert-conv2d-to-img2col))"],
    "channels-last": ["--iree-preprocessing-pass-pipeline=builtin.module(util.func(iree-preprocessing-convert-conv-to-channels-last))"],
}
# Words of every compiler option or strategy the advice could name: none may appear in a next step
# that was not measured.
OPTION_WORDS = ("ukernel", "data tiling", "data-tiling", "img2col", "channels-last", "channels last", "--iree", "transpose", "tile size", "pad")
SCHEMA = json.loads(SCHEMA_PATH.read_text())


def summary_text(profile) -> str:
    printed = io.StringIO()
    print_summary(profile, Console(file=printed, width=240))
    return printed.getvalue()


def next_steps_shown(profile, report: Path) -> dict[str, list[str]]:
    """Every next step each of the three outputs shows: the printed summary's lines under the dispatch
    table, the report's drill-downs (built by the viewer from each call site's record in the page's data)
    and verdict tooltips, and the JSON document's."""
    page = lxml_html.fromstring(report.read_text())
    data = json.loads(page.get_element_by_id("tl-data").text)
    document = profile_document(profile)
    return {
        "summary": [line for line in summary_text(profile).splitlines() if line.strip().startswith("#")],
        "report": [data["tx"][site["c"][1]] for site in data["cs"].values() if site["c"]]
                  + [element.get("title") for element in page.xpath("//td[@data-v and @title]")],
        "json": [row["next_step"] for key in ("hottest_lines", "hottest_dispatches") for row in document[key]],
    }


@pytest.fixture(scope="module")
def conv_profiles(tmp_path_factory):
    base = tmp_path_factory.mktemp("advice")
    profiles = {"base": run_profile(CONV, base / "base", repetitions=10)}
    for name, flags in STRATEGY_FLAGS.items():
        profiles[name] = run_profile(CONV, base / name, repetitions=10, compile=CompileOptions(extra_flags=list(flags)))
    return profiles


def per_iteration(profile, line: int) -> float:
    """The line's median self time per iteration."""
    lines = profile.source_lines
    row = lines[(lines["file"] == str(CONV)) & (lines["line"] == line)]
    return float(row["median_ns"].iloc[0])


# The whole-program verdicts tune would give (by its interval over alternating rounds, which one profile
# of each build cannot give: the base alone varied 1.5x between two profiles here): img2col turns the
# convolution (most of the run) into a matmul 2-3x faster, channels-last slows it. The advice follows
# these; the per-line times are measured.
STATUSES = {"img2col": "faster", "channels-last": "not faster"}


def strategies_document(profiles: dict) -> dict:
    """strategies.json from the measured profiles, with the whole-program :data:`STATUSES`."""
    base = profiles["base"]
    strategies, per_line = [], []
    for name, flags in STRATEGY_FLAGS.items():
        ratio = base.summary["dispatch_ns_per_iteration"] / profiles[name].summary["dispatch_ns_per_iteration"]
        strategies.append({"name": name, "flags": flags, "status": STATUSES[name],
                           "reason": f"measured {ratio:.2f}x", "ratio": ratio, "ci": None})
        for line, kind in ((CONV_LINE, "linalg.conv_2d_nchw_fchw"), (OTHER_LINE, "linalg.generic")):
            base_ns, strategy_ns = per_iteration(base, line), per_iteration(profiles[name], line)
            per_line.append({"file": str(CONV), "line": line, "op_kind": kind, "strategy": name, "base_ns": base_ns,
                             "strategy_ns": strategy_ns, "ratio": base_ns / strategy_ns})
    return {"schema": 1, "base": {"flags": []}, "strategies": strategies, "per_line": per_line}


def with_strategies(profile, document: dict, directory: Path):
    """A copy of the profile directory with ``tune/strategies.json``, loaded again (read only: its
    tables keep the profile's own next steps)."""
    shutil.copytree(profile.directory, directory)
    (directory / STRATEGIES_FILE).parent.mkdir()
    (directory / STRATEGIES_FILE).write_text(json.dumps(document))
    loaded = load_profile(directory)
    for name in ("source_lines", "call_sites"):
        assert list(getattr(loaded, name)["next_step"].fillna("")) == list(getattr(profile, name)["next_step"].fillna(""))
    return loaded


def test_no_option_is_advised_without_a_measurement(conv_profiles):
    profile = conv_profiles["base"]
    steps = [step for shown in next_steps_shown(profile, profile.directory / "report.html").values() for step in shown]
    assert any("tracelink tune" in step for step in steps), steps
    for step in steps:
        assert not any(word in step.lower() for word in OPTION_WORDS), step
    # the convolution, at a few percent of both peaks, is far from both roofs, not compute-bound
    sites = profile.call_sites
    conv = sites[sites["export"].str.contains("conv")].iloc[0]
    if max(conv["flops_peak_share"], conv["bandwidth_peak_share"]) < FAR_FROM_ROOFS:
        assert conv["verdict"] == "far-from-roofs"
    assert conv["verdict"] != "compute-bound" or conv["flops_peak_share"] >= FAR_FROM_ROOFS


def test_measured_advice_names_only_strategies_that_helped_the_line(conv_profiles, tmp_path):
    document = strategies_document(conv_profiles)
    ratios = {(row["strategy"], row["line"]): row["ratio"] for row in document["per_line"]}
    status = {row["name"]: row["status"] for row in document["strategies"]}
    # what was measured: channels-last made the convolution slower (img2col's gain on this small conv
    # depends on the machine: 2.5x on a loaded one, 1.0x on a quiet one; the advice follows either)
    assert ratios[("channels-last", CONV_LINE)] < 1, document
    loaded = with_strategies(conv_profiles["base"], document, tmp_path / "tuned")
    profile = advised(loaded)
    lines = profile.source_lines.set_index("line")
    for line in (CONV_LINE, OTHER_LINE):
        step = lines.loc[line, "next_step"]
        for name in STRATEGY_FLAGS:
            named = f"{name}: " in step and "faster here" in step
            assert named == (status[name] == "faster" and ratios[(name, line)] >= HELPED), (line, name, step)
    if ratios[("img2col", OTHER_LINE)] < HELPED:  # img2col leaves the elementwise line as it was (within noise)
        assert lines.loc[OTHER_LINE, "next_step"].startswith("no strategy that made the program faster helped it")
    # the call sites read their lines: the convolution's dispatch names img2col
    sites = profile.call_sites
    conv = sites[sites["export"].str.contains("conv")].iloc[0]
    assert conv["next_step"].startswith("img2col: ") == (ratios[("img2col", CONV_LINE)] >= HELPED), conv["next_step"]
    assert "channels-last: " not in conv["next_step"]
    # the printed summary, the report and --json each ask for the advice: the dispatch's step in all three
    for output, shown in next_steps_shown(loaded, build_report(loaded)).items():
        assert any(conv["next_step"] in step for step in shown), (output, conv["next_step"], shown)
    # the same numbers with img2col "not faster" over the whole program: it is named nowhere as advice
    refused = json.loads(json.dumps(document))
    refused["strategies"][0]["status"] = "not faster"
    again = advised(with_strategies(conv_profiles["base"], refused, tmp_path / "refused"))
    steps = [str(step) for table in (again.source_lines, again.call_sites) for step in table["next_step"].dropna()]
    assert not any("faster here" in step for step in steps)
    # lines with no per-line row (the exp and tanh body lines) say what tune measured, not "run tune"
    assert not any("tracelink tune PROFILE" in step for step in steps)
    assert any("no compiler strategy tune measured was significantly faster on the whole program" in step for step in steps)


def test_strategy_tables_in_summary_report_and_json(conv_profiles, tmp_path):
    document = strategies_document(conv_profiles)
    profile = with_strategies(conv_profiles["base"], document, tmp_path / "tuned")
    text = summary_text(profile)
    assert "Compiler strategies measured by tracelink tune" in text and "img2col" in text and "channels-last" in text
    ratios = {(row["strategy"], row["line"]): row["ratio"] for row in document["per_line"]}
    # what helped each line, by the measured per-line ratios (img2col's gain on this small conv depends on
    # the machine: 2.5x on a loaded one, 1.0x on a quiet one)
    helps = {line: [name for name in STRATEGY_FLAGS if STATUSES[name] == "faster" and ratios[(name, line)] >= HELPED]
             for line in (CONV_LINE, OTHER_LINE)}
    conv_row = next(line for line in text.splitlines() if f"conv_nchw.mlir:{CONV_LINE} " in line and "img2col" in line)
    assert ("(helps)" in conv_row.split("img2col")[1].split(",")[0]) == ("img2col" in helps[CONV_LINE])
    report = build_report(profile)
    page = lxml_html.fromstring(report.read_text())
    assert len(page.xpath("//table[@id='strategy-table']/tbody/tr")) == 2
    helped = {(cell.getparent().getparent().xpath("td")[0].text, cell.get("data-strategy")) for cell in page.xpath("//table[@id='strategy-lines']//span[contains(@class, 'helped')]")}
    assert helped == {(f"conv_nchw.mlir:{line}", name) for line, names in helps.items() for name in names}
    # `tracelink report --json` carries the same table, and validates against the schema
    done = subprocess.run([sys.executable, "-m", "tracelink.commands.cli", "report", str(profile.directory), "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)
    jsonschema.validate(output, SCHEMA)
    assert output["command"] == "report"
    lines = {row["line"]: row for row in output["strategies"]["per_line"]}
    for line in (CONV_LINE, OTHER_LINE):
        assert [effect["strategy"] for effect in lines[line]["effects"] if effect["helped"]] == helps[line]
    assert lines[CONV_LINE]["effects"][0]["ratio"] == pytest.approx(max(ratios[(name, CONV_LINE)] for name in STRATEGY_FLAGS))


@pytest.mark.parametrize("damage", ["not json {", '{"schema": 1, "base": {"flags": []}, "strategies": [{"name": "x"}]}', "link"])
def test_a_damaged_strategies_file_is_ignored_with_one_warning(conv_profiles, tmp_path, capsys, damage):
    directory = tmp_path / "damaged"
    shutil.copytree(conv_profiles["base"].directory, directory)
    target = directory / STRATEGIES_FILE
    target.parent.mkdir()
    if damage == "link":
        (tmp_path / "elsewhere.json").write_text(json.dumps(strategies_document(conv_profiles)))
        target.symlink_to(tmp_path / "elsewhere.json")
    else:
        target.write_text(damage)
    profile = load_profile(directory)
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and str(target) in warning[0] and "ignored" in warning[0]
    assert profile.strategies is None
    assert list(profile.source_lines["next_step"].fillna("")) == list(conv_profiles["base"].source_lines["next_step"].fillna(""))
    assert build_report(profile).is_file()


def test_real_weight_squeezenet_convolutions_are_not_compute_bound(real_squeezenet):
    """ONNX's light SqueezeNet with seeded random weights (its convolutions stay convolutions): the session's
    profile of it (tests/conftest.py)."""
    profile = real_squeezenet()
    sites = profile.call_sites
    convs = sites[sites["export"].str.contains("conv") & (sites["phase"] == "run")].sort_values("total_ns", ascending=False)
    hottest = convs.iloc[0]
    assert hottest["flops_peak_share"] < FAR_FROM_ROOFS, hottest[["export", "flops_peak_share"]]
    assert hottest["verdict"] == "far-from-roofs", hottest[["export", "verdict", "flops_peak_share", "bandwidth_peak_share"]]
    for row in convs.itertuples():  # every convolution far below both roofs reads so (unless launch or parallelism bound)
        if max(row.flops_peak_share, row.bandwidth_peak_share) < FAR_FROM_ROOFS and row.verdict not in ("overhead-bound", "parallelism-bound"):
            assert row.verdict == "far-from-roofs", row
    for step in profile.source_lines["next_step"].dropna():
        assert not any(word in step.lower() for word in OPTION_WORDS), step

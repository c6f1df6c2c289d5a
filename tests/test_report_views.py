"""The report's collector-specific views, from real runs: per-workgroup views (hook), runtime overhead
(tracy), tuned gains per line (diff.csv), and workgroup slices in trace.json.

The MLP example is profiled three times for real: under the hook collector with task-clock and
page-faults, under the tracy collector (the real ``--collector tracy`` path: a Tracy capture decoded
by ``tracelink.collect.tracy``, not a fixture), and under the HAL profiler as the base that
``tracelink diff`` compares the hook profile with. Every expected number is recomputed here from the
profile's own tables with pandas / numpy. Screenshots go to tests/_output/.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
from lxml import html as lxml_html

from tests.conftest import EXAMPLES, OUTPUT, run_profile
from tests.test_report_browser import Opened, browser  # noqa: F401  (the shared Chromium fixture)
from tests.test_report_contract import contract_errors, page_data
from tracelink.aggregate.speedup import speedup_of
from tracelink.commands.cli import main as cli_main
from tracelink.profile_dir.profile import load_profile
from tracelink.report import build_report, trace_events
from tracelink.report.assemble import build_model
from tracelink.report.trace import workgroup_slices
from tracelink.report.workgroups import heat_grid
from tracelink.report.zones import self_times

EVENTS = ["task-clock", "page-faults"]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """Real profiles of the MLP: hook (with counters), tracy, and hal (the diff's base)."""
    base = tmp_path_factory.mktemp("views")
    program = EXAMPLES / "mlp.mlir"
    return {
        "hook": run_profile(program, base / "hook", collector="hook", hook_events=EVENTS),
        "tracy": run_profile(program, base / "tracy", collector="tracy"),
        "hal": run_profile(program, base / "hal"),
    }


@pytest.fixture(scope="module")
def hook(profiles):
    profile = profiles["hook"]
    return profile, lxml_html.fromstring(build_report(profile).read_text(encoding="utf-8"))


def drill(tree, site: int):
    """A call site's workgroups: the template the viewer adds to its drill-down."""
    return tree.get_element_by_id(f"t-wg-{site}")


# Per-workgroup views (hook collector) ----------------------------------------------------------------


def test_heat_map_has_one_cell_per_workgroup_id_with_its_mean(hook):
    profile, tree = hook
    workgroups = profile.workgroups
    assert set(EVENTS) <= set(workgroups.columns)
    for site, runs in workgroups.groupby("call_site"):
        grid = runs[["workgroup_count_x", "workgroup_count_y", "workgroup_count_z"]].max()
        cells = drill(tree, site).xpath(".//figure[contains(@class,'wg-heat')]//*[local-name()='rect'][@data-wg]")
        assert len(cells) == int(grid.prod()), site
        means = runs.groupby(["workgroup_x", "workgroup_y", "workgroup_z"])["duration_ns"].mean()
        shown = {tuple(int(v) for v in cell.get("data-wg").strip("()").split(", ")): cell.get("data-v") for cell in cells}
        assert set(means.index) <= set(shown)
        assert all(shown[key] is None for key in set(shown) - set(means.index))  # ids that never ran: no value
        for key, mean in means.items():
            assert float(shown[key]) == pytest.approx(mean, rel=1e-8), (site, key)
        assert sum(int(cell.get("data-n")) for cell in cells) == len(runs)


def test_a_grid_too_big_for_its_cells_is_shown_in_blocks_of_ids(hook):
    profile, _ = hook
    runs = profile.workgroups[profile.workgroups["call_site"] == 0]
    count = int(runs[["workgroup_count_x", "workgroup_count_y", "workgroup_count_z"]].max().prod())
    assert count >= 8
    cells = heat_grid(runs, max_cells=count // 4)  # four ids per cell
    assert cells.block == 4 and len(cells.values) == count // 4 and cells.runs.sum() == len(runs)
    linear = runs["workgroup_x"] + runs["workgroup_count_x"] * (runs["workgroup_y"] + runs["workgroup_count_y"] * runs["workgroup_z"])
    expected = runs["duration_ns"].groupby(linear // 4).mean()
    np.testing.assert_allclose(cells.values[expected.index.to_numpy()], expected.to_numpy(), rtol=1e-12)
    assert cells.labels[1] == "ids 4–7"


def test_histogram_counts_every_workgroup(hook):
    profile, tree = hook
    for site, runs in profile.workgroups.groupby("call_site"):
        bars = drill(tree, site).xpath(".//figure[contains(@class,'wg-hist')]//*[local-name()='rect'][@data-n]")
        assert len(bars) >= 2
        assert sum(int(bar.get("data-n")) for bar in bars) == len(runs), site


def test_counter_means_and_correlations_are_numpys(hook):
    profile, tree = hook
    model = build_model(profile)
    for site, runs in profile.workgroups.groupby("call_site"):
        stats = {s.name: s for s in model.workgroups.sites[site].counters}
        rows = {row.get("data-counter"): row for row in drill(tree, site).xpath(".//table[contains(@class,'wg-counters')]/tbody/tr")}
        assert sorted(rows) == sorted(EVENTS)
        duration = runs["duration_ns"].to_numpy(dtype=float)
        for name in EVENTS:
            values = runs[name].to_numpy(dtype=float)
            assert stats[name].mean == pytest.approx(values.mean())
            constant = values.std() == 0 or duration.std() == 0
            expected = None if constant else float(np.corrcoef(duration, values)[0, 1])
            cell = rows[name].xpath("./td[contains(@class,'corr')]")[0]
            if expected is None:
                assert stats[name].correlation is None and "constant" in cell.text_content()
            else:
                assert stats[name].correlation == pytest.approx(expected, abs=1e-12)
                assert float(cell.get("data-v")) == pytest.approx(expected, abs=1e-5)
                assert cell.text_content() == f"{expected:+.2f}"


def test_counters_per_source_op_add_up_to_each_call_sites_total(hook):
    profile, tree = hook
    model = build_model(profile)
    data = model.workgroups
    totals = profile.workgroups.groupby("call_site")[EVENTS].sum().astype(float)
    per_site = data.op_site.groupby("call_site")[EVENTS].sum()
    pd.testing.assert_frame_equal(per_site.sort_index(), totals.loc[per_site.index].sort_index(), check_names=False, rtol=1e-9)
    assert sorted(per_site.index) == sorted(totals.index)  # every hooked call site has ops here
    iterations = profile.workgroups["iteration"].nunique()
    table = tree.get_element_by_id("counter-table")
    for name in EVENTS:
        cells = table.xpath(f".//tbody/tr/td[@data-counter='{name}']")
        assert len(cells) == len(data.by_op) >= 3
        shown = sum(float(cell.get("data-v")) for cell in cells)
        assert shown == pytest.approx(totals[name].sum() / iterations, rel=1e-5, abs=1e-9)


def test_trace_has_bounded_workgroup_slices_per_thread(hook):
    profile, _ = hook
    trace = trace_events(profile)
    slices = [e for e in trace["traceEvents"] if e.get("cat") == "workgroup"]
    assert len(slices) == len(profile.workgroups) == trace["otherData"]["workgroup_events_total"]
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    threads = set(zip(profile.workgroups["thread"].astype(str), profile.workgroups["tid"].astype(int)))
    assert {names[e["tid"]] for e in slices} == {f"workgroups · {t} (tid {tid})" for t, tid in threads}
    first = min(slices, key=lambda e: e["ts"])
    assert set(EVENTS) <= set(first["args"]) and len(first["args"]["workgroup"]) == 3 and first["args"]["call_site"] is not None
    capped, counts = workgroup_slices(profile.workgroups, 100, limit=50)
    kept = [e for e in capped if e["ph"] == "X"]
    assert len(kept) == 50 and counts == {"workgroup_events": 50, "workgroup_events_total": len(profile.workgroups), "workgroup_events_limit": 50}
    assert max(e["ts"] for e in kept) <= sorted(profile.workgroups["start_ns"])[49] / 1000.0 + 1e-3  # the earliest ones
    assert all("earliest 50" in e["args"]["name"] for e in capped if e["ph"] == "M" and e["name"] == "thread_name")


def test_drill_down_of_a_hooked_call_site_shows_heat_map_and_histogram(browser, hook):  # noqa: F811
    profile, _ = hook
    opened = Opened(browser, profile.directory / "report.html")
    hottest = int(profile.call_sites.sort_values("total_ns")["call_site"].iloc[-1])
    opened.page.click(f"#cs-{hottest}")
    heat = opened.page.locator("#panel .wg-heat svg")
    hist = opened.page.locator("#panel .wg-hist svg")
    heat.scroll_into_view_if_needed()
    assert heat.is_visible() and hist.is_visible()
    runs = profile.workgroups[profile.workgroups["call_site"] == hottest]
    grid = int(runs[["workgroup_count_x", "workgroup_count_y", "workgroup_count_z"]].max().prod())
    assert opened.eval("document.querySelectorAll('#panel .wg-heat rect.wg[data-wg]').length") == grid
    assert opened.eval("[...document.querySelectorAll('#panel .wg-heat rect.wg[data-wg]')].every(r => r.getBoundingClientRect().width > 3)")
    assert opened.eval("[...document.querySelectorAll('#panel .wg-hist rect.hb')].reduce((n, r) => n + Number(r.dataset.n), 0)") == len(runs)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    opened.page.screenshot(path=str(OUTPUT / "report_views_workgroups.png"))
    opened.check_clean()


# Runtime overhead (tracy collector) ------------------------------------------------------------------


def measured_zones(profile) -> pd.DataFrame:
    """The zones of the measured iterations, recomputed: BenchmarkIteration windows after the warm-up."""
    zones = profile.zones
    marks = zones[zones["name"].astype(str) == "BenchmarkIteration"].sort_values("start_ns")
    marks = marks.iloc[int(profile.summary["warmup"]):]
    inside = np.zeros(len(zones), dtype=bool)
    for start, duration in zip(marks["start_ns"], marks["duration_ns"]):
        inside |= (zones["start_ns"] >= start).to_numpy() & (zones["start_ns"] < start + duration).to_numpy()
    return zones[inside], marks


def test_runtime_zones_table_matches_a_pandas_groupby(profiles):
    profile = profiles["tracy"]
    assert profile.zones is not None and len(profile.zones) > 100
    tree = lxml_html.fromstring(build_report(profile).read_text(encoding="utf-8"))
    zones, marks = measured_zones(profile)
    exports = set(profile.exports["export"])
    runtime = zones[~zones["name"].astype(str).isin(exports) & (zones["name"].astype(str) != "BenchmarkIteration")]
    expected = runtime.groupby(runtime["srcloc_name"].astype(str))["duration_ns"].agg(["sum", "size"]).sort_values("sum", ascending=False, kind="stable")
    rows = tree.get_element_by_id("zone-table").xpath("./tbody/tr")
    assert len(rows) == min(25, len(expected))
    shown = [(row.get("data-zone"), float(row.xpath("./td")[2].get("data-v")), int(row.xpath("./td")[1].get("data-v"))) for row in rows]
    assert [name for name, _, _ in shown] == list(expected.index[: len(rows)])
    for name, total, count in shown:
        assert total == pytest.approx(float(expected.loc[name, "sum"]), rel=1e-5)
        assert count == int(expected.loc[name, "size"])
    assert "iree_vm_invoke" in [name for name, _, _ in shown]
    assert any(row.xpath(".//span[@class='badge' and text()='wait']") for row in rows)
    # the runtime section: one bar per measured iteration, and a timeline with dispatch zones
    assert len(tree.xpath("//section[@id='runtime']//*[local-name()='g'][contains(@class,'split')]")) == len(marks)
    assert tree.xpath("//section[@id='runtime']//*[local-name()='rect'][contains(@class,'z dispatch')]")
    assert tree.xpath("//header//a[@href='#runtime']")


def test_runtime_overhead_numbers_hold_together(profiles):
    profile = profiles["tracy"]
    data = build_model(profile).zones
    rows = data.iterations
    assert len(rows) == int(profile.summary["repetitions"])
    assert (rows["dispatch_ns"] > 0).all() and (rows["dispatch_ns"] <= rows["wall_ns"]).all()
    assert (rows["dispatch_ns"] <= rows["dispatch_cpu_ns"] + 1e-6).all()  # the union never exceeds the sum
    assert rows["outside_share"].between(0, 1).all()
    # the time with a dispatch running, by a plain interval merge of each iteration's dispatch zones
    zones, marks = measured_zones(profile)
    dispatches = zones[zones["name"].astype(str).isin(set(profile.exports["export"]))]
    for (start, duration), row in zip(zip(marks["start_ns"], marks["duration_ns"]), rows.itertuples()):
        mine = dispatches[(dispatches["start_ns"] >= start) & (dispatches["start_ns"] < start + duration)]
        covered, reach = 0, None
        for begin, end in sorted(zip(mine["start_ns"], mine["start_ns"] + mine["duration_ns"])):
            end = min(end, start + duration)
            if reach is None or begin > reach:
                covered += end - begin
                reach = end
            elif end > reach:
                covered += end - reach
                reach = end
        assert row.dispatch_ns == pytest.approx(covered), row.iteration
        assert row.wall_ns == duration
    # self times: on each thread they add up to the time covered by its top-level zones
    zones = profile.zones
    assert zones["duration_ns"].notna().all()  # a finished capture: every zone has ended
    selfs = self_times(zones["depth"].to_numpy(), zones["duration_ns"].to_numpy(dtype=float), zones["thread_index"].to_numpy())
    for thread, part in zones.assign(self_ns=selfs).groupby("thread_index"):
        top = part.loc[part["depth"] == 0, "duration_ns"].sum()
        assert part["self_ns"].sum() == pytest.approx(float(top)), thread
        assert (part["self_ns"] >= 0).all(), thread


# Tuned gains per line (diff.csv) ---------------------------------------------------------------------


def test_gains_per_line_from_a_real_diff(profiles, browser):  # noqa: F811
    base, tuned = profiles["hal"], profiles["hook"]
    assert cli_main(["diff", str(base.directory), str(tuned.directory)]) == 0  # the real `tracelink diff`
    diff = pd.read_csv(tuned.directory / "diff.csv")
    report = build_report(load_profile(tuned.directory))
    data = page_data(report)  # the viewer's data has the gains, as the contract says
    assert contract_errors(data) == [] and data["gains"]
    tree = lxml_html.fromstring(report.read_text(encoding="utf-8"))
    model = build_model(load_profile(tuned.directory))
    label_to_op = {info["label"]: op for op, info in model.ops.items()}
    checked = 0
    for row in diff.itertuples():
        op = label_to_op.get(row.label)
        assert op is not None, row.label
        for key in model.ops[op]["lines"]:
            ops_with_rows = [o for o in model.lines[key].ops if model.ops[o]["label"] in set(diff["label"])]
            badge = tree.xpath(f"//div[@data-k='{key}']/span[contains(@class,'gain')]")[0]
            if len(ops_with_rows) == 1:  # one measured op: its speedup and CI exactly
                assert float(badge.get("data-speedup")) == pytest.approx(row.speedup, rel=1e-5)
                assert badge.text_content() == f"{row.speedup:.2f}× ({row.ci_low:.2f}–{row.ci_high:.2f})"
                verdict = "faster" if row.ci_low > 1 else "slower" if row.ci_high < 1 else "unclear"
                assert verdict in badge.get("class")
                checked += 1
            else:  # several: the paired statistic of the ops' medians summed per round
                measured = diff[diff["label"].isin([model.ops[o]["label"] for o in ops_with_rows])]
                speedup, low, high = speedup_of(summed_rounds(measured["base_rounds"]), summed_rounds(measured["tuned_rounds"]))
                assert float(badge.get("data-speedup")) == pytest.approx(speedup, rel=1e-5)
                assert badge.text_content() == f"{speedup:.2f}× ({low:.2f}–{high:.2f})"
    assert checked >= 3
    total = json.loads((tuned.directory / "diff.json").read_text())["end_to_end"]
    assert f"{total['speedup']:.2f}× ({total['ci_low']:.2f}–{total['ci_high']:.2f})" in tree.get_element_by_id("gain-end-to-end").text_content()
    table = tree.get_element_by_id("gains-table")
    assert [tr.get("data-label") for tr in table.xpath("./tbody/tr")] == list(diff.loc[diff[["base_share", "tuned_share"]].max(axis=1) >= 0.001, "label"])[:15]
    # in the browser: selecting a line says its gain
    hottest = diff.iloc[0]
    key = next(k for k in model.ops[label_to_op[hottest.label]]["lines"] if k.startswith("f0:"))
    opened = Opened(browser, report)
    opened.page.click(f"#L-f0-{key.split(':')[1]}")
    text = opened.eval("document.getElementById('line-gain').textContent")
    assert f"{hottest.speedup:.2f}×" in text and f"{hottest.ci_low:.2f}–{hottest.ci_high:.2f}" in text
    opened.page.locator("#source").scroll_into_view_if_needed()
    opened.page.screenshot(path=str(OUTPUT / "report_views_gains.png"))
    opened.check_clean()
    shutil.copyfile(report, OUTPUT / "report_views_hook.html")


def summed_rounds(cells: pd.Series) -> np.ndarray:
    """diff.csv's per-round medians of several ops (``;``-joined; empty: not in that build), summed per round."""
    rounds = [np.array([float(v) for v in cell.split(";")]) for cell in cells if isinstance(cell, str) and cell]
    return np.sum(rounds, axis=0)


def test_no_diff_hides_gains_and_a_broken_one_says_why(profiles):
    profile = profiles["tracy"]
    assert not (profile.directory / "diff.csv").exists()
    tree = lxml_html.fromstring(build_report(profile).read_text(encoding="utf-8"))
    assert not tree.xpath("//*[@id='gains-table'] | //span[contains(@class,'gain')] | //div[contains(@class,'code src gains')]")
    (profile.directory / "diff.csv").write_text("label,speedup\nx,1.0\n")
    try:
        text = build_report(profile).read_text(encoding="utf-8")
        assert "diff.csv is present but not used" in text and "missing columns" in text
    finally:
        (profile.directory / "diff.csv").unlink()


def test_runtime_view_in_the_browser(profiles, browser):  # noqa: F811
    profile = profiles["tracy"]
    opened = Opened(browser, build_report(profile))
    opened.page.click("header nav a[href='#runtime']")
    opened.page.locator("#runtime").scroll_into_view_if_needed()
    assert opened.page.locator("#zone-table").is_visible()
    opened.page.click("#zone-table th:text-is('self')")
    values = opened.eval("[...document.querySelectorAll('#zone-table tbody tr')].map(r => parseFloat(r.cells[4].dataset.v))")
    assert values == sorted(values, reverse=True)
    opened.page.locator("#runtime").screenshot(path=str(OUTPUT / "report_views_runtime.png"))
    opened.check_clean()
    assert math.isfinite(values[0])

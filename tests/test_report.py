"""The HTML provenance report and the Chrome trace, built from real profiles (no browser: see test_report_browser)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from lxml import html as lxml_html

from tests.conftest import run_profile
from tracelink.errors import TracelinkError
from tracelink.commands.cli import main as cli_main
from tracelink.provenance.graph import call_sites_of_line, nodes_of_kind, ops_of_call_site
from tracelink.report import build_report, viewer_dir, write_trace
from tracelink.report import html as report_html
from tracelink.report.html import json_for_script
from tracelink.report.textmap import strip_locations, text_ops

WEIRD_NAME = '<script>alert(1)</script>&"x"'
WEIRD_FILE_NAME = 'we<ird>&"q".py'


def weird_program(directory: Path) -> Path:
    """A program whose op names, locations, file names and text hold markup, quotes and ampersands."""
    source_dir = directory / "src dir"
    source_dir.mkdir(parents=True)
    python_file = source_dir / WEIRD_FILE_NAME
    python_file.write_text('# a file whose text must show literally\ndef f(x):  # <script>alert(3)</script> & "quotes"\n    return x @ x  # <b>bold?</b>\n    # relu </code></div>\n')
    where = str(python_file).replace("\\", "\\\\").replace('"', '\\"')
    name = WEIRD_NAME.replace('"', '\\"')
    program = directory / 'a&b<c>"d".mlir'
    program.write_text(f"""// program text with <script>alert(4)</script> & "quotes"
#map = affine_map<(i, j) -> (i, j)>
func.func @main(%x: tensor<8x8xf32>, %y: tensor<8x8xf32>) -> tensor<8x8xf32> {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32> loc("{name}"("{where}":3:5))
  %m = linalg.matmul ins(%x, %y : tensor<8x8xf32>, tensor<8x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32> loc("{name}"("{where}":3:5))
  %r = linalg.generic {{indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}} ins(%m : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {{
  ^bb0(%a: f32, %o: f32):
    %s = arith.maximumf %a, %z : f32 loc("<img src=x onerror=alert(2)>"("{where}":4:5))
    linalg.yield %s : f32
  }} -> tensor<8x8xf32> loc("<img src=x onerror=alert(2)>"("{where}":4:5))
  return %r : tensor<8x8xf32>
}}
""")
    return program


@pytest.fixture(scope="module")
def weird_profile(tmp_path_factory):
    directory = tmp_path_factory.mktemp("weird")
    return run_profile(weird_program(directory), directory / "out", repetitions=3)


def report_data(text: str) -> dict:
    tree = lxml_html.fromstring(text)
    return json.loads(tree.get_element_by_id("tl-data").text)


def test_report_of_an_example_is_complete_and_self_contained(example_profiles):
    profile = example_profiles["convnet"]
    path = build_report(profile)
    assert path == profile.directory / "report.html"
    text = path.read_text(encoding="utf-8")
    tree = lxml_html.fromstring(text)
    for anchor in ("summary", "source", "dispatches", "graph", "audit"):
        assert tree.get_element_by_id(anchor) is not None
    # offline: nothing to fetch, everything inlined
    assert not tree.xpath("//script[@src] | //link | //img | //iframe | //*[@href and not(starts-with(@href, '#'))]")
    assert not re.search(r"https?://(?!iree\.dev|www\.w3\.org/2000/svg)", text.replace("ui.perfetto.dev", ""))  # SVG's namespace name: no fetch
    assert len(tree.xpath("//script")) == 2 and len(tree.xpath("//style")) == 1
    data = report_data(text)
    rows = tree.xpath("//table[@id='dispatch-table']/tbody/tr")
    assert [int(r.get("data-cs")) for r in rows] == sorted(profile.call_sites["call_site"])
    # every call site's drill-down (the viewer builds it from its record): its source ops, and each of its
    # executions in its histogram
    for row in profile.call_sites.itertuples():
        record = data["cs"][str(row.call_site)]
        assert [op for op, *_ in record["ops"]] == [op for op, _ in ops_of_call_site(profile.graph, int(row.call_site))]
        count = int(row.count) if row.count == row.count else 0  # NaN: not timed
        assert record["t"][0] == count == (sum(record["h"][3]) if record["h"] else 0)
    # every executable's source is there once, its lines marked with the ops they came from
    exe_templates = tree.xpath("//template[starts-with(@id, 't-x')]")
    assert len(exe_templates) == len(nodes_of_kind(profile.graph, "executable"))
    assert all("loc(" not in t.text_content() for t in exe_templates)
    assert tree.xpath("//template[starts-with(@id, 't-x')]//div[@data-ops]")
    # the graph: every call site, export and executable, and the source ops that feed a dispatch
    svg_nodes = {g.get("data-id") for g in tree.xpath("//svg[@id='graph-svg']//g[contains(concat(' ', @class, ' '), ' node ')]")}
    feeding = {op for op in nodes_of_kind(profile.graph, "source_op") if profile.graph.out_degree(op)}
    expected = feeding | set(nodes_of_kind(profile.graph, "call_site")) | set(nodes_of_kind(profile.graph, "export")) | set(nodes_of_kind(profile.graph, "executable"))
    assert svg_nodes == expected


def test_line_call_sites_are_the_graphs(example_profiles):
    """Each shown line lists exactly the call sites the provenance graph gives for it, with roles, but those
    where it is only an init op: a line lists the call sites that give it time."""
    for name in ("mlp", "convnet", "attention"):
        profile = example_profiles[name]
        data = report_data(build_report(profile).read_text())
        files = {f["id"]: f for f in data["files"]}
        python_file = next(f for f in data["files"] if f["name"].endswith(".py"))
        checked = 0
        for key, line in data["lines"].items():
            file_id, number = key.split(":")
            if file_id != python_file["id"]:
                continue
            expected = [[i, role[0]] for i, role in call_sites_of_line(profile.graph, files[file_id]["path"], int(number)) if role != "init"]
            assert line["cs"] == expected, (name, key)
            checked += 1
        assert checked >= 3


def test_line_shares_match_source_lines_table(example_profiles):
    profile = example_profiles["mlp"]
    data = report_data(build_report(profile).read_text())
    by_path = {f["path"]: f["id"] for f in data["files"]}
    for row in profile.source_lines.itertuples():
        key = f"{by_path[row.file]}:{row.line}" if row.file in by_path else None
        assert key in data["lines"], row.file
        assert data["lines"][key]["s"] == pytest.approx(row.share, abs=1e-5)


def test_program_text_lines_map_ops_located_by_name_only(tmp_path):
    """Ops with only a NameLoc (ONNX node names) still light up the program line they are written on."""
    program = tmp_path / "named.mlir"
    program.write_text("""func.func @main(%x: tensor<16x16xf32>, %y: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32> loc("n0")
  %m = linalg.matmul ins(%x, %y : tensor<16x16xf32>, tensor<16x16xf32>)
                     outs(%f : tensor<16x16xf32>) -> tensor<16x16xf32> loc("n1")
  return %m : tensor<16x16xf32>
}
""")
    profile = run_profile(program, tmp_path / "out", repetitions=2)
    data = report_data(build_report(profile).read_text())
    assert data["files"][0]["path"] == str(program.resolve())
    # the matmul's line holds the dispatch; the fill's (an init op: it gets none of the time) lists no call site
    assert [c[0] for c in data["lines"]["f0:5"]["cs"]] != [] == data["lines"]["f0:4"]["cs"]
    assert data["lines"]["f0:5"]["s"] > 0.5


def test_escaping_of_markup_in_names_locations_files_and_text(weird_profile):
    text = build_report(weird_profile).read_text()
    # nothing from the program becomes markup: two script elements (data, viewer), no img
    assert len(re.findall(r"<script\b", text)) == 2
    assert "<img" not in text and "<b>" not in text and "alert(1)</script>" not in text
    tree = lxml_html.fromstring(text)
    assert not tree.xpath("//img | //b")
    page_text = tree.text_content()
    assert WEIRD_NAME in page_text  # shown literally
    assert WEIRD_FILE_NAME in page_text
    assert '# <script>alert(3)</script> & "quotes"' in page_text  # the Python file's text, read from disk
    data = report_data(text)
    assert any(op["l"].startswith(WEIRD_NAME) for op in data["ops"].values())
    script = tree.get_element_by_id("tl-data").text
    assert "<" not in script and ">" not in script and "&" not in script


def test_json_for_script_escapes_markup():
    text = json_for_script({"a": "</script><script>alert(1)</script>&amp;\u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"a": "</script><script>alert(1)</script>&amp;\u2028"}


def test_failed_build_leaves_no_report_and_keeps_the_old_one(example_profiles, monkeypatch, tmp_path):
    profile = example_profiles["mlp"]
    directory = tmp_path / "copy"
    shutil.copytree(profile.directory, directory, ignore=shutil.ignore_patterns("report.html", "trace.json"))

    def broken(*args, **kwargs):
        raise RuntimeError("boom in the middle of the page")

    monkeypatch.setattr(report_html, "audit_section", broken)
    with pytest.raises(RuntimeError):
        build_report(directory)
    assert not (directory / "report.html").exists()
    assert not list(directory.glob(".report.html*"))
    (directory / "report.html").write_text("old report")
    with pytest.raises(RuntimeError):
        build_report(directory)
    assert (directory / "report.html").read_text() == "old report"
    monkeypatch.undo()
    assert build_report(directory).read_text().startswith("<!DOCTYPE html>")


def test_trace_json_has_every_dispatch_with_its_source(example_profiles):
    profile = example_profiles["convnet"]
    path = write_trace(profile, profile.directory / "trace.json")
    trace = json.loads(path.read_text(encoding="utf-8"))
    slices = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["cat"] == "dispatch"]
    assert len(slices) == len(profile.events)
    iterations = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["cat"] == "iteration"]
    assert len(iterations) == profile.events["iteration"].nunique()
    graph_locs = {int(d["index"]): d["loc"] for _, d in profile.graph.nodes(data=True) if d.get("kind") == "call_site"}
    for event in slices:
        site = event["args"]["call_site"]
        assert event["args"]["source"] == graph_locs[site]
        assert event["dur"] >= 0 and event["args"]["source_lines"]
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    # the HAL collector records the queue: every dispatch is on one of its lanes (tests/test_trace.py)
    assert {names[e["tid"]].split(" · lane ")[0] for e in slices} == set(profile.events["queue"])
    assert "iterations" in names.values()


def test_cli_rebuilds_report_and_trace(example_profiles, tmp_path, capsys):
    profile = example_profiles["mlp"]
    (profile.directory / "trace.json").unlink(missing_ok=True)
    target = tmp_path / "elsewhere" / "r.html"
    assert cli_main(["report", str(profile.directory), "-o", str(target)]) == 0
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert (profile.directory / "trace.json").is_file()
    assert cli_main(["report", str(tmp_path)]) == 1  # not a profile directory: one clear error
    assert "not a profile directory" in capsys.readouterr().err


def test_report_of_a_fixed_profile_directory_is_the_same_every_time(example_profiles, tmp_path):
    """`tracelink report` on one profile directory writes the same bytes each time, and the same as the report
    `tracelink profile` wrote there (from the sources it parsed beside the compiler): the page holds no time
    of its writing and nothing that depends on where or when its parts were made."""
    profile = example_profiles["mlp"]
    written = (profile.directory / "report.html").read_bytes()
    first, second = tmp_path / "first.html", tmp_path / "second.html"
    for report in (first, second):
        assert cli_main(["report", str(profile.directory), "-o", str(report)]) == 0
    assert first.read_bytes() == second.read_bytes() == written


def test_viewer_assets_are_found():
    assert all((viewer_dir() / name).is_file() for name in ("report.css", "drill.js", "report.js"))


def test_strip_locations_keeps_lines_and_strings():
    text = '#loc1 = loc("a.py":1:2)\n%0 = "x.op"() {s = "loc(not a loc)"} : () -> i32 loc(callsite("f"(\n"b.py":3:4) at #loc1))\n%1 = x.y %0 loc(#loc1)\n'
    stripped = strip_locations(text)
    assert stripped.count("\n") == text.count("\n")
    assert "loc(not a loc)" in stripped
    assert "loc(" not in stripped.replace("loc(not a loc)", "")
    assert stripped.splitlines()[0] == ""


def test_text_ops_gives_each_op_its_line():
    text = 'func.func @f(%a: f32) -> f32 {\n  %b = arith.addf %a, %a : f32 loc("x")\n\n  %c = arith.mulf %b, %b : f32 loc(fused["y", "z"])\n  return %c : f32\n}\n'
    found = text_ops(text, frozenset())
    assert [(op.name, op.line) for op in found] == [("func.func", 1), ("arith.addf", 2), ("arith.mulf", 4), ("func.return", 5)]
    assert found[1].keys == ['["loc(\\"x\\")"]']
    assert '["loc(\\"y\\")"]' in found[2].keys and '["loc(\\"z\\")"]' in found[2].keys


def test_missing_profile_directory_is_a_user_error(tmp_path):
    with pytest.raises(TracelinkError):
        build_report(tmp_path)


def test_report_without_program_nor_executable_dumps(example_profiles, tmp_path):
    """A profile directory moved to another machine: no program file, no dumps; the report still builds."""
    profile = example_profiles["mlp"]
    directory = tmp_path / "moved"
    shutil.copytree(profile.directory, directory, ignore=shutil.ignore_patterns("executables", "report.html"))
    summary = json.loads((directory / "profile.json").read_text())
    summary["program"] = "/nowhere/mlp.mlir"
    (directory / "profile.json").write_text(json.dumps(summary))
    text = build_report(directory).read_text()
    assert "not on this machine" in text and "dumped source is not in the profile directory" in text
    data = report_data(text)
    assert "/nowhere/mlp.mlir" not in [f["path"] for f in data["files"]]  # gone, and no location points into it
    assert "model.py" in [f["name"] for f in data["files"]] and data["lines"]

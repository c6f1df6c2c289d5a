"""The report of a big program in Chromium: 500 call sites, size, the hot subgraph, the first screen.

A generated program of 500 matmul + relu layers (each a call site; few distinct shapes, so few
executables and a quick compile) is profiled for real with two repetitions. Its report must stay
under 5 MB, open on the hot subgraph of the provenance graph (the hottest call sites by the profile's
own call_sites.csv, with the ops, exports and executables the provenance graph gives them), show every
call site on demand, keep the graph's labels apart, and answer "which line and why" on its first
screen: each hot line's ``file:line`` whole, its op kinds, its verdict and rate from source_lines.csv,
and the lines fused with it. Screenshots go to tests/_output/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import OUTPUT, run_profile
from tests.test_report_browser import Opened, browser  # noqa: F401  (the shared Chromium fixture)
from tests.test_report_contract import contract_errors, page_data
from tracelink.report import build_report
from tracelink.report.source_view import TEMPLATE_FILE_LINES
from tracelink.report.layout import HOT_SHARE, HOT_SITES_MAX, name_scope

LAYERS = 500
DISTINCT = 8
SIZE_LIMIT = 5_000_000


def generated_program(path: Path, layers: int, distinct: int) -> Path:
    """``layers`` matmul + relu layers over ``distinct`` shapes, each op with a layer name and a model.py line.

    Layer ``i`` is ``layer<i>.fc`` at model.py line ``100 + 3i`` and ``layer<i>.relu`` on the next
    line; widths grow by 2 for ``distinct`` layers, then go back and forth (repeated executables).
    """
    widths = [16 + 2 * i for i in range(distinct + 1)]
    chain = [(widths[i], widths[i + 1]) for i in range(distinct)]
    while len(chain) < layers:
        chain.append((chain[-1][1], chain[-1][0]))
    args = ", ".join(f"%w{i}: tensor<{a}x{b}xf32>" for i, (a, b) in enumerate(chain))
    lines = [
        "#id = affine_map<(i, j) -> (i, j)>",
        f"func.func @main(%x: tensor<8x{chain[0][0]}xf32>, {args}) -> tensor<8x{chain[-1][1]}xf32> {{",
        "  %zero = arith.constant 0.0 : f32",
    ]
    value = "%x"
    for i, (a, b) in enumerate(chain):
        where = f'"model.py":{100 + 3 * i}:9'
        lines += [
            f"  %e{i} = tensor.empty() : tensor<8x{b}xf32>",
            f"  %f{i} = linalg.fill ins(%zero : f32) outs(%e{i} : tensor<8x{b}xf32>) -> tensor<8x{b}xf32> loc(\"layer{i}.fc\"({where}))",
            f"  %m{i} = linalg.matmul ins({value}, %w{i} : tensor<8x{a}xf32>, tensor<{a}x{b}xf32>) outs(%f{i} : tensor<8x{b}xf32>) -> tensor<8x{b}xf32> loc(\"layer{i}.fc\"({where}))",
            f"  %r{i} = linalg.generic {{indexing_maps = [#id, #id], iterator_types = [\"parallel\", \"parallel\"]}} ins(%m{i} : tensor<8x{b}xf32>) outs(%e{i} : tensor<8x{b}xf32>) {{",
            "  ^bb0(%v: f32, %o: f32):",
            f"    %s = arith.maximumf %v, %zero : f32 loc(\"layer{i}.relu\"(\"model.py\":{101 + 3 * i}:9))",
            "    linalg.yield %s : f32",
            f"  }} -> tensor<8x{b}xf32> loc(\"layer{i}.relu\"(\"model.py\":{101 + 3 * i}:9))",
        ]
        value = f"%r{i}"
    lines += [f"  return {value} : tensor<8x{chain[-1][1]}xf32>", "}", ""]
    path.write_text("\n".join(lines))
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """The profile and report of the generated 500-layer program."""
    directory = tmp_path_factory.mktemp("scale")
    program = generated_program(directory / "layers.mlir", LAYERS, DISTINCT)
    profile = run_profile(program, directory / "out", function="main", repetitions=2)
    return profile, build_report(profile)


def hot_sites_of(call_sites) -> set[int]:
    """The hottest call sites by total time until HOT_SHARE of the time, at most HOT_SITES_MAX (from call_sites.csv)."""
    timed = call_sites[call_sites["total_ns"] > 0].sort_values(["total_ns", "call_site"], ascending=[False, True])
    covered_before = timed["total_ns"].cumsum() - timed["total_ns"]
    chosen = timed[covered_before < HOT_SHARE * timed["total_ns"].sum()].head(HOT_SITES_MAX)
    return {int(site) for site in chosen["call_site"]}


def expected_nodes(profile, sites: set[int]) -> set[str]:
    """Call sites, the source ops feeding them, their exports and executables."""
    rows = profile.call_sites[profile.call_sites["call_site"].isin(sites)]
    graph = profile.graph
    ops = {op for site in sites for op in graph.predecessors(f"cs:{site}") if graph.nodes[op].get("kind") == "source_op"}
    return {f"cs:{site}" for site in sites} | ops | {f"export:{e}" for e in rows["export"]} | {f"exe:{x}" for x in rows["executable"]}


SHOWN_NODES = "[...document.querySelectorAll('#graph-svg .node')].map(n => n.dataset.id)"
# the graph's text labels inside the visible part of its scroll box: [x, y, width, height, text]
VISIBLE_LABELS = """(() => {
    const box = document.querySelector('.graph-wrap').getBoundingClientRect();
    const top = Math.max(box.top, 0), bottom = Math.min(box.bottom, innerHeight);
    return [...document.querySelectorAll('#graph-svg text')].map(t => [t.getBoundingClientRect(), t.textContent])
        .filter(([r]) => r.width > 0 && r.bottom > top && r.top < bottom && r.right > box.left && r.left < box.right)
        .map(([r, text]) => [r.x, r.y, r.width, r.height, text]);
})()"""


def overlapping(labels: list) -> list:
    """Pairs of labels whose boxes overlap by more than half a pixel both ways."""
    found = []
    for i, (x1, y1, w1, h1, t1) in enumerate(labels):
        for x2, y2, w2, h2, t2 in labels[i + 1:]:
            if min(x1 + w1, x2 + w2) - max(x1, x2) > 0.5 and min(y1 + h1, y2 + h2) - max(y1, y2) > 0.5:
                found.append((t1, t2))
    return found


def test_big_report_is_small_and_opens_on_the_hot_subgraph(browser, big):  # noqa: F811
    profile, report = big
    assert len(profile.call_sites) == LAYERS
    size = report.stat().st_size
    print(f"\n{LAYERS}-call-site report: {size / 1e6:.2f} MB")
    assert size <= SIZE_LIMIT
    opened = Opened(browser, report)
    hot = hot_sites_of(profile.call_sites)
    assert 0 < len(hot) <= HOT_SITES_MAX < LAYERS
    assert set(opened.eval(SHOWN_NODES)) == expected_nodes(profile, hot)
    graph_box = opened.page.locator(".graph-wrap")
    graph_box.scroll_into_view_if_needed()
    labels = opened.eval(VISIBLE_LABELS)
    assert len(labels) >= 20 and overlapping(labels) == []
    OUTPUT.mkdir(parents=True, exist_ok=True)
    opened.page.screenshot(path=str(OUTPUT / "report_scale_hot_graph.png"))
    # search matches what a node shows, not its tooltip: a hot call site's label is "#N linalg.matmul",
    # its tooltip names its layer; a cold layer's ops are found in the full graph only
    graph = profile.graph
    shown = expected_nodes(profile, hot)

    def own_ops(site: int) -> list[str]:
        """The ops a call site computes: not the zero fills CSE merged into layer 6's and 7's (role init),
        which feed every later layer, so they are in the hot subgraph whichever layers are hot."""
        return [op for op in graph.predecessors(f"cs:{site}") if graph.edges[op, f"cs:{site}"].get("role") != "init"]

    coldest = next(int(site) for site in profile.call_sites.sort_values("total_ns")["call_site"] if not set(own_ops(int(site))) & shown)
    layer = str(graph.nodes[own_ops(coldest)[0]]["name"]).split(".")[0]
    in_full = sum(1 for op, data in graph.nodes(data=True) if str(data.get("name", "")).startswith(f"{layer}.") and graph.out_degree(op))
    opened.page.fill("#graph-search", f"{layer}.")
    opened.page.wait_for_function("document.getElementById('graph-info').textContent.includes('in the full graph')")
    assert opened.eval("document.querySelectorAll('#graph-svg .node.match').length") == 0
    assert opened.eval("document.getElementById('graph-info').textContent") == f"0 matching nodes here, {in_full} in the full graph"
    assert in_full == 2  # its fc and relu ops
    hot_layer = str(graph.nodes[next(iter(graph.predecessors(f"cs:{min(hot)}")))]["name"]).split(".")[0]
    assert opened.eval(f"[...document.querySelectorAll('#graph-svg .node.cs title')].some(t => t.textContent.includes('{hot_layer}.'))")
    opened.page.fill("#graph-search", f"#{min(hot)} linalg")
    assert opened.eval("[...document.querySelectorAll('#graph-svg .node.match')].map(n => n.dataset.id)") == [f"cs:{min(hot)}"]
    opened.page.fill("#graph-search", "")

    opened.page.click("#graph-full")
    opened.page.wait_for_function("document.getElementById('graph-svg').dataset.view === 'full'")
    every = set(profile.call_sites["call_site"].astype(int))
    assert set(opened.eval(SHOWN_NODES)) >= expected_nodes(profile, every)
    assert {n for n in opened.eval(SHOWN_NODES) if n.startswith("cs:")} == {f"cs:{i}" for i in every}
    graph_box.scroll_into_view_if_needed()
    labels = opened.eval(VISIBLE_LABELS)
    assert len(labels) >= 20 and overlapping(labels) == []
    # a node of the full graph lights up its neighbourhood: its call site, export and executable
    opened.page.click(f"#graph-svg .node[data-id='cs:{coldest}']")
    row = profile.call_sites.set_index("call_site").loc[coldest]
    lit = set(opened.eval("[...document.querySelectorAll('#graph-svg .node.nb')].map(n => n.dataset.id)"))
    assert {f"cs:{coldest}", f"export:{row['export']}", f"exe:{row['executable']}"} <= lit
    opened.page.screenshot(path=str(OUTPUT / "report_scale_full_graph.png"))
    # a drill-down of a packed report opens like any other
    opened.page.click("#graph-full")
    opened.page.click(f"#cs-{coldest}")
    opened.page.wait_for_selector("#panel:not([hidden])")
    assert f"#{coldest}" in opened.eval("document.getElementById('panel-title').textContent")
    assert opened.eval("document.querySelectorAll('#panel .exe .ln').length") > 5
    opened.check_clean()


# the minimap's pixel at (x, y) CSS pixels from its top left corner: [r, g, b, a]
MINIMAP_PIXEL = """([x, y]) => {
    const canvas = document.getElementById('graph-minimap'), ratio = canvas.width / canvas.getBoundingClientRect().width;
    return [...canvas.getContext('2d').getImageData(Math.round(x * ratio), Math.round(y * ratio), 1, 1).data];
}"""
MINIMAP_GEOMETRY = """(() => {
    const wrap = document.querySelector('.graph-wrap'), map = document.getElementById('graph-minimap').getBoundingClientRect();
    return {boxHeight: wrap.clientHeight, graphHeight: wrap.scrollHeight, scrollTop: wrap.scrollTop, x: map.x, y: map.y,
            width: map.width, height: map.height, scale: Number(document.getElementById('graph-minimap').dataset.scale)};
})()"""


def is_accent(pixel: list[int]) -> bool:
    """The minimap's frame colour (#2563eb), not a node's (orange, grey) or the background."""
    red, green, blue, _ = pixel
    return blue > 200 and red < 90 and green < 140


def test_big_page_data_is_the_contract(big):
    """With what only a big page has: the hot view beside the full one, the packed templates."""
    _, report = big
    data = page_data(report)
    assert contract_errors(data) == []
    assert set(data["graph"]["views"]) == {"hot", "full"} and data["packed"]


def test_minimap_shows_the_whole_graph_frames_the_visible_part_and_scrolls_there(browser, big):  # noqa: F811
    profile, report = big
    opened = Opened(browser, report)
    opened.page.click("#graph-full")
    opened.page.wait_for_function("document.getElementById('graph-svg').dataset.view === 'full'")
    opened.page.locator(".graph-wrap").scroll_into_view_if_needed()
    shown = set(opened.eval(SHOWN_NODES))
    nodes = len(shown)
    # fills CSE shares between layers feed hundreds of call sites from one op: connected, not drawn
    edges = [(source, target, data.get("role")) for source, target, data in profile.graph.edges(data=True) if source in shown and target in shown]
    assert sum(role == "init" for *_, role in edges) > 100
    assert opened.eval("document.querySelectorAll('#graph-svg path.edge').length") == sum(role != "init" for *_, role in edges)
    opened.page.wait_for_function(f"document.getElementById('graph-minimap').dataset.drawn === '{nodes}'")
    at_top = opened.eval(MINIMAP_GEOMETRY)
    # the whole graph, tens of screens long, fits beside its scroll box, in proportion
    assert at_top["graphHeight"] > 10 * at_top["boxHeight"]
    assert at_top["height"] <= at_top["boxHeight"] + 1 and 0 < at_top["width"] <= 120
    assert at_top["height"] == pytest.approx(at_top["graphHeight"] * at_top["scale"], abs=2)
    assert is_accent(opened.eval(MINIMAP_PIXEL, [at_top["width"] / 2, 1]))  # the visible part is framed
    # a click near its bottom scrolls the graph to its end, and the frame follows
    opened.page.mouse.click(at_top["x"] + at_top["width"] / 2, at_top["y"] + at_top["height"] * 0.97)
    opened.page.wait_for_function("document.querySelector('.graph-wrap').scrollTop > 0")
    at_end = opened.eval(MINIMAP_GEOMETRY)
    assert at_end["scrollTop"] >= 0.9 * at_end["graphHeight"] - at_end["boxHeight"]
    opened.page.wait_for_timeout(100)  # the frame is redrawn on the next animation frame
    assert is_accent(opened.eval(MINIMAP_PIXEL, [at_end["width"] / 2, at_end["scrollTop"] * at_end["scale"] + 1]))
    assert not is_accent(opened.eval(MINIMAP_PIXEL, [at_top["width"] / 2, 1]))
    # collapsed groups hide their ops in the minimap too
    opened.page.click("#graph-collapse")
    ops = opened.eval("document.querySelectorAll('#graph-svg .node.op').length")
    assert ops > 0
    assert opened.eval("document.getElementById('graph-minimap').dataset.drawn") == str(nodes - ops)
    opened.check_clean()


def test_first_screen_says_which_line_and_why(browser, big):  # noqa: F811
    profile, report = big
    lines = profile.source_lines.set_index(["file", "line"])
    ops_table = profile.source_ops.set_index("op")
    computes_in = {  # op -> the call sites it is the root op or a fused producer of
        row.op: {site for column in (row.root_of, row.producer_in) for site in str(column).split(";") if site not in ("", "nan")}
        for row in profile.source_ops.itertuples()
    }
    opened = Opened(browser, report)
    rows = opened.eval("""[...document.querySelectorAll('#hot-lines tbody tr')].map(r => {
        const where = r.querySelector('td.where a');
        const cell = r.querySelector('td.where').getBoundingClientRect(), link = where.getBoundingClientRect();
        return {where: where.textContent, whole: link.right <= cell.right + 0.5 && link.bottom <= innerHeight,
                kind: r.querySelector('td.kind').textContent, verdict: r.querySelector('td.verdict').textContent,
                fused: [...r.querySelectorAll('td.fused a')].map(a => a.textContent)};
    })""")
    assert len(rows) >= 10
    hottest = profile.source_lines.sort_values("share", ascending=False).iloc[0]
    assert rows[0]["where"] == f"{os.path.basename(hottest['file'])}:{hottest['line']}"
    # the widest matmul's line leads; a relu's share of its fused dispatch (split at the machine's roofs)
    # may rank above a narrow matmul's line further down
    assert rows[0]["kind"] == "linalg.matmul"
    for row in rows:
        name, number = row["where"].rsplit(":", 1)
        assert row["whole"], row  # file:line not cut, and on the first screen
        line = lines.loc[(name, int(number))]
        ops = str(line["ops"]).split(";")
        expected_kinds = {k for op in ops for k in str(ops_table.loc[op, "op_kinds"]).split(", ")} - {"linalg.fill"}
        assert set(row["kind"].split(", ")) == expected_kinds
        verdict = str(line["verdict"])
        rate = f"{line['gbytes_s']:.3g} GB/s" if verdict == "memory-bound" else f"{line['gflops_s']:.3g} GFLOP/s"
        assert row["verdict"] == f"{verdict.removesuffix('-bound')}{rate}"
        # fused with: the lines of the other ops computed (as root or producer) in the dispatches
        # this line's ops compute in, by source_ops.csv: here the relu on the next line
        sites = set().union(*(computes_in[op] for op in ops))
        fused_ops = [op for op, where in computes_in.items() if where & sites]
        fused = {f"{os.path.basename(l.split(':')[0])}:{l.split(':')[1]}" for op in fused_ops for l in str(ops_table.loc[op, "lines"]).split(";")} - {row["where"]}
        assert set(row["fused"]) == fused == {f"{name}:{int(number) + 1}"}
    opened.page.screenshot(path=str(OUTPUT / "report_scale_first_screen.png"))
    opened.check_clean()


def test_a_big_programs_lines_are_put_in_place_once_the_page_is_interactive(browser, big):  # noqa: F811
    """The program's thousands of lines are a template: not parsed at load, in place right after, and a
    line asked for before that (a link, the URL) is shown once they are."""
    profile, report = big
    program_lines = len(Path(profile.summary["program"]).read_text().splitlines())
    assert program_lines > TEMPLATE_FILE_LINES
    assert 'data-packed="f0"' in report.read_text()
    opened = Opened(browser, report)
    opened.page.wait_for_function("document.querySelectorAll('.code.src[data-packed]').length === 0", timeout=60000)
    assert opened.eval("document.querySelectorAll('#file-f0 .code.src .ln').length") == program_lines
    key = opened.eval("document.querySelector('#hot-lines a.lnk').dataset.k")
    opened.page.click("#hot-lines a.lnk")
    assert opened.eval("[...document.querySelectorAll('.code.src .ln.sel')].map(r => r.dataset.k)") == [key]
    sites = opened.eval("JSON.parse(document.getElementById('tl-data').textContent).lines[arguments[0]].cs.map(c => c[0])".replace("arguments[0]", repr(key)))
    assert sorted(opened.eval("[...document.querySelectorAll('#dispatch-table tbody tr.hl')].map(r => Number(r.dataset.cs))")) == sorted(sites) != []
    # a line named in the URL, before the lines are in place
    number = key.split(":")[1]
    linked = browser.new_page()
    errors: list[str] = []
    linked.on("pageerror", lambda error: errors.append(str(error)))
    linked.goto(report.resolve().as_uri() + f"#L-{key.split(':')[0]}-{number}")
    linked.wait_for_function("document.querySelectorAll('.code.src .ln.sel').length === 1", timeout=60000)
    assert linked.evaluate("document.querySelector('.code.src .ln.sel').dataset.k") == key
    assert errors == []
    opened.check_clean()


def test_ops_group_by_name_scope():
    """The graph folds ops by layer: a model and its layer for '/' scopes (after JAX's transforms), the first component of dotted names."""
    assert name_scope("/encoder/layer_3/attention/self/MatMul") == "encoder/layer_3"
    assert name_scope("encoder/layer_3/MatMul") == "encoder/layer_3"
    assert name_scope("jit(<lambda>)/MNISTMLPModel/Dense_0/dot_general") == "MNISTMLPModel/Dense_0"
    assert name_scope("conv1/7x7_s2") == "conv1"
    assert name_scope("onnx.Conv:inception_3a/1x1") == "inception_3a"
    assert name_scope("layer1.0.conv1") == "layer1"
    assert name_scope("layer250.fc") == "layer250"
    assert name_scope("fc") == "" and name_scope("") == ""

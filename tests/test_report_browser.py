"""The report in a real browser: Debian's Chromium, headless, driven by Playwright (never downloads a browser).

Profiles the convnet example for real (fused producers, call stacks, a shared executable), opens its
report from a file:// URL, and checks what a user sees: selecting a line highlights exactly the call
sites the provenance graph gives for it, the dispatch table sorts, a drill-down (built by the viewer from
the page's data) opens with call_sites.csv's numbers, its source ops and executable source, a graph
node lights up its neighbourhood. A program full of markup in its
names, locations and files shows it literally and runs nothing. Screenshots go to tests/_output/.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import networkx as nx
import pytest

from tests.conftest import OUTPUT, run_profile
from tests.test_report import WEIRD_FILE_NAME, WEIRD_NAME, weird_program
from tracelink.provenance.graph import call_sites_of_line, ops_of_call_site
from tracelink.report import build_report
from tracelink.report.fmt import ns, pct, rate

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A Playwright Chromium context on Debian's /usr/bin/chromium with a fresh profile, 1400×900."""
    if not CHROMIUM.is_file():
        pytest.fail("Chromium is not installed: apt-get install -y chromium (make test does it)")
    from playwright import sync_api  # a pinned test dependency: missing, the browser tests fail, not skip
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
            headless=True, viewport={"width": 1400, "height": 900},
        )
        yield context
        context.close()


class Opened:
    """A page with everything the browser did recorded: console errors, dialogs, requests."""

    def __init__(self, context, path: Path):
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.page = context.new_page()
        self.page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("dialog", self.on_dialog)
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_load_state("load")

    def on_dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def eval(self, script: str, arg=None):
        return self.page.evaluate(script, arg)

    def check_clean(self) -> None:
        assert self.errors == []
        assert self.dialogs == []
        assert all(url.startswith(("file:", "data:", "about:")) for url in self.requests), self.requests


@pytest.fixture(scope="module")
def convnet(example_profiles):
    profile = example_profiles["convnet"]
    return profile, build_report(profile)


# navigation start → first contentful paint and → load event end, in ms (waits for the paint entry)
FIRST_RENDER = """new Promise(resolve => {
    const done = paint => resolve({paint: paint, load: performance.getEntriesByType('navigation')[0].loadEventEnd});
    new PerformanceObserver((list, observer) => {
        const entry = list.getEntries().find(e => e.name === 'first-contentful-paint');
        if (entry) { observer.disconnect(); done(entry.startTime); }
    }).observe({type: 'paint', buffered: true});
    setTimeout(() => done(null), 5000);
})"""


def data_of(opened: Opened) -> dict:
    return opened.eval("JSON.parse(document.getElementById('tl-data').textContent)")


def highlighted_sites(opened: Opened) -> dict[int, str]:
    rows = opened.eval("""[...document.querySelectorAll('#dispatch-table tbody tr.hl')].map(r =>
        [Number(r.dataset.cs), r.classList.contains('hl-r') ? 'root' : r.classList.contains('hl-p') ? 'producer' : r.classList.contains('hl-i') ? 'init' : '?'])""")
    return dict(rows)


def test_clicking_a_line_highlights_exactly_its_call_sites(browser, convnet):
    profile, report = convnet
    opened = Opened(browser, report)
    data = data_of(opened)
    python_file = next(f for f in data["files"] if f["name"] == "convnet.py")
    # the line giving time to the most call sites; call sites where its op is only an init op (a zero-fill
    # CSE shares between blocks) give it none and are not listed (convnet.py:40 is init in blocks 2 and 3)
    key = max((k for k in data["lines"] if k.startswith(python_file["id"] + ":")), key=lambda k: (len(data["lines"][k]["cs"]), k))
    number = int(key.split(":")[1])
    expected = {i: role for i, role in call_sites_of_line(profile.graph, "convnet.py", number) if role != "init"}
    assert len(expected) >= 2
    assert "init" in dict(call_sites_of_line(profile.graph, "convnet.py", 40)).values()
    assert len(data["lines"][f"{python_file['id']}:40"]["cs"]) < len(call_sites_of_line(profile.graph, "convnet.py", 40))

    opened.page.click(f"button.tab[data-f='{python_file['id']}']")
    opened.page.click(f"#L-{python_file['id']}-{number}")
    assert highlighted_sites(opened) == expected
    assert opened.eval("[...document.querySelectorAll('.code.src .ln.sel')].map(r => r.dataset.k)") == [key]
    fused = sorted({k for i in expected for k in data["cs"][str(i)]["ln"]} - {key})
    assert sorted(opened.eval("[...document.querySelectorAll('.code.src .ln.fused')].map(r => r.dataset.k)")) == fused
    assert sorted(opened.eval("[...document.querySelectorAll('#line-sites li')].map(li => Number(li.dataset.cs))")) == sorted(expected)
    graph_nodes = opened.eval("[...document.querySelectorAll('#graph-svg .node.cs.hl')].map(n => n.dataset.id)")
    assert sorted(graph_nodes) == sorted(f"cs:{i}" for i in expected)

    # another line replaces the selection; the program's own text lines work the same way
    program_key = max((k for k in data["lines"] if k.startswith("f0:")), key=lambda k: data["lines"][k]["s"])
    opened.page.click("button.tab[data-f='f0']")
    opened.page.click(f"#L-f0-{program_key.split(':')[1]}")
    assert highlighted_sites(opened) == {i: {"r": "root", "p": "producer"}[r] for i, r in data["lines"][program_key]["cs"]}
    OUTPUT.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(report, OUTPUT / "report_convnet.html")
    opened.page.click(f"button.tab[data-f='{python_file['id']}']")
    opened.page.click(f"#L-{python_file['id']}-{number}")
    opened.page.locator("#source").scroll_into_view_if_needed()
    opened.page.screenshot(path=str(OUTPUT / "report_convnet_line.png"))
    opened.check_clean()


def test_sorting_the_dispatch_table(browser, convnet):
    profile, report = convnet
    opened = Opened(browser, report)
    column = opened.eval("[...document.querySelectorAll('#dispatch-table th')].findIndex(th => th.textContent === 'mean')")
    values = f"[...document.querySelectorAll('#dispatch-table tbody tr')].map(r => parseFloat(r.cells[{column}].dataset.v))"
    opened.page.click("#dispatch-table th:text-is('mean')")
    descending = opened.eval(values)
    assert descending == sorted(descending, reverse=True) and descending != sorted(descending)
    opened.page.click("#dispatch-table th:text-is('mean')")
    assert opened.eval(values) == sorted(descending)
    opened.page.click("#dispatch-table th:text-is('export')")
    exports = opened.eval("[...document.querySelectorAll('#dispatch-table tbody tr')].map(r => r.cells[2].textContent.toLowerCase())")
    assert exports == sorted(exports)
    opened.page.fill("#dispatch-filter", "block2")  # after sorting: the filter follows the rows
    visible = opened.eval("[...document.querySelectorAll('#dispatch-table tbody tr')].filter(r => !r.hidden).map(r => Number(r.dataset.cs))")
    assert sorted(visible) == sorted(int(r.call_site) for r in profile.call_sites.itertuples() if "block2" in r.loc) != []
    assert "of" in opened.eval("document.getElementById('dispatch-count').textContent")
    opened.check_clean()


def test_drill_down_shows_the_dispatch(browser, convnet):
    profile, report = convnet
    opened = Opened(browser, report)
    hottest = int(profile.call_sites.sort_values("total_ns", ascending=False)["call_site"].iloc[0])
    opened.page.click(f"#cs-{hottest}")
    panel = opened.page.locator("#panel")
    assert panel.is_visible()
    assert f"#{hottest}" in opened.eval("document.getElementById('panel-title').textContent")
    ops = opened.eval("[...document.querySelectorAll('#panel .ops-table tbody tr')].map(r => r.dataset.op)")
    assert ops == [op for op, _ in ops_of_call_site(profile.graph, hottest)]
    assert opened.eval("document.querySelectorAll('#panel svg.chart').length") == 2
    assert opened.eval("document.querySelectorAll('#panel svg.chart rect.hb').length") >= 2
    root_lines = opened.eval("[...document.querySelectorAll('#panel .exe .ln.mr')].map(r => r.querySelector('code').textContent)")
    assert root_lines and any("linalg." in line for line in root_lines)
    assert opened.eval("document.querySelector('#panel .exe').textContent.includes('loc(')") is False
    opened.page.screenshot(path=str(OUTPUT / "report_convnet_drilldown.png"))
    # a shared executable says whose locations its dump carries
    shared = profile.call_sites.groupby("export")["call_site"].agg(list)
    shared = [sites for sites in shared if len(sites) > 1]
    if shared:
        opened.page.keyboard.press("Escape")
        assert not panel.is_visible()
        opened.page.click(f"#cs-{max(shared[0])}")
        assert "shared by" in opened.eval("document.getElementById('panel-body').textContent")
    opened.check_clean()


# a drill-down's cards, label → value, and its source-op rows: [op, role, share, line keys]
DRILL_CARDS = """Object.fromEntries([...document.querySelectorAll('#panel .drill > .cards .card')]
    .map(c => [c.querySelector('.muted').textContent, c.querySelector('.big').textContent]))"""
DRILL_OPS = """[...document.querySelectorAll('#panel .ops-table tbody tr')].map(r => [r.dataset.op, r.querySelector('.role').textContent,
    r.querySelector('.heat').textContent, [...r.querySelectorAll('a.lnk')].map(a => a.dataset.k)])"""


def test_drill_down_numbers_are_the_profiles(browser, convnet):
    """Each call site's drill-down, built by the viewer from the page's data, shows call_sites.csv's numbers
    as the page's Python writes them (fmt.py), and its source ops, roles and shares as the provenance graph
    gives them, with their lines."""
    profile, report = convnet
    opened = Opened(browser, report)
    data = data_of(opened)
    timed = profile.call_sites[profile.call_sites["count"] > 0]
    assert len(timed) >= 3
    for row in timed.itertuples():
        site = int(row.call_site)
        opened.page.click(f"#cs-{site}")
        assert opened.eval("document.querySelector('#panel .drill h3').textContent") == f"Call site #{site}"
        cards = opened.eval(DRILL_CARDS)
        assert (cards["executions"], cards["mean"], cards["p50"], cards["of dispatch time"]) == (str(int(row.count)), ns(row.mean_ns), ns(row.median_ns), pct(row.share))
        assert cards["p10 – p90"] == f"{ns(row.p10_ns)} – {ns(row.p90_ns)}" and cards["total"] == ns(row.total_ns)
        assert opened.eval("[...document.querySelectorAll('#panel .charts svg rect.hb[data-n]')].reduce((n, r) => n + Number(r.dataset.n), 0)") == row.count
        edges = {source: edge for source, _, edge in profile.graph.in_edges(f"cs:{site}", data=True) if edge.get("kind") == "feeds"}
        weight = sum(float(edge.get("weight", 0.0)) for edge in edges.values())
        expected = [[op, role, pct(float(edges.get(op, {}).get("weight", 0.0)) / weight if weight else float(role == "root")), data["ops"][op]["ln"][:6]]
                    for op, role in ops_of_call_site(profile.graph, site)]
        assert opened.eval(DRILL_OPS) == expected != []
        opened.page.keyboard.press("Escape")
    opened.check_clean()


def test_the_viewers_numbers_are_the_pages(browser, convnet):
    """The viewer formats numbers as fmt.py does: Python's rounding (half to even, where JavaScript's
    toFixed rounds ties up) and its ``g`` format (no trailing zeros, two-digit exponents)."""
    _, report = convnet
    opened = Opened(browser, report)
    draw = random.Random(7)
    values = [0.0, 0.5, 1.5, 2.5, 12.5, 999.5, 1000.0, 1125.0, 1135.0, 99950.0, 99960.0, 1.25e6, 2.5e-5, 123456789.0, 1e21 / 3, -12.5]
    values += [round(draw.lognormvariate(8, 6), draw.randint(0, 3)) for _ in range(300)] + [draw.randint(1, 4000) / 8 for _ in range(100)]
    shown = opened.eval("""values => { const f = tracelinkDrill({files: []}).format;
        return values.map(v => [f.ns(v), f.pct(v / 1000), f.rate(v, 'GB/s'), f.fixed(v, 2), f.general(v, 4)]); }""", values)
    assert shown == [[ns(v), pct(v / 1000), rate(v, "GB/s"), f"{v:.2f}", f"{v:.4g}"] for v in values]
    opened.check_clean()


def test_graph_node_highlights_its_neighbourhood(browser, convnet):
    profile, report = convnet
    opened = Opened(browser, report)
    graph = profile.graph
    shown = set(opened.eval("[...document.querySelectorAll('#graph-svg .node')].map(n => n.dataset.id)"))
    hottest = int(profile.call_sites.sort_values("total_ns", ascending=False)["call_site"].iloc[0])
    for node in (f"cs:{hottest}", ops_of_call_site(graph, hottest)[0][0]):
        opened.page.click(f"#graph-svg .node[data-id='{node}']")
        lit = set(opened.eval("[...document.querySelectorAll('#graph-svg .node.nb')].map(n => n.dataset.id)"))
        expected = (nx.ancestors(graph, node) | nx.descendants(graph, node) | {node}) & shown
        assert lit == expected, node
        assert opened.eval("document.querySelector('#graph-svg .node.cur').dataset.id") == node
    opened.page.screenshot(path=str(OUTPUT / "report_convnet_graph.png"))
    # collapsing a group hides its ops and re-routes their edges to the group's title
    group = opened.eval("document.querySelector('#graph-svg .grp').dataset.g")
    opened.page.click(f"#graph-svg .grp-head[data-g='{group}']")
    assert opened.eval(f"[...document.querySelectorAll('#graph-svg .grp[data-g=\"{group}\"] .node')].every(n => n.getBoundingClientRect().height === 0)")
    opened.page.click("#graph-expand")
    assert opened.eval(f"[...document.querySelectorAll('#graph-svg .grp[data-g=\"{group}\"] .node')].every(n => n.getBoundingClientRect().height > 0)")
    opened.page.fill("#graph-search", "block2")
    assert opened.eval("document.querySelectorAll('#graph-svg .node.match').length") >= 1
    opened.page.screenshot(path=str(OUTPUT / "report_convnet_full.png"), full_page=True)
    opened.check_clean()


def test_markup_in_the_program_shows_literally_and_runs_nothing(browser, tmp_path):
    directory = tmp_path / "weird"
    profile = run_profile(weird_program(directory), directory / "out", repetitions=2)
    opened = Opened(browser, build_report(profile))
    page = opened.page
    data = data_of(opened)
    weird_file = next(f for f in data["files"] if f["name"] == WEIRD_FILE_NAME)
    page.click(f"button.tab[data-f='{weird_file['id']}']")
    page.click(f"#L-{weird_file['id']}-3")
    details = opened.eval("document.getElementById('line-details').textContent")
    assert WEIRD_NAME in details and WEIRD_FILE_NAME in details
    assert '# <script>alert(3)</script> & "quotes"' in opened.eval("document.querySelector('.file:not([hidden]) .code').textContent")
    page.click("#cs-0")
    assert WEIRD_NAME in opened.eval("document.getElementById('panel-body').textContent")
    page.keyboard.press("Escape")
    page.click("#graph-svg .node.op")
    page.fill("#graph-search", "<script>")
    assert opened.eval("document.querySelectorAll('#graph-svg .node.match').length") >= 1
    assert "a&b<c>" in page.title()
    assert opened.eval("document.querySelectorAll('img, b, iframe').length") == 0
    assert opened.eval("document.querySelectorAll('script').length") == 2
    page.screenshot(path=str(OUTPUT / "report_escaping.png"))
    opened.check_clean()  # no dialog: no alert() ran


def test_time_to_first_render(browser, convnet):
    _, report = convnet
    opened = Opened(browser, report)
    timing = opened.eval(FIRST_RENDER)
    print(f"\nconvnet report: {report.stat().st_size / 1e3:.0f} kB, first contentful paint {timing['paint']:.0f} ms, load {timing['load']:.0f} ms")
    assert timing["paint"] is not None and timing["paint"] < 2000
    opened.check_clean()



def test_clicking_a_dispatch_of_the_memory_chart_says_what_is_live_there(browser, convnet):
    profile, report = convnet
    memory = profile.summary["memory"]
    peak = memory["peak_dispatch"]
    opened = Opened(browser, report)
    opened.page.click(f'#memory-live rect[data-position="{peak}"]')  # the peak marker over it does not take the click
    shown = opened.eval("document.getElementById('memory-at').textContent")
    file, line, held = memory["timeline_holders"][peak][0]
    assert shown.startswith(f"dispatch {peak}: ") and f"{Path(file).name}:{line}" in shown, shown
    assert opened.eval("document.querySelectorAll('#memory-live rect.on').length") == 1
    opened.check_clean()

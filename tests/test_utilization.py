"""Cost model, roofline verdicts and the report views built on them, on one real program.

``tests/data/costs.mlir`` has eight independent dispatches whose FLOPs and compulsory bytes are worked
out by hand below: a matmul, a batch matmul, a convolution, an elementwise chain (multiply, add, exp),
a sum of 4 Mi floats into one scalar, which IREE runs as a single workgroup (parallelism-bound on a
machine with several workers), a softmax (an op without a body: its FLOPs come from a table), an
attention op in the form torch's scaled_dot_product_attention takes in IREE (two contractions around a
softmax, not one loop nest) and a convolution with a splat filter, which IREE turns into one strided sum
broadcast to every output channel (counted once, not per channel). It is compiled and run for real, once per module.
"""

from __future__ import annotations

import pytest

from tests.conftest import OUTPUT, REPO, run_profile
from tests.test_report_browser import Opened, browser  # noqa: F401  (the shared Chromium fixture)
from tracelink.collect.machine import machine_peaks
from tracelink.report import build_report

COSTS = REPO / "tests" / "data" / "costs.mlir"
F32 = 4
# line of the op that forms each dispatch -> (FLOPs, bytes), by hand
EXPECTED = {
    8: (2 * 64 * 256 * 128, F32 * (64 * 128 + 128 * 256 + 64 * 256)),  # matmul: multiply-add per (m, n, k)
    11: (2 * 4 * 32 * 16 * 64, F32 * (4 * 32 * 64 + 4 * 64 * 16 + 4 * 32 * 16)),  # batch matmul
    14: (2 * 16 * 16 * 16 * 3 * 3 * 8, F32 * (18 * 18 * 8 + 3 * 3 * 8 * 16 + 16 * 16 * 16)),  # conv 3x3, 8 -> 16 channels
    17: (3 * 64 * 128, F32 * 3 * 64 * 128),  # mulf, addf, exp per element; reads x, y, writes one
    28: (4194304, F32 * (4194304 + 1)),  # one add per element; reads the array, writes a scalar
    34: (5 * 32 * 100, F32 * 2 * 32 * 100),  # max, subtract, exp, sum, divide per element; reads x, writes one
    # attention, batch 2, M 64, K1 32, K2 48, N 16: per score (2×64×48) a multiply-add per K1 (Q·Kᵀ),
    # scale, max, subtract, exp and sum, and a multiply-add per N (P·V); one divide per output; reads Q, K, V
    37: (2 * 64 * 48 * (2 * 32 + 5 + 2 * 16) + 2 * 64 * 16, F32 * (2 * 64 * 32 + 2 * 48 * 32 + 2 * 48 * 16 + 2 * 64 * 16)),
    # 1x1 stride-2 convolution with a splat filter: IREE folds the filter into a strided sum over the 64
    # input channels, the same for all 128 output channels: a multiply and an add per distinct point
    # (28 x 28 x 64), not per output channel; reads the input (all of it), writes the output
    45: (2 * 28 * 28 * 64, F32 * (64 * 56 * 56 + 128 * 28 * 28)),
}


@pytest.fixture(scope="module")
def costs(tmp_path_factory):
    return run_profile(COSTS, tmp_path_factory.mktemp("costs") / "out", repetitions=3)


def site_at(profile, line: int):
    rows = profile.call_sites[profile.call_sites["loc"].str.contains(f"costs.mlir:{line}:", regex=False)]
    assert len(rows) == 1, profile.call_sites["loc"].tolist()
    return rows.iloc[0]


def test_flops_and_bytes_equal_hand_computed_values(costs):
    for line, (flops, moved) in EXPECTED.items():
        site = site_at(costs, line)
        assert (site["flops"], site["bytes"]) == (flops, moved), (line, site["root_op"])
        assert site["intensity"] == pytest.approx(flops / moved)
        assert site["gflops_s"] == pytest.approx(flops / site["median_ns"])


def test_one_workgroup_on_several_workers_is_parallelism_bound(costs):
    # every machine of this project has 2 cores: local-task runs 2 workers, and one workgroup idles one
    assert machine_peaks().workers >= 2
    site = site_at(costs, 28)
    assert site["workgroup_count"] == 1
    assert site["median_ns"] > 5_000  # long enough not to be overhead-bound
    assert site["verdict"] == "parallelism-bound"
    assert "tile sizes" in site["next_step"]


def test_source_ops_and_lines_carry_their_dispatchs_cost_and_verdict(costs):
    ops = costs.source_ops.set_index("label")
    matmul = ops.loc[f"{COSTS}:8:9"]
    per_execution = EXPECTED[8][0]
    assert matmul["flops"] == pytest.approx(per_execution * site_at(costs, 8)["count"])
    assert matmul["verdict"] == site_at(costs, 8)["verdict"]
    lines = costs.source_lines.set_index("line")
    # the elementwise dispatch's time is split over its ops' lines; their FLOPs add up to the dispatch's
    chain = lines.loc[[17, 21, 22, 23], "flops"].sum()
    assert chain == pytest.approx(EXPECTED[17][0] * site_at(costs, 17)["count"])
    assert costs.summary["machine"]["peak_gbps"] > 0 and costs.summary["machine"]["peak_gflops"] > 0
    # the roof is above what the program reaches: no call site runs faster than the compute peak
    assert (costs.call_sites["flops_peak_share"].dropna() <= 1).all(), costs.call_sites[["export", "flops_peak_share"]]


def test_operands_that_fit_in_cache_are_not_called_memory_bound(costs):
    # Below the ridge point, a dispatch is memory-bound only when it moves more than the workers' L2
    # caches hold: the splat-filter convolution (1.2 MB, the input its producer just wrote) is bound by
    # its code, and its next step is its tile sizes, not fusion.
    machine = costs.summary["machine"]
    assert machine["cache_bytes"] > 0
    site = site_at(costs, 45)
    assert site["intensity"] < machine["peak_gflops"] / machine["peak_gbps"] and site["bytes"] < machine["cache_bytes"]
    assert site["verdict"] == "compute-bound" and "tile sizes" in site["next_step"]


@pytest.fixture(scope="module")
def costs_report(costs):
    return build_report(costs)


def test_roofline_flame_graph_and_kind_table_in_the_browser(browser, costs, costs_report):
    opened = Opened(browser, costs_report)
    timed = costs.call_sites[(costs.call_sites["phase"] == "run") & (costs.call_sites["count"] > 0)]
    # one roofline dot per timed call site, each opening its drill-down
    assert opened.eval("document.querySelectorAll('#roofline circle.rf').length") == len(timed)
    opened.page.click(f"#roofline circle.rf[data-cs='{site_at(costs, 28)['call_site']}']")
    assert opened.eval("document.getElementById('panel').getAttribute('data-cs')") == str(site_at(costs, 28)["call_site"])
    assert "parallelism" in opened.eval("document.querySelector('#panel-body .why').textContent")
    opened.page.keyboard.press("Escape")
    # the flame graph ends in dispatch frames (frames under 0.1 % are left out; the reduction's time is on
    # two lines, its op's and its body's); zooming into a line frame hides the others
    leaves = opened.eval("[...document.querySelectorAll('#flame-svg g.fr.leaf')].map(g => g.dataset.cs)")
    # every call site above 5 % has a leaf (a smaller one may be split into frames under the 0.1 % cut);
    # no leaf is anything but a timed call site
    assert {str(i) for i in timed.loc[timed["share"] >= 0.05, "call_site"]} <= set(leaves) <= {str(i) for i in timed["call_site"]}
    assert leaves.count(str(site_at(costs, 28)["call_site"])) == 2
    opened.page.click("#flame-svg g.fr[data-l='line 8']")
    shown = opened.eval("[...document.querySelectorAll('#flame-svg g.fr.leaf')].filter(g => g.style.display !== 'none').map(g => g.dataset.cs)")
    assert shown == [str(site_at(costs, 8)["call_site"])]
    width = opened.eval("Number(document.querySelector('#flame-svg g.fr.leaf[data-cs=\"%d\"] rect').getAttribute('width'))" % site_at(costs, 8)["call_site"])
    assert width > 1000  # the zoomed frame spans the whole width
    # eight independent dispatches of eight kinds
    assert opened.eval("document.querySelectorAll('#kind-table tbody tr').length") == 8
    assert opened.eval("document.querySelectorAll('#glossary dt').length") >= 6
    OUTPUT.mkdir(exist_ok=True)
    opened.page.locator("#dispatches").screenshot(path=str(OUTPUT / "roofline.png"))
    opened.page.locator("#flame").screenshot(path=str(OUTPUT / "flame.png"))
    opened.check_clean()

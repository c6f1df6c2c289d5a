"""The report's "which part of my model" view in Chromium: the component tree folds and unfolds at any depth.

A small encoder of two layers, each an attention matmul and a feed-forward matmul + ReLU, every op
named with a torch-like module path (``encoder/layers.0/attention/matmul``), is profiled for real.
"""

from __future__ import annotations

import pytest

from tests.conftest import run_profile
from tests.test_report_browser import Opened, browser  # noqa: F401  (the shared Chromium fixture)
from tracelink.aggregate.components import component_table
from tracelink.report import build_report

LAYER = """
  %e{i}a = tensor.empty() : tensor<32x{n}xf32>
  %f{i}a = linalg.fill ins(%zero : f32) outs(%e{i}a : tensor<32x{n}xf32>) -> tensor<32x{n}xf32> loc("encoder/layers.{i}/attention/matmul"("enc.py":{a}:9))
  %a{i} = linalg.matmul ins({x}, %wa{i} : tensor<32x{n}xf32>, tensor<{n}x{n}xf32>) outs(%f{i}a : tensor<32x{n}xf32>) -> tensor<32x{n}xf32> loc("encoder/layers.{i}/attention/matmul"("enc.py":{a}:9))
  %f{i}b = linalg.fill ins(%zero : f32) outs(%e{i}a : tensor<32x{n}xf32>) -> tensor<32x{n}xf32> loc("encoder/layers.{i}/ffn/matmul"("enc.py":{b}:9))
  %m{i} = linalg.matmul ins(%a{i}, %wf{i} : tensor<32x{n}xf32>, tensor<{n}x{n}xf32>) outs(%f{i}b : tensor<32x{n}xf32>) -> tensor<32x{n}xf32> loc("encoder/layers.{i}/ffn/matmul"("enc.py":{b}:9))
  %r{i} = linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}} ins(%m{i} : tensor<32x{n}xf32>) outs(%e{i}a : tensor<32x{n}xf32>) {{
  ^bb0(%v: f32, %o: f32):
    %s = arith.maximumf %v, %zero : f32 loc("encoder/layers.{i}/ffn/relu"("enc.py":{c}:9))
    linalg.yield %s : f32
  }} -> tensor<32x{n}xf32> loc("encoder/layers.{i}/ffn/relu"("enc.py":{c}:9))
"""
LAYERS = 2
WIDTH = 64


def encoder_program() -> str:
    weights = ", ".join(f"%wa{i}: tensor<{WIDTH}x{WIDTH}xf32>, %wf{i}: tensor<{WIDTH}x{WIDTH}xf32>" for i in range(LAYERS))
    body = "".join(
        LAYER.format(i=i, n=WIDTH, x="%x" if i == 0 else f"%r{i - 1}", a=10 + 10 * i, b=12 + 10 * i, c=13 + 10 * i) for i in range(LAYERS)
    )
    return (
        "#id = affine_map<(i, j) -> (i, j)>\n"
        f"func.func @main(%x: tensor<32x{WIDTH}xf32>, {weights}) -> tensor<32x{WIDTH}xf32> {{\n"
        "  %zero = arith.constant 0.0 : f32\n"
        f"{body}  return %r{LAYERS - 1} : tensor<32x{WIDTH}xf32>\n}}\n"
    )


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    base = tmp_path_factory.mktemp("encoder")
    program = base / "encoder.mlir"
    program.write_text(encoder_program())
    profile = run_profile(program, base / "out", repetitions=3)
    return profile, build_report(profile)


def test_component_tree_of_the_encoder(encoder):
    profile, _ = encoder
    components = component_table(profile.source_ops).set_index("component")
    expected = {"encoder", *(f"encoder/layers.{i}{part}" for i in range(LAYERS) for part in ("", "/attention", "/ffn"))}
    assert set(components.index) == expected
    assert components.loc["encoder", "inclusive_share"] == pytest.approx(1.0)
    assert components.loc["encoder", "self_ns"] == 0  # a scope with no ops of its own


def test_component_tree_folds_and_unfolds_at_every_depth(browser, encoder):  # noqa: F811
    _, report = encoder
    opened = Opened(browser, report)
    tree = "#summary #components"
    # the summary leads with the components, then the op kinds, then the lines
    order = opened.eval("""[...document.querySelectorAll('#summary h3')].map(h => h.textContent)""")
    assert order.index("Time by component") < order.index("Time by op kind across repeated layers") < order.index("Hottest source lines")
    layer = f"{tree} details[data-c='encoder/layers.0']"
    ffn = f"{tree} [data-c='encoder/layers.0/ffn']"
    assert opened.eval(f"document.querySelector(\"{tree} details[data-c='encoder']\").open")  # the top level starts open
    assert not opened.eval(f"document.querySelector(\"{layer}\").open")  # one of two layers: folded
    assert not opened.page.is_visible(ffn)
    opened.page.click(f"{layer} > summary")  # unfold a layer: its attention and ffn show
    assert opened.eval(f"document.querySelector(\"{layer}\").open")
    assert opened.page.is_visible(ffn)
    assert opened.page.is_visible(f"{tree} [data-c='encoder/layers.0/attention']")
    opened.page.click(f"{tree} details[data-c='encoder'] > summary")  # fold the top: everything under it hides
    assert not opened.page.is_visible(ffn) and not opened.page.is_visible(layer)
    opened.page.click(f"{tree} details[data-c='encoder'] > summary")
    assert opened.page.is_visible(ffn)  # the layer kept its state
    # each component shows its inclusive share; the layers' add up to the encoder's
    shares = opened.eval(f"""Object.fromEntries([...document.querySelectorAll("{tree} [data-c]")].map(n =>
        [n.dataset.c, parseFloat(n.querySelector('.chead .heat').textContent)]))""")
    assert sum(shares[f"encoder/layers.{i}"] for i in range(LAYERS)) == pytest.approx(shares["encoder"], abs=0.2)
    kinds = opened.eval("[...document.querySelectorAll('#kinds-by-layer tbody tr')].map(r => [...r.cells].map(c => c.textContent))")
    assert ["linalg.matmul", "encoder/layers.*/ffn"] == kinds[0][:2] or ["linalg.matmul", "encoder/layers.*/attention"] == kinds[0][:2]
    assert all(row[4] == str(LAYERS) for row in kinds if row[0] == "linalg.matmul")
    opened.check_clean()

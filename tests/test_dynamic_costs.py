"""Dynamic shapes: FLOPs and bytes from the sizes the profiled run had, and lower bounds marked.

``tests/data/dynamic.mlir`` multiplies a ``?x256`` matrix by a ``256x128`` one and takes the exp of the
product (one dispatch: its rows are fixed by the input the run is given), then scales as many rows of
the first matrix as a tensor *value* says (a second dispatch whose size only the data fixes). Profiled
for real with two row counts on llvm-cpu, where the hooked call's push constants make the second exact
too, and on Vulkan (lavapipe), where no hook runs and its cost stays a lower bound, marked everywhere.
"""

from __future__ import annotations

import io
import json

import pytest
from lxml import html as lxml_html
from rich.console import Console

from tests.conftest import REPO, run_profile
from tracelink.compile import CompileOptions
from tracelink.aggregate.utilization import LOWER_BOUND_STEP
from tracelink.report import build_report
from tracelink.report.json_output import profile_document
from tracelink.report.summary import print_summary

DYNAMIC = REPO / "tests" / "data" / "dynamic.mlir"
F32 = 4


SCALED_ROWS = 50  # the rows the tensor value picks


def inputs_of(rows: int) -> list[str]:
    return [f"{rows}x256xf32=0.01", "256x128xf32=0.02", f"i64={SCALED_ROWS}"]


@pytest.fixture(scope="module", params=[384, 100])
def dynamic(request, tmp_path_factory):
    rows = request.param
    return rows, run_profile(DYNAMIC, tmp_path_factory.mktemp("dynamic") / "out", repetitions=5, inputs=inputs_of(rows))


@pytest.fixture(scope="module")
def on_vulkan(tmp_path_factory):
    return run_profile(DYNAMIC, tmp_path_factory.mktemp("dynamic_vulkan") / "out", repetitions=3, inputs=inputs_of(100),
                       compile=CompileOptions(device="vulkan"))


def site(profile, word: str):
    rows = profile.call_sites[profile.call_sites["export"].str.contains(word)]
    assert len(rows) == 1, profile.call_sites["export"].tolist()
    return rows.iloc[0]


def test_runtime_sizes_give_the_hand_counted_costs(dynamic):
    rows, profile = dynamic
    matmul = site(profile, "matmul")
    # a multiply-add per (row, column, k) and an exp per output element; reads both matrices, writes one
    assert matmul["flops"] == 2 * rows * 256 * 128 + rows * 128
    assert matmul["bytes"] == F32 * (rows * 256 + 256 * 128 + rows * 128)
    assert not matmul["lower_bound"] and matmul["verdict"] != ""
    assert matmul["gflops_s"] == pytest.approx(matmul["flops"] / matmul["median_ns"])
    line = profile.source_lines.set_index("line").loc[9]  # the matmul's line gets its FLOPs, exact
    assert not line["lower_bound"] and line["flops"] > 0


def test_a_size_only_data_fixes_comes_from_the_run(dynamic):
    rows, profile = dynamic
    scaled = site(profile, "elementwise")
    # a multiply and an add per element of the rows the data picks; its operand is the whole first
    # matrix (the dispatch loads the rows from it), its result those rows
    assert scaled["flops"] == 2 * SCALED_ROWS * 256
    assert scaled["bytes"] == F32 * (rows * 256 + SCALED_ROWS * 256)
    assert not scaled["lower_bound"] and scaled["verdict"] != ""
    assert profile.summary["runtime_sizes"]["seconds"] > 0 and "failure" not in profile.summary["runtime_sizes"]


def test_a_size_no_hook_fixes_is_a_lower_bound_with_no_verdict(on_vulkan):
    profile = on_vulkan
    scaled = site(profile, "elementwise")
    assert scaled["lower_bound"] and scaled["verdict"] == "" and scaled["next_step"] == LOWER_BOUND_STEP
    lines = profile.source_lines.set_index("line")
    for line in (19, 22, 23):  # the scaling op and its body's multiply and add
        assert lines.loc[line, "lower_bound"] and lines.loc[line, "verdict"] == "", lines.loc[line]
    # marked in every table: the printed dispatches, the report's dispatch table, --json, the trace
    printed = io.StringIO()
    print_summary(profile, Console(file=printed, width=240))
    row = next(text for text in printed.getvalue().splitlines() if "elementwise" in text)
    assert "≥" in row
    matmul_row = next(text for text in printed.getvalue().splitlines() if "matmul" in text and "│" in text)
    assert "≥" not in matmul_row
    page = lxml_html.fromstring(build_report(profile).read_text())
    cells = [cell.text_content() for cell in page.xpath(f"//tr[@id='cs-{int(scaled['call_site'])}']/td")]
    assert sum(text.startswith("≥") for text in cells) == 3, cells  # GFLOP/s, GB/s, % of peak
    assert not any(cell.text_content().startswith("≥") for cell in page.xpath(f"//tr[@id='cs-{int(site(profile, 'matmul')['call_site'])}']/td"))
    document = profile_document(profile)
    judged = {row["call_site"]: row for row in document["hottest_dispatches"]}
    assert judged[int(scaled["call_site"])]["lower_bound"] and judged[int(scaled["call_site"])]["verdict"] == ""
    assert not judged[int(site(profile, "matmul")["call_site"])]["lower_bound"]
    trace = json.loads((profile.directory / "trace.json").read_text())
    flagged = {event["args"]["call_site"] for event in trace["traceEvents"] if event.get("cat") == "dispatch" and event["args"].get("rates_are_lower_bounds")}
    assert flagged == {int(scaled["call_site"])}


LLAMA_PREFILL = """
import torch
import transformers
from pathlib import Path
from iree.compiler import ir
from iree.compiler.extras import fx_importer
from tracelink.compile.frontends.torch_export import decomposition_table
from tracelink.compile.frontends.torch_parameters import ParameterArchive

torch.manual_seed(0)
config = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=256, intermediate_size=512, num_attention_heads=4,
                                  num_key_value_heads=2, vocab_size=512, max_position_embeddings=128)


class Prefill(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = transformers.LlamaForCausalLM(config).eval()

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


sequence = torch.export.Dim("sequence", min=2, max=64)
program = torch.export.export(Prefill(), (torch.zeros(1, 16, dtype=torch.long),), dynamic_shapes={"ids": {1: sequence}})
archive = ParameterArchive()
importer = fx_importer.FxImporter(context=ir.Context(), hooks=archive.hooks())
importer.import_program(program.run_decompositions(decomposition_table((), "llama")), func_name="prefill")
Path("prefill.mlir").write_text(importer.module.operation.get_asm(enable_debug_info=True))
archive.write(Path("prefill.irpa"))
"""


def test_a_prefill_imported_from_torch_costs_its_sequence_exactly(tmp_path):
    # IREE's ABI wraps a torch program's function in an `$async` body that holds its dispatches: the run's
    # input shape must reach them there (issue 33: every projection of a paged LLaMA read as a lower bound)
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", LLAMA_PREFILL], cwd=tmp_path, check=True, capture_output=True, timeout=300)
    tokens = 32
    profile = run_profile(tmp_path / "prefill.mlir", tmp_path / "out", function="prefill", inputs=[f"1x{tokens}xi64=1"],
                          parameters=[f"model={tmp_path / 'prefill.irpa'}"], repetitions=2)
    run = profile.call_sites[profile.call_sites["phase"] == "run"]
    assert not run["lower_bound"].any()
    projections = run[run["export"].str.endswith("matmul_1xDx256x256_f32")]
    assert len(projections) == 2  # the attention's query and output projections
    query, output = projections["flops"]
    assert query == 2 * tokens * 256 * 256
    assert output == 2 * tokens * 256 * 256 + tokens * 256  # the residual add fused into it


def test_without_the_hooked_call_a_data_fixed_size_stays_a_lower_bound(tmp_path):
    profile = run_profile(DYNAMIC, tmp_path / "out", repetitions=2, inputs=inputs_of(100), hooked_sizes=False)
    assert site(profile, "elementwise")["lower_bound"] and not site(profile, "matmul")["lower_bound"]
    assert profile.summary["runtime_sizes"] is None and not (tmp_path / "out" / "artifacts" / "sizes").exists()


CONVERT = """#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%a: tensor<?x256xf32>, %b: tensor<256x256xf32>) -> tensor<?x256xf16> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %m = tensor.dim %a, %c0 : tensor<?x256xf32>
  %e = tensor.empty(%m) : tensor<?x256xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<?x256xf32>) -> tensor<?x256xf32> loc("model.py":10:1)
  %p = linalg.matmul ins(%a, %b : tensor<?x256xf32>, tensor<256x256xf32>) outs(%z : tensor<?x256xf32>) -> tensor<?x256xf32> loc("model.py":10:1)
  %e2 = tensor.empty(%m) : tensor<?x256xf16>
  %h = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%p : tensor<?x256xf32>) outs(%e2 : tensor<?x256xf16>) {
  ^bb0(%x: f32, %o: f16):
    %t = arith.truncf %x : f32 to f16 loc("model.py":11:1)
    linalg.yield %t : f16
  } -> tensor<?x256xf16> loc("model.py":11:1)
  return %h : tensor<?x256xf16>
}
"""


def test_a_fused_conversion_gets_its_time_at_the_bandwidth(tmp_path):
    # IREE fuses the f32 -> f16 conversion (line 11) into the matmul's dispatch (line 10). Each line gets
    # its time at the roofs, the larger of its FLOPs over the compute peak and its bytes over the
    # bandwidth at the run's rows (its bytes: what it loads from the dispatch's operands and what the
    # dispatch stores of its results): the matmul loads both matrices (its product stays in the
    # dispatch), the conversion computes nothing and writes the f16 result. The dispatch's median beyond
    # those is split by the work estimate: per row and column, the fill 1, the matmul 256 x (its multiply,
    # its add and itself), the conversion 2 (its truncf and itself)
    rows = 100
    (tmp_path / "convert.mlir").write_text(CONVERT)
    profile = run_profile(tmp_path / "convert.mlir", tmp_path / "out", inputs=[f"{rows}x256xf32=0.1", "256x256xf32=0.01"], repetitions=3)
    assert len(profile.call_sites) == 1
    machine, site = profile.summary["machine"], profile.call_sites.iloc[0]
    matmul_ns = max(2 * rows * 256 * 256 / machine["peak_gflops"], F32 * (rows * 256 + 256 * 256) / machine["peak_gbps"])
    convert_ns = 2 * rows * 256 / machine["peak_gbps"]
    slack = max(site["median_ns"] - matmul_ns - convert_ns, 0.0)
    share = (convert_ns + 2 / (1 + 3 * 256 + 2) * slack) / (matmul_ns + convert_ns + slack)
    lines = profile.source_lines.set_index("line")
    assert lines.loc[11, "total_ns"] == pytest.approx(site["total_ns"] * share, rel=1e-6)
    assert lines.loc[10, "total_ns"] + lines.loc[11, "total_ns"] == pytest.approx(site["total_ns"])
    # the iteration-space estimate alone gave it 2 / 771 of the dispatch; its store takes more at the bandwidth
    assert lines.loc[11, "total_ns"] > 2 / 771 * site["total_ns"]

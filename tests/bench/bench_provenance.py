"""Benchmark: building the provenance graph of large generated programs.

Generates an MLP-like program of N layers (matmul, bias and ReLU fused into it, each op located by a
name and a three-frame Python call stack), compiles it with the real iree-compile and its dumps, then
times reading the input program and `build_provenance`. Printed: call sites, source ops, graph size, and the build time as a
ratio to the time the MLIR bindings take to parse the dumps it reads (the baseline, same run).
Targets: a 440-call-site / ~4,000-op program in ≤ 2 s, a 5,000-call-site program in ≤ 15 s.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import iree.compiler.dialects.linalg  # noqa: E402,F401  (the pipeline loads it while the compiler runs)

from tracelink.compile import CompileOptions, compile_flags  # noqa: E402
from tracelink.provenance.build import build_provenance, phase_dump  # noqa: E402
from tracelink.ir_utils import new_context, parse_file  # noqa: E402
from tracelink.provenance.program import read_input_program  # noqa: E402
from tracelink.tools import tool_path  # noqa: E402

SIZES = ((440, 2.0), (5000, 15.0))  # call sites, target seconds
WIDTH = 32


def layer(index: int, value: str) -> tuple[str, str]:
    """One layer's ops (matmul + bias + relu, fused by IREE into one dispatch) and its result name."""
    stack = f'callsite("model.py":{20 + index % 7}:9 at callsite("model.py":{100 + index}:13 at "train.py":5:1))'
    loc = lambda what: f'loc("layers.{index}.{what}"({stack}))'  # noqa: E731
    return (
        f"""    %e{index} = tensor.empty() : tensor<8x{WIDTH}xf32> {loc("fc")}
    %f{index} = linalg.fill ins(%zero : f32) outs(%e{index} : tensor<8x{WIDTH}xf32>) -> tensor<8x{WIDTH}xf32> {loc("fc")}
    %m{index} = linalg.matmul ins({value}, %w : tensor<8x{WIDTH}xf32>, tensor<{WIDTH}x{WIDTH}xf32>) outs(%f{index} : tensor<8x{WIDTH}xf32>) -> tensor<8x{WIDTH}xf32> {loc("fc")}
    %r{index} = linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}} ins(%m{index} : tensor<8x{WIDTH}xf32>) outs(%e{index} : tensor<8x{WIDTH}xf32>) {{
    ^bb0(%in: f32, %out: f32):
      %b = arith.addf %in, %bias : f32 {loc("bias")}
      %y = arith.maximumf %b, %zero : f32 {loc("relu")}
      linalg.yield %y : f32
    }} -> tensor<8x{WIDTH}xf32> {loc("relu")}
""",
        f"%r{index}",
    )


def program(layers: int) -> str:
    body, value = [], "%x"
    for index in range(layers):
        text, value = layer(index, value)
        body.append(text)
    return (
        "#id = affine_map<(d0, d1) -> (d0, d1)>\n"
        f"func.func @main(%x: tensor<8x{WIDTH}xf32>, %w: tensor<{WIDTH}x{WIDTH}xf32>, %bias: f32) -> tensor<8x{WIDTH}xf32> {{\n"
        "    %zero = arith.constant 0.0 : f32\n" + "".join(body) + f"    return {value} : tensor<8x{WIDTH}xf32>\n}}\n"
    )


def main() -> int:
    failed = False
    for layers, target in SIZES:
        with tempfile.TemporaryDirectory() as work:
            source = Path(work) / f"mlp_{layers}.mlir"
            source.write_text(program(layers))
            artifacts = Path(work) / "artifacts"
            artifacts.mkdir()
            started = time.perf_counter()
            command = [tool_path("iree-compile"), str(source), "-o", str(artifacts / "app.vmfb"), *compile_flags(CompileOptions(), artifacts)]
            subprocess.run(command, check=True, capture_output=True)
            compile_s = time.perf_counter() - started
            started = time.perf_counter()
            context = new_context()
            for phase in ("input", "hal", "dispatch-creation", "flow"):
                parse_file(phase_dump(artifacts / "phases", phase), context)
            parse_file(source, context)
            parse_s = time.perf_counter() - started
            started = time.perf_counter()
            provenance = build_provenance(read_input_program(source), artifacts, "main")
            build_s = time.perf_counter() - started
            graph = provenance.graph
            sites = sum(1 for s in provenance.call_sites if s.phase == "run")
            ops = sum(1 for _, d in graph.nodes(data=True) if d.get("kind") == "source_op")
            verdict = "ok" if build_s <= target else "OVER TARGET"
            failed |= build_s > target
            print(
                f"{layers} layers: {sites} call sites, {ops} source ops, graph {graph.number_of_nodes()} nodes / {graph.number_of_edges()} edges; "
                f"compile {compile_s:.1f} s; provenance {build_s:.2f} s = {build_s / parse_s:.2f}x parsing its dumps ({parse_s:.2f} s); "
                f"target {target:g} s: {verdict}",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

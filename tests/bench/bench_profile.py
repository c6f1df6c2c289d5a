"""Benchmark: `tracelink profile` against bare iree-compile + iree-benchmark-module, same run.

For every example and shared workload, runs the `tracelink profile` command (as a user does: its
start-up, report and all) and the bare tools doing the same compile and the same repetitions,
for a few rounds (which of the two runs first alternates from round to round), and prints the ratio of
their wall times (target ≤ 1.3×) and of their CPU times as tracelink states every speedup: the geometric
mean of the rounds' paired ratios, with its 95 % interval (tracelink.aggregate.speedup), beside the
medians of each. Paired rounds, because on this shared VM the wall time of one identical compile varies
up to 3× and drifts over minutes: a slower stretch slows both runs of its round. Then the same race on a program of 400+ call sites: a 30-layer BERT
encoder (MiniLM's width, built from transformers' config with seeded weights, exported once by
`tracelink profile model.py:make`), profiled from its exported MLIR and parameter archive, with
tracelink's own timing of each stage. Last, the time to build the provenance graph of the largest workload.
"""

from __future__ import annotations

import compileall
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.conftest import WORKLOAD_RUNS, WORKLOADS  # noqa: E402
from tracelink.aggregate.speedup import speedup_of  # noqa: E402
from tracelink.iree_tools import benchmark_command  # noqa: E402
from tracelink.compile import TARGET_FLAGS  # noqa: E402
from tracelink.provenance.build import build_provenance  # noqa: E402
from tracelink.provenance.program import read_input_program  # noqa: E402
from tracelink.tools import tool_path  # noqa: E402

REPETITIONS = 10
ROUNDS = 3
BIG_ROUNDS = 5  # the 400+ call-site program's race, the one the 1.3x target is read from
PROGRAMS = {
    **{name: (REPO / "examples" / f"{name}.mlir", [], []) for name in ("mlp", "attention", "convnet")},
    **{name: (WORKLOADS / f"{name}.mlir", inputs, parameters) for name, (_, inputs, parameters) in WORKLOAD_RUNS.items()},
}


def timed(commands: list[list[str]]) -> tuple[float, float]:
    """Wall and CPU seconds (children's user + system) of running ``commands`` one after the other."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    for command in commands:
        subprocess.run(command, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


# A 400+ call-site program (issue 32's size): 30 BERT layers at MiniLM's width give 424 call sites.
ENCODER = """import torch
import transformers


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        config = transformers.BertConfig(num_hidden_layers=30, hidden_size=384, num_attention_heads=12, intermediate_size=1536)
        self.bert = transformers.BertModel(config).eval()

    def forward(self, ids):
        return self.bert(input_ids=ids).last_hidden_state


def make():
    return Encoder(), (torch.randint(0, 30000, (1, 128)),)
"""


def race(name: str, program: Path, inputs: list[str], parameters: list[str], work: Path, rounds: int = ROUNDS) -> list[dict]:
    """Print the wall and CPU ratios of `tracelink profile` to the bare tools over ``rounds`` paired rounds; each round's stage timings."""
    # tracelink's bytecode, as an installed copy has it (pip compiles a wheel's at install, Python an editable
    # one's on first use): where PYTHONDONTWRITEBYTECODE is set, as on the CI VM, every run would otherwise
    # compile its ~150 modules again (0.14 CPU-s, 0.2 s of the 424-call-site BERT's race)
    compileall.compile_dir(REPO / "tracelink", quiet=1)
    out = work / "out"
    traced_command = [str(Path(sys.executable).parent / "tracelink"), "profile", str(program), "-o", str(out),
                      f"--repetitions={REPETITIONS}", *(f"--input={i}" for i in inputs), *(f"--parameters={p}" for p in parameters)]
    timed([traced_command])  # first run: generates the inputs the bare run reuses
    function = json.loads((out / "profile.json").read_text())
    vmfb = work / "bare.vmfb"
    bare_commands = [
        [tool_path("iree-compile"), str(program), "-o", str(vmfb), *TARGET_FLAGS, "--iree-llvmcpu-target-cpu=host"],
        benchmark_command(vmfb, function["function"], function["inputs"], parameters, REPETITIONS + 1),
    ]
    traced, bare, stages = [], [], []
    for round_number in range(rounds):
        # each round runs both, the first of them alternating: a drift of the VM's speed then weighs on both sides alike
        for side in ("bare", "traced") if round_number % 2 == 0 else ("traced", "bare"):
            if side == "bare":
                bare.append(timed(bare_commands))
            else:
                traced.append(timed([traced_command]))
                stages.append(json.loads((out / "profile.json").read_text())["timings_s"])
    # tracelink's one statistic (tracelink.aggregate.speedup): the geometric mean of the rounds' paired ratios
    wall, wall_low, wall_high = speedup_of([t[0] for t in traced], [b[0] for b in bare])
    cpu, _, _ = speedup_of([t[1] for t in traced], [b[1] for b in bare])
    wall_t, wall_b = statistics.median(t[0] for t in traced), statistics.median(b[0] for b in bare)
    cpu_t, cpu_b = statistics.median(t[1] for t in traced), statistics.median(b[1] for b in bare)
    interval = f" [{wall_low:4.2f}, {wall_high:4.2f}]" if rounds > 1 else ""
    print(f"{name:32s} wall {wall:4.2f}x{interval} (target <= 1.3x; medians {wall_t:5.2f} s vs {wall_b:5.2f} s)   "
          f"cpu {cpu:4.2f}x ({cpu_t:5.2f} s vs {cpu_b:5.2f} s)", flush=True)
    return stages


def main() -> None:
    print(f"tracelink profile vs bare iree-compile + iree-benchmark-module ({REPETITIONS} repetitions + 1 warm-up), "
          f"{ROUNDS} paired rounds ({BIG_ROUNDS} for the 400+ call-site program), the first run of each alternating")
    for name, (program, inputs, parameters) in PROGRAMS.items():
        with tempfile.TemporaryDirectory() as work_dir:
            race(name, program, inputs, parameters, Path(work_dir))
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        (work / "model.py").write_text(ENCODER)
        subprocess.run([str(Path(sys.executable).parent / "tracelink"), "profile", f"{work / 'model.py'}:make", "-o", str(work / "exported"),
                        "--repetitions=1"], check=True, capture_output=True)
        artifacts = work / "exported" / "artifacts"
        exported = json.loads((work / "exported" / "profile.json").read_text())
        stages = race(f"bert 30 layers ({exported['coverage']['call_sites']} call sites)", artifacts / "exported.mlir",
                      exported["inputs"], [f"model={artifacts / 'parameters.irpa'}"], work, BIG_ROUNDS)
        print("  its stages (median s): " + ", ".join(f"{stage} {statistics.median(s[stage] for s in stages):.2f}" for stage in stages[0]))
    largest = WORKLOADS / "clip_text_toy_f32.mlir"
    function, inputs, parameters = WORKLOAD_RUNS["clip_text_toy_f32"]
    with tempfile.TemporaryDirectory() as work_dir:
        out = Path(work_dir) / "out"
        subprocess.run([str(Path(sys.executable).parent / "tracelink"), "profile", str(largest), "-o", str(out), "--repetitions=1",
                        *(f"--input={i}" for i in inputs), *(f"--parameters={p}" for p in parameters)], check=True, capture_output=True)
        source = read_input_program(largest.resolve())
        started = time.perf_counter()
        built = build_provenance(source, out / "artifacts", function)
        seconds = time.perf_counter() - started
    print(f"provenance graph of {largest.name} (40 call sites, the most of the workloads): "
          f"{built.graph.number_of_nodes()} nodes, {built.graph.number_of_edges()} edges in {seconds:.3f} s")


if __name__ == "__main__":
    main()

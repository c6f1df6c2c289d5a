"""Benchmark: a 1.1 B-parameter decoder from `transformers`' config, profiled from `model.py:make`.

The model has TinyLlama's shape (22 layers, hidden 2048, grouped-query attention, 32,000-token
vocabulary; random f32 weights, 4.4 GB, made here and never kept) and runs a 32-token prefill.
`tracelink profile` exports its weights into one parameter archive; printed are the stages' times,
the peak resident memory of the whole command (the machine has 24 GB), the files' sizes, and, as the
baseline measured in the same run, bare `iree-compile` + `iree-benchmark-module` on the exported
program and archive (the same compile and repetitions, without tracelink's dumps and profiling).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tracelink.iree_tools import benchmark_command  # noqa: E402
from tracelink.compile import TARGET_FLAGS  # noqa: E402
from tracelink.tools import tool_path  # noqa: E402

REPETITIONS = 3
MODEL = textwrap.dedent('''
    import torch
    import transformers as T


    class Decoder(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids).logits


    def make():
        torch.manual_seed(0)
        config = T.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                               num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, use_cache=False)
        model = T.LlamaForCausalLM(config).eval()
        model.requires_grad_(False)
        return Decoder(model), (torch.randint(0, 32000, (1, 32)),)
''')


def gib(size: float) -> str:
    return f"{size / 2**30:.2f} GiB"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench_llm_") as scratch:
        work = Path(scratch)
        (work / "llama1b.py").write_text(MODEL)
        out = work / "out"
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tracelink.commands.cli", "profile", f"{work / 'llama1b.py'}:make", "-o", str(out),
                        "--repetitions", str(REPETITIONS), "--compare", "none"],  # the weights held once: no eager run beside IREE's
                       check=True, capture_output=True, cwd=REPO)
        wall = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        artifacts = out / "artifacts"
        manifest = json.loads((artifacts / "manifest.json").read_text())
        stages = json.loads((out / "profile.json").read_text()).get("timings_s", {})
        export = manifest["export"]
        print(f"1.1 B-parameter Llama-shaped decoder (f32, 32 tokens, {REPETITIONS} repetitions + 1 warm-up), `tracelink profile model.py:make`:")
        print(f"  whole command {wall:.1f} s, peak resident {gib(peak)} of the machine's 24 GB")
        print(f"  export {export['seconds']:.1f} s (model from its config, torch.export, import, archive), "
              + ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in stages.items()))
        print(f"  weights {gib(export['parameter_bytes'])} in parameters.irpa ({gib((artifacts / 'parameters.irpa').stat().st_size)} on disk); "
              f"exported.mlir {(artifacts / 'exported.mlir').stat().st_size / 1e6:.1f} MB, app.vmfb {(artifacts / 'app.vmfb').stat().st_size / 1e6:.1f} MB")

        bare = work / "bare.vmfb"
        started = time.perf_counter()
        subprocess.run([tool_path("iree-compile"), str(artifacts / "exported.mlir"), "-o", str(bare), *TARGET_FLAGS, "--iree-llvmcpu-target-cpu=host"], check=True, capture_output=True)
        compiled = time.perf_counter() - started
        inputs = [f"@{path}" for path in sorted((artifacts / "inputs").glob("*.npy"))]
        command = benchmark_command(bare, "main", inputs, export["parameters"], REPETITIONS + 1)
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        ran = time.perf_counter() - started
        tracelink_tools = stages.get("compile", 0.0) + stages.get("run", 0.0)
        print(f"  baseline, bare tools on the same program and archive: iree-compile {compiled:.1f} s, iree-benchmark-module {ran:.1f} s; "
              f"tracelink's compile + run stages {tracelink_tools / (compiled + ran):.2f}x theirs, the whole command "
              f"{wall / (export['seconds'] + compiled + ran):.2f}x export + bare tools")


if __name__ == "__main__":
    main()

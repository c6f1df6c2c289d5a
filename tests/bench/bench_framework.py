"""Benchmark: IREE against PyTorch eager on five `transformers` models, before and after `tracelink tune`.

Each model is built from a seeded config (random weights, batch 1, f32; no download) in a `model.py`
written here, profiled by `tracelink profile model.py:make` (its eager reference on, as by default,
and torch.compile beside it where a C++ compiler is present), then tuned by `tracelink tune` with
`--budget`. tune's last race is the anchor: IREE's default build, the build tune hands over and eager
in alternating rounds on the same threads, each ratio the paired statistic with its 95 % interval. One
row per model: the three medians of that race, each IREE build against eager (above 1: IREE's build is
faster), torch.compile's time from the profile's own race, and the lines where the handed build still
loses by more than 1.5x. The target of issue 45: the handed build at least as fast as eager on all five.

Usage: .venv/bin/python tests/bench/bench_framework.py [--out DIR] [--budget 10m] [--models vit bert ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.vit_model import vit_source  # noqa: E402

WRAPPER = """
import torch
import transformers as T


class Model(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):
        return self.model(*args).last_hidden_state

"""
# make() of each model after the wrapper: its config, as issue 45 measured them
MODELS = {
    "bert": """
def make():
    torch.manual_seed(0)
    config = T.BertConfig(num_hidden_layers=4, hidden_size=256, intermediate_size=1024, num_attention_heads=4, vocab_size=1000)
    return Model(T.BertModel(config, add_pooling_layer=False).eval()), (torch.randint(0, 1000, (1, 128)),)
""",
    "clip_vision": """
def make():
    torch.manual_seed(0)
    config = T.CLIPVisionConfig(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                                image_size=224, patch_size=32)
    return Model(T.CLIPVisionModel(config).eval()), (torch.randn(1, 3, 224, 224),)
""",
    "mistral": """
def make():
    torch.manual_seed(0)
    config = T.MistralConfig(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256)
    return Model(T.MistralModel(config).eval()), (torch.randint(0, 1000, (1, 64)),)
""",
    "audio": """
def make():
    torch.manual_seed(0)
    config = T.Wav2Vec2Config(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                              do_stable_layer_norm=True, feat_extract_norm="layer")
    return Model(T.Wav2Vec2Model(config).eval()), (torch.randn(1, 16000),)
""",
}


def model_source(name: str) -> str:
    if name == "vit":
        return vit_source(192, 3, 6, 224)
    return WRAPPER + MODELS[name]


def tracelink(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelink.commands.cli", *args], capture_output=True, text=True, cwd=REPO)


def measure(name: str, out: Path, budget: str) -> dict:
    """Profile and tune one model; its row of the table (or the step that failed)."""
    where = out / name
    where.mkdir(parents=True, exist_ok=True)
    (where / "model.py").write_text(model_source(name))
    done = tracelink("profile", f"{where / 'model.py'}:make", "-o", str(where / "base"), "--force", "--compare", "eager,inductor")
    if done.returncode != 0:
        return {"model": name, "failed": "profile: " + done.stderr.strip().splitlines()[-1]}
    summary = json.loads((where / "base" / "profile.json").read_text())
    inductor = next((r for r in summary.get("references") or [] if r["name"] == "inductor" and r["status"] == "measured"), None)
    done = tracelink("tune", str(where / "base"), "--budget", budget, "--json")
    if done.returncode != 0:
        return {"model": name, "failed": "tune: " + done.stderr.strip().splitlines()[-1]}
    (where / "tune.log").write_text(done.stderr)
    anchor = json.loads(done.stdout)["reference"]
    if anchor is None or anchor["error"]:
        return {"model": name, "failed": f"anchor: {anchor and anchor['error']}"}
    default = anchor["default_vs_reference"]
    handed = anchor.get("handed_vs_reference", default)
    return {"model": name, "default_ms": default["tuned_ns"] / 1e6, "handed_ms": handed["tuned_ns"] / 1e6,
            "eager_ms": default["base_ns"] / 1e6, "default": default, "handed": handed,
            "inductor_ms": inductor["ns_per_call"] / 1e6 if inductor else None, "losing": anchor["losing_lines"],
            "rounds": default["rounds"]}


def against(row: dict) -> str:
    """An IREE build against eager: faster or slower, with the 95 % interval."""
    speedup, low, high = row["speedup"], row["ci_low"], row["ci_high"]
    if speedup >= 1:
        return f"{speedup:.2f}x faster [{low:.2f}, {high:.2f}]"
    return f"{1 / speedup:.2f}x slower [{1 / high:.2f}, {1 / low:.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench_framework")
    parser.add_argument("--budget", default="10m")
    parser.add_argument("--models", nargs="+", default=["vit", "bert", "clip_vision", "mistral", "audio"])
    args = parser.parse_args()
    rows = []
    for name in args.models:
        print(f"{name}: profiling and tuning (budget {args.budget})", flush=True)
        rows.append(measure(name, args.out, args.budget))
    print("\n| model | IREE default | tune's build | PyTorch eager | default vs eager | tune's build vs eager | torch.compile | lines still losing |")
    print("|---|---|---|---|---|---|---|---|")
    wins = 0
    for row in rows:
        if "failed" in row:
            print(f"| {row['model']} | failed: {row['failed']} |||||||")
            continue
        wins += row["handed"]["ci_high"] >= 1  # at least as fast: eager not significantly faster
        compiled = f"{row['inductor_ms']:.1f} ms" if row["inductor_ms"] else "–"
        print(f"| {row['model']} | {row['default_ms']:.1f} ms | {row['handed_ms']:.1f} ms | {row['eager_ms']:.1f} ms | "
              f"{against(row['default'])} | {against(row['handed'])} | {compiled} | {len(row['losing'])} |")
    print(f"\ntune's build at least as fast as eager (eager not significantly faster, {rows[0].get('rounds', '?')} "
          f"alternating rounds each): {wins} of {len(rows)} (target: all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

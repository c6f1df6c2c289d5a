"""Benchmark: IREE against PyTorch eager on five `transformers` models, before and after `tracelink tune`.

Each model is built from a seeded config (random weights, batch 1, f32; no download) in a `model.py`
written here, profiled by `tracelink profile model.py:make` (its eager reference on, as by default,
and torch.compile beside it where a C++ compiler is present), then tuned by `tracelink tune` with
`--budget`. tune's last race is the anchor: IREE's default build, the build tune hands over and eager
in alternating rounds on the same threads, each ratio the paired statistic with its 95 % interval. One
row per model: the three medians of that race, each IREE build against eager (above 1: IREE's build is
faster), torch.compile's time from the profile's own race, and the lines where the handed build still
loses by more than 1.5x. The target of issue 45: the handed build at least as fast as eager on all five.

tune's anchor race has 5 rounds, and it runs while the model's tuning has just ended. Once every model is
tuned, each handed build is raced against eager again (`--rounds`, default 15; 0: not), one model after
another in this one run: the second table, and the count of builds at least as fast as eager by it.
`--race-again` does only that, on the models already tuned in `--out`.

Usage: .venv/bin/python tests/bench/bench_framework.py [--out DIR] [--budget 10m] [--models vit bert ...]
                                                       [--rounds 15] [--race-again]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.vit_model import vit_source  # noqa: E402
from tracelink.profile_dir import files  # noqa: E402
from tracelink.profile_dir.profile import load_profile  # noqa: E402
from tracelink.tune.anchor import build_of, race_anchor  # noqa: E402

RACE_TIMEOUT_S = 600.0

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


def race_again(name: str, out: Path, rounds: int) -> dict:
    """The build tune handed over for ``name`` (in ``out``) against eager once more, in ``rounds``
    alternating rounds with IREE's default build: tune's anchor race again, with more rounds."""
    base = load_profile(out / name / "base")
    anchor = json.loads((base.directory / "tune" / "reference.json").read_text())
    after = Path(anchor["after_profile"]) / files.ARTIFACTS / files.VMFB
    handed = None if after.resolve() == (base.artifacts / files.VMFB).resolve() else build_of(base, after, RACE_TIMEOUT_S)
    again = race_anchor(base, handed, rounds, RACE_TIMEOUT_S, out / name / "race_again")
    if again is None or again.error:
        return {"model": name, "failed": f"race: {again and again.error}"}
    found = again.comparisons()
    handed_row = found.get("handed_vs_reference", found["default_vs_reference"])
    return {"model": name, "handed_ms": handed_row["tuned_ns"] / 1e6, "eager_ms": handed_row["base_ns"] / 1e6,
            "handed": handed_row, "rounds": handed_row["rounds"]}


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
    parser.add_argument("--rounds", type=int, default=15, help="rounds of the race again after all are tuned (0: none)")
    parser.add_argument("--race-again", action="store_true", help="only race again the models already tuned in --out")
    args = parser.parse_args()
    names = args.models
    if not args.race_again:
        rows = []
        for name in names:
            print(f"{name}: profiling and tuning (budget {args.budget})", flush=True)
            rows.append(measure(name, args.out, args.budget))
        print_table(["IREE default", "tune's build", "PyTorch eager", "default vs eager", "tune's build vs eager", "torch.compile",
                     "lines still losing"], rows,
                    lambda row: [f"{row['default_ms']:.1f} ms", f"{row['handed_ms']:.1f} ms", f"{row['eager_ms']:.1f} ms",
                                 against(row["default"]), against(row["handed"]),
                                 f"{row['inductor_ms']:.1f} ms" if row["inductor_ms"] else "–", str(len(row["losing"]))])
        print_wins(rows, "tune's anchor races")
        names = [row["model"] for row in rows if "failed" not in row]
    if args.rounds >= 2 and names:
        again = []
        for name in names:
            print(f"{name}: the handed build against eager again ({args.rounds} rounds)", flush=True)
            again.append(race_again(name, args.out, args.rounds))
        print_table(["tune's build", "PyTorch eager", "tune's build vs eager"], again,
                    lambda row: [f"{row['handed_ms']:.1f} ms", f"{row['eager_ms']:.1f} ms", against(row["handed"])])
        print_wins(again, "the race again, all models in this run")
    return 0


def print_table(columns: list[str], rows: list[dict], cells: Callable[[dict], list[str]]) -> None:
    """A markdown table, one row per model: its ``cells``, or the step that failed."""
    print("\n| model | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for row in rows:
        shown = [f"failed: {row['failed']}", *[""] * (len(columns) - 1)] if "failed" in row else cells(row)
        print(f"| {row['model']} | " + " | ".join(shown) + " |")


def print_wins(rows: list[dict], which: str) -> None:
    """How many handed builds are at least as fast as eager: eager not significantly faster."""
    raced = [row for row in rows if "failed" not in row]
    wins = sum(row["handed"]["ci_high"] >= 1 for row in raced)
    print(f"\ntune's build at least as fast as eager (eager not significantly faster; {which}, "
          f"{raced[0]['rounds'] if raced else '?'} alternating rounds each): {wins} of {len(rows)} (target: all)")


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: does the framework's own run, split per line from torch's profiler, agree with its blocks
timed alone?

A BERT from `transformers`' config (random weights, batch 1, f32) runs in eager through tracelink's
reference runner (:mod:`tracelink.collect.reference`): the race's plain timing gives the call, the
profiled calls the split, folded by module path into components and scaled to the call, as
`tracelink profile` does. Then one layer's attention and its MLP (intermediate and output) are timed
alone in eager on the layer's input shapes, as plainly as the call. Every measurement runs once per
round, the rounds one after the other, so a busier moment slows one round's measurements alike. Printed
per round and as the median over rounds, per block: its components' time (the scaled profile) over its
own time, which the issue asks to be within 25 %; and the lines' sum over the plain call (within 15 %).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import transformers  # noqa: E402

from tracelink.aggregate.reference import folded_lines, scale_to_call  # noqa: E402
from tracelink.collect.machine import machine_cores  # noqa: E402
from tracelink.collect.reference.race import timed_calls, warm_up  # noqa: E402
from tracelink.collect.reference.torch_eager import TorchRunner  # noqa: E402
from tests.test_reference import Encoder  # noqa: E402

CALLS, PROFILED, ROUNDS = 30, 5, 15


def main() -> None:
    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=4, hidden_size=256, intermediate_size=1024, num_attention_heads=4, vocab_size=1000)
    model = Encoder(transformers.BertModel(config).eval())
    ids = torch.randint(0, 1000, (1, 128))
    hidden = torch.randn(1, 128, 256)
    layer = model.model.encoder.layer[0]
    runners = {"call": TorchRunner(model, (ids,), machine_cores()), "attention": TorchRunner(layer.attention, (hidden,), machine_cores()),
               "intermediate": TorchRunner(layer.intermediate, (hidden,), machine_cores()),
               "output": TorchRunner(layer.output, (torch.randn(1, 128, 1024), hidden), machine_cores())}
    for runner in runners.values():
        warm_up(runner)
    ratios: dict[str, list[float]] = {name: [] for name in runners if name != "call"}
    # rounds: a busier moment slows every measurement of its round alike, so each round gives its own ratios
    for _ in range(ROUNDS):
        alone = {name: timed_calls(runner, CALLS) for name, runner in runners.items()}
        samples, profiled = runners["call"].profile(PROFILED)
        scale = scale_to_call(samples["self_ns"], alone["call"])
        covered = folded_lines(samples)["self_ns"].sum() * scale / alone["call"]
        for name in ratios:
            path = f"model/encoder/layer.0/{name}"
            inside = samples[(samples["component"] == path) | samples["component"].str.startswith(path + "/")]["self_ns"].sum() * scale
            ratios[name].append(inside / alone[name])
        print(f"round: call {alone['call'] / 1e6:.2f} ms (profiled {profiled / 1e6:.2f} ms), lines / call {covered:.3f}; "
              + ", ".join(f"{name} {ratios[name][-1]:.2f}" for name in ratios))
    for runner in runners.values():
        runner.close()
    for name, values in ratios.items():
        print(f"{name:13s} its lines / its own time, median of {ROUNDS} rounds: {statistics.median(values):.3f} (target 0.75-1.25)")


if __name__ == "__main__":
    main()

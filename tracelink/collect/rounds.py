"""Comparisons with honest variance: two builds run alternately for several rounds.

Iterations inside one run share that run's machine load, so their spread says nothing about how much
a second run of the same program would differ; a comparison of one run of each build against that
spread reports confident false speedups on a shared machine. Here each build runs once per round, in
ABBA order (so a drift of the load hits both equally), and each round contributes one number per
build: the median over its iterations. :mod:`tracelink.aggregate.speedup` turns those pairs into a speedup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from tracelink.iree_tools import benchmark_repetitions

T = TypeVar("T")


def alternate(runs: Sequence[Callable[[int], T]], rounds: int, started: Callable[[int], None] | None = None) -> list[list[T]]:
    """Call every run once per round, reversing the order every other round (ABBA); results per run.
    ``started`` is told each round's number as it starts (a progress display)."""
    results: list[list[T]] = [[] for _ in runs]
    for number in range(rounds):
        if started is not None:
            started(number)
        order = range(len(runs)) if number % 2 == 0 else reversed(range(len(runs)))
        for i in order:
            results[i].append(runs[i](number))
    return results


def time_program(vmfb: Path, function: str, inputs: Sequence[str], parameters: Sequence[str], repetitions: int,
                 timeout: float) -> float:
    """Median wall time (ns) of one call of the whole program over ``repetitions`` calls on local-task."""
    return float(np.median(benchmark_repetitions(vmfb, function, inputs, parameters, repetitions=repetitions, timeout=timeout)))

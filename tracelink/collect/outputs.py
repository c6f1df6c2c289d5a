"""A build's outputs on the profiled inputs, and whether they agree with another's: how the strategy
search tells a faster lowering from one that computes something else, and how the framework's own run
(:mod:`tracelink.collect.reference`) is checked to compute what IREE's build does."""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path

import numpy as np

from tracelink.atomic import make_directory
from tracelink.iree_tools import run_module_command
from tracelink.tools import run_checked


def outputs_agree(reference: list[np.ndarray], outputs: list[np.ndarray], tolerance: float,
                  against: str = "the default build") -> tuple[bool, str]:
    """Whether a build's outputs equal ``against``'s (``reference``) up to float reassociation, with the largest difference.

    The options reorder f32 sums (im2col, packing, ukernels), which changes results by rounding only:
    relative to a dot product's magnitude, a reassociated sum of K terms moves by about sqrt(K) x 2^-24
    (~1e-5 for K in the thousands) per layer, compounding over layers to a few 1e-4 at most. An
    option that computes in narrower types moves every product by 2^-9 (bf16) or 2^-12 (f16) relative,
    1e-3 to 1e-2 after a network. So the default tolerance is 1e-3 of the output's largest magnitude,
    elementwise; NaN or infinity where the default has a finite value fails."""
    if len(reference) != len(outputs):
        return False, f"{len(outputs)} outputs, {against} has {len(reference)}"
    worst = 0.0
    for index, (ref, out) in enumerate(zip(reference, outputs)):
        if ref.shape != out.shape:
            return False, f"output {index} has shape {out.shape}, {against}'s {ref.shape}"
        ref64, out64 = ref.astype(np.float64), out.astype(np.float64)
        finite = np.isfinite(ref64)
        if not np.array_equal(finite, np.isfinite(out64)) or not np.array_equal(ref64[~finite], out64[~finite]):
            return False, f"output {index}: NaN or infinity where {against} has none"
        scale = float(np.abs(ref64[finite]).max()) if finite.any() else 0.0
        difference = float(np.abs(ref64[finite] - out64[finite]).max()) if finite.any() else 0.0
        relative = difference / scale if scale > 0 else (0.0 if difference == 0 else math.inf)
        worst = max(worst, relative)
        if relative > tolerance:
            return False, (f"output {index} differs from {against}'s by {difference:.3g} "
                           f"({relative:.2g} of its largest magnitude {scale:.3g}; tolerance {tolerance:g})")
    return True, f"outputs agree with {against}'s ({worst:.2g} of the largest magnitude at most)"


def result_count(vmfb: Path, function: str, inputs: list[str], parameters: list[str], timeout: float) -> int:
    """How many results ``function`` returns: the ``result[i]`` headers of one run (elements not printed)."""
    done = _run(vmfb, function, inputs, parameters, ["--output_max_element_count=0"], timeout)
    return max(1, len(re.findall(r"^result\[\d+\]", done.stdout, flags=re.MULTILINE)))


def _run(vmfb: Path, function: str, inputs: list[str], parameters: list[str], extra: list[str],
         timeout: float) -> subprocess.CompletedProcess:
    command = run_module_command(vmfb, function, inputs, parameters, extra=extra)
    return run_checked(command, timeout, vmfb, "running the program")


def run_outputs(vmfb: Path, function: str, inputs: list[str], parameters: list[str], count: int, directory: Path,
                timeout: float) -> list[np.ndarray]:
    """The program's results on the profiled inputs, through .npy files in ``directory``."""
    make_directory(directory)
    paths = [directory / f"result{i}.npy" for i in range(count)]
    _run(vmfb, function, inputs, parameters, [f"--output=@{p}" for p in paths], timeout)
    return [np.load(p) for p in paths]

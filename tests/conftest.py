"""Shared test fixtures: paths to the examples and the shared workloads, and profiles built once."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from rich.console import Console

from tracelink.pipeline.options import ProfileOptions
from tracelink.pipeline import profile
from tracelink.profile_dir.profile import Profile

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SHARED = REPO.parent / "shared"
WORKLOADS = SHARED / "workloads"
OUTPUT = REPO / "tests" / "_output"
LIGHT_SQUEEZENET = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
WORKLOAD_RUNS = {  # program: function, inputs, parameters — as ../shared/workloads/README.md runs them
    "jax_flax_mnist_mlp_locs": ("main", [], []),
    "braggnn_torch": ("forward", ["1x1x11x11xf32=0.5"], []),
    "mnist_mlp_trained": ("predict", ["1x28x28x1xf32=0.5"], []),
    "clip_text_toy_f32": ("forward_bs4", ["4x17xi64=1"], [f"model={WORKLOADS / 'clip_text_toy_f32.irpa'}"]),
    "onnx_light_squeezenet_nodelocs": ("squeezenet_old", [], []),
    "linalg_squeezenet1_1_64x64": ("forward", ["1x3x64x64xf32=0.5"], []),
    "linalg_resnet18": ("forward", ["1x3x224x224xf32=0.5"], []),
}


def run_profile(program: Path, out: Path, **options) -> Profile:
    """Profile ``program`` for real (iree-compile, iree-benchmark-module) into ``out``; without the framework's
    own run unless ``compare`` asks for it (tests/test_reference.py and test_tune_reference.py are about it)."""
    options.setdefault("repetitions", 5)
    options.setdefault("compare", ("none",))
    return profile(program, out, ProfileOptions(**options), Console(quiet=True))


@pytest.fixture(scope="session")
def example_profiles(tmp_path_factory) -> dict[str, Profile]:
    """The three examples, each profiled once per test session."""
    base = tmp_path_factory.mktemp("examples")
    return {name: run_profile(EXAMPLES / f"{name}.mlir", base / name) for name in ("mlp", "attention", "convnet")}


@pytest.fixture(scope="session")
def real_squeezenet(tmp_path_factory) -> Callable[[], Profile]:
    """ONNX's light SqueezeNet (shipped with the onnx package) with seeded random weights
    (../shared/tools/materialize_weights.py, seed 0: its convolutions stay convolutions), profiled the first
    time it is called and shared by the session (its compile takes tens of seconds). A test that writes into
    the profile directory (tune) works on a copy."""

    @functools.cache
    def profiled() -> Profile:
        base = tmp_path_factory.mktemp("real_squeezenet")
        model = base / "squeezenet.onnx"
        subprocess.run([sys.executable, str(SHARED / "tools" / "materialize_weights.py"), str(LIGHT_SQUEEZENET), str(model), "0"],
                       check=True, capture_output=True, timeout=300)
        return run_profile(model, base / "profile", repetitions=3)

    return profiled

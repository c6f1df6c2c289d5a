"""Shared test fixtures: paths to the examples and the shared workloads, and profiles built once."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from tracelink.options import ProfileOptions
from tracelink.pipeline import profile
from tracelink.profile_dir import Profile

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SHARED = REPO.parent / "shared"
WORKLOADS = SHARED / "workloads"
OUTPUT = REPO / "tests" / "_output"


def run_profile(program: Path, out: Path, **options) -> Profile:
    """Profile ``program`` for real (iree-compile, iree-benchmark-module) into ``out``."""
    options.setdefault("repetitions", 5)
    return profile(program, out, ProfileOptions(**options), Console(quiet=True))


@pytest.fixture(scope="session")
def example_profiles(tmp_path_factory) -> dict[str, Profile]:
    """The three examples, each profiled once per test session."""
    base = tmp_path_factory.mktemp("examples")
    return {name: run_profile(EXAMPLES / f"{name}.mlir", base / name) for name in ("mlp", "attention", "convnet")}

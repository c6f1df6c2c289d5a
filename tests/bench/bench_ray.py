"""The strategy search on Ray: what a build and a race cost, and the model of the search's wall time on N nodes
built from them (docs/reference/tuning.md, "Tuning on a Ray cluster").

Profiles a program, runs `tracelink tune --ray` on a local runtime and reads the ``placement`` records of
``tune/records.jsonl``: every build's and race's seconds on its node. The model: the builds of a stage
run at once, one per CPU, and its race takes one whole node, so a stage costs ceil(builds / (N x C)) x
the build time plus the race time, and the search costs the sum over its stages (the tile search and
the per-line profiles run in the driver, outside the model). Printed as a table for N = 1, 2, 4, 8
nodes of C CPUs each, with the measured wall time of the search on this machine beside the model's.

    .venv/bin/python tests/bench/bench_ray.py [--program examples/convnet.mlir] [--cpus 2]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRACELINK = Path(sys.executable).parent / "tracelink"
CONFIG = """
[strategy]
only = ["im2col", "channels-last", "data-tiling", "ukernels"]
profile_top = 0
compose = false
"""


def stages(placements: list[dict]) -> list[tuple[int, float, float]]:
    """Per stage of the search: its builds, their mean seconds and its race's seconds (builds are
    assigned to the race that followed them)."""
    out, builds = [], []
    for record in placements:
        if record["what"] == "build":
            builds.append(record["seconds"])
        else:
            out.append((len(builds), sum(builds) / len(builds) if builds else 0.0, record["seconds"]))
            builds = []
    return out


def model_s(stage_costs: list[tuple[int, float, float]], nodes: int, cpus: int) -> float:
    """The model's wall time of the search on ``nodes`` nodes of ``cpus`` CPUs."""
    return sum(math.ceil(count / (nodes * cpus)) * build + race for count, build, race in stage_costs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", type=Path, default=REPO / "examples" / "convnet.mlir")
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tlbench-", dir="/tmp"))
    try:
        profile = work / "p"
        subprocess.run([str(TRACELINK), "profile", str(args.program), "-o", str(profile)], check=True, capture_output=True)
        (work / "tune.toml").write_text(CONFIG)
        start = time.monotonic()
        subprocess.run([str(TRACELINK), "tune", str(profile), "--ray", "--ray-cpus", str(args.cpus), "--ray-temp-dir",
                        str(work / "r"), "--config", str(work / "tune.toml"), "--trials", "1", "--top", "1", "--rounds", "0"],
                       check=True, capture_output=True)
        wall = time.monotonic() - start
        records = [json.loads(line) for line in (profile / "tune" / "records.jsonl").read_text().splitlines()]
        placements = [r for r in records if r["kind"] == "placement"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    costs = stages(placements)
    per_what = defaultdict(list)
    for record in placements:
        per_what[record["what"]].append(record["seconds"])
    print(f"program {args.program.name}, local runtime of {args.cpus} CPUs: tune's wall time {wall:.1f} s")
    for what, seconds in per_what.items():
        print(f"  {what}s: {len(seconds)}, {sum(seconds) / len(seconds):.2f} s each on average")
    for count, build, race in costs:
        print(f"  stage: {count} build(s) of {build:.2f} s, a race of {race:.2f} s")
    print("model of the strategy search's wall time (s):")
    for nodes in (1, 2, 4, 8):
        print(f"  {nodes} node(s) of {args.cpus} CPUs: {model_s(costs, nodes, args.cpus):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`make bench`: every benchmark script in this folder, one after the other, each printing its own
ratios against a baseline measured in the same run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ["bench_provenance.py", "bench_perturbation.py", "bench_profile.py", "bench_report.py", "bench_tracy.py", "bench_hook.py", "bench_tune.py", "bench_ray.py", "bench_compare.py", "bench_events.py", "bench_llm.py", "bench_machine.py", "bench_reference.py", "bench_framework.py", "zoo.py"]
# A benchmark's arguments, where it takes some: the zoo sweep's first 120 architectures (all of them is `make zoo`).
ARGUMENTS = {"zoo.py": ["--limit", "120"]}


def main() -> int:
    failed = []
    for name in BENCHMARKS:
        print(f"\n=== {name}", flush=True)
        if subprocess.run([sys.executable, str(HERE / name), *ARGUMENTS.get(name, [])], cwd=HERE.parents[1]).returncode != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

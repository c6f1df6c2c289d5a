"""`tracelink repro`: a folder that reproduces one dispatch call site on its own, to attach to an issue.

It holds the call site's standalone benchmark (the configured executable and a ``util.func`` marked
``iree.benchmark = "dispatch"`` that IREE dumped while compiling the profile), ``run.sh`` with the exact
``iree-compile`` and ``iree-benchmark-module`` commands that build and time it, and a README with what
the profile measured and the source ops and lines the dispatch maps to.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from tracelink.errors import TracelinkError
from tracelink.atomic import copy_atomic, make_directory, write_text_atomic
from tracelink.compile.benchmarks import ensure_benchmark_dumps
from tracelink.compile.targets import target_flags
from tracelink.profile_dir.claim import REPRO_HEADER, claim_output_directory, locked
from tracelink.profile_dir.profile import Profile, load_profile
from tracelink.report.fmt import ns, pct
from tracelink.iree_tools import BENCHMARK_TOOL, compile_command, module_command
from tracelink.profile_dir import files

BENCHMARK_FUNCTION = re.compile(r'util\.func\s+public\s+@("(?:[^"\\]|\\.)*"|[\w$.\-]+)\(.*iree\.benchmark\s*=\s*"dispatch"')
# A batch of dispatches per benchmark iteration long enough (~0.1 s) that timer and submit overheads vanish.
BATCH_NS = 1e8


def find_call_site(profile: Profile, target: str) -> int:
    """The call site ``target`` names: ``N`` / ``#N``, or ``file:line`` (the hottest call site fed by that line)."""
    sites = profile.call_sites
    if re.fullmatch(r"#?\d+", target):
        index = int(target.lstrip("#"))
        if index not in set(sites["call_site"].astype(int)):
            raise TracelinkError(f"{profile.directory}: no call site #{index} (call sites 0-{len(sites) - 1})")
        return index
    file, _, line = target.rpartition(":")
    if not file or not line.isdigit():
        raise TracelinkError(f"{target}: not a call site number or FILE:LINE")
    lines = profile.source_lines
    rows = lines[(lines["line"] == int(line)) & lines["file"].map(lambda path: str(path) == file or str(path).endswith(f"/{file}"))]
    candidates = {int(site) for ids in rows["call_site_ids"] for site in str(ids).split(";") if site}
    if not candidates:
        raise TracelinkError(f"{profile.directory}: no dispatch call site maps to {target}")
    timed = sites[sites["call_site"].astype(int).isin(candidates)].sort_values("total_ns", ascending=False, kind="stable")
    return int(timed["call_site"].iloc[0])


def benchmark_function(path: Path) -> str:
    """The name of the benchmark dump's dispatch wrapper (its ``util.func`` marked ``iree.benchmark``)."""
    for line in path.read_text().splitlines():
        match = BENCHMARK_FUNCTION.search(line)
        if match:
            return match.group(1).strip('"')
    raise TracelinkError(f"{path}: no benchmark function (util.func with iree.benchmark = \"dispatch\")")


def commands(function: str, target: dict, batch_size: int) -> list[list[str]]:
    """The compile and benchmark commands for the profile's ``target`` (its device, CPU or GPU chip), run from inside the repro folder."""
    device = target.get("device", "local-task")
    flags = target_flags(device, target.get("cpu", "host"), target.get("chip"), target.get("features"))
    return [
        compile_command("dispatch.mlir", "dispatch.vmfb", flags),
        module_command(BENCHMARK_TOOL, "dispatch.vmfb", function, device=device,
                       extra=[f"--batch_size={batch_size}", "--benchmark_repetitions=5"]),
    ]


def target_text(target: dict) -> str:
    """How the README names the target: backend, the CPU or chip compiled for, and the device (with its name on a GPU)."""
    backend = target.get("backend", "llvm-cpu")
    if backend == "llvm-cpu":
        return f"llvm-cpu, `--iree-llvmcpu-target-cpu={target.get('cpu', 'host')}`, {target.get('device', 'local-task')}"
    chip = f", chip `{target['chip']}`" if target.get("chip") else ""
    return f"{backend}{chip}, {target['device']} on {target.get('device_name', 'an unnamed device')}"


def run_script(steps: list[list[str]], site: int, directory: Path) -> str:
    """``run.sh``: the commands, run from the script's folder."""
    return "\n".join([
        "#!/bin/sh",
        f"# Reproduces dispatch call site #{site} of the profile in {directory}: build, then time it.",
        "set -e",
        'cd "$(dirname "$0")"',
        *(shlex.join(step) for step in steps),
        "",
    ])


def readme(profile: Profile, site: int, function: str, steps: list[list[str]]) -> str:
    """The README: what was measured, what the dispatch maps to, and how to run it."""
    row = profile.call_sites.set_index(profile.call_sites["call_site"].astype(int)).loc[site]
    export = profile.exports.set_index("export").loc[row["export"]]
    graph = profile.graph
    shares = profile.attribution
    ops = shares[shares["call_site"] == site].sort_values("fraction", ascending=False, kind="stable")
    op_rows = [f"| {graph.nodes[op]['label']} | {role} | {pct(fraction)} |" for op, role, fraction in zip(ops["op"], ops["role"], ops["fraction"])]
    lines = [line for line in str(row["source_lines"]).split(";") if line]
    summary = profile.summary
    shared = int(export["call_sites"]) > 1
    return "\n".join([
        f"{REPRO_HEADER}{site}: `{row['export']}`",
        "",
        f"From `{summary.get('model', summary['program'])}`, function `{summary['function']}`, profiled by tracelink "
        f"({summary['versions']['compiler']}, {target_text(summary['target'])}).",
        "",
        "## Measured in the program",
        "",
        "| executions | median | p10 | p90 | 95 % CI of the median | mean | share of dispatch time |",
        "|---|---|---|---|---|---|---|",
        f"| {int(row['count'])} | {ns(row['median_ns'])} | {ns(row['p10_ns'])} | {ns(row['p90_ns'])} | "
        f"{ns(row['ci95_low_ns'])}–{ns(row['ci95_high_ns'])} | {ns(row['mean_ns'])} | {pct(row['share'])} |",
        "",
        f"Workgroups {row['workgroups']}; root op `{row['root_op']}`; shapes `{export['shapes']}`;",
        f"lowering config `{export['lowering_config']}`.",
        "",
        "## Source",
        "",
        "| source op | role | share of the dispatch |",
        "|---|---|---|",
        *op_rows,
        "",
        "Source lines: " + (", ".join(f"`{line}`" for line in lines) if lines else "none (the ops have names only)."),
        "",
        "## Reproduce",
        "",
        "`sh run.sh` builds `dispatch.mlir` (IREE's standalone benchmark of this dispatch, with its configured",
        f"executable) and times `{function}`; `--batch_size` dispatches run per benchmark iteration and the times",
        "printed are per dispatch. The benchmark runs on buffers it allocates (contents undefined), not the program's data.",
        *(["", f"Its executable is shared by {int(export['call_sites'])} call sites; the benchmark runs it as IREE dumped it (first call site's workload)."] if shared else []),
        "",
        "```sh",
        *(shlex.join(step) for step in steps),
        "```",
        "",
    ])


def write_repro(profile: Profile, site: int, output: Path) -> Path:
    """Write the repro folder of call site ``site`` into ``output`` (an existing folder) and return it.

    Each file is written atomically: a full disk leaves no half-written file, and the error names it."""
    row = profile.call_sites.set_index(profile.call_sites["call_site"].astype(int)).loc[site]
    dump = profile.exports.set_index("export")["benchmark_file"].get(row["export"])
    if not isinstance(dump, str) or not dump:
        raise TracelinkError(f"{profile.directory}: no benchmark dump of {row['export']} (exports.csv benchmark_file)")
    source = profile.artifacts / dump
    ensure_benchmark_dumps(profile.artifacts, [dump])
    if not source.is_file():
        raise TracelinkError(f"{source}: IREE wrote no benchmark dump of {row['export']}")
    function = benchmark_function(source)
    steps = commands(function, profile.summary["target"], int(min(1000, max(1, BATCH_NS // max(float(row["median_ns"]), 1.0)))))
    copy_atomic(source, output / "dispatch.mlir")
    write_text_atomic(output / "run.sh", run_script(steps, site, profile.directory.resolve()), mode=0o777)
    write_text_atomic(output / "README.md", readme(profile, site, function, steps))
    return output


def run_repro_command(args: argparse.Namespace) -> int:
    if args.output is not None:  # the user's folder: written only when empty or a repro tracelink wrote
        profile = load_profile(args.profile)
        site = find_call_site(profile, args.target)
        print(write_repro(profile, site, claim_output_directory(args.output)))
        return 0
    with locked(args.profile, trees=("repro",)):
        profile = load_profile(args.profile)
        site = find_call_site(profile, args.target)
        folder = make_directory(args.profile / files.REPRO / f"call_site_{site}", inside=args.profile)
        print(write_repro(profile, site, folder))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("repro", help="write a standalone reproducer of one dispatch call site")
    parser.add_argument("profile", type=Path, help="profile directory written by 'tracelink profile'")
    parser.add_argument("target", help="a call site number (N or #N) or a source line FILE:LINE (its hottest call site)")
    parser.add_argument("-o", "--output", type=Path, help="folder to write: missing, empty or an earlier repro (default PROFILE/repro/call_site_N)")
    parser.set_defaults(handler=run_repro_command)

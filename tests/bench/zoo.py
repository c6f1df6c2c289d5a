"""`make zoo`: every `transformers` architecture with a base model, a causal LM, an image or an audio class,
built small from its config, through ``torch.export`` and then ``tracelink profile``.

Each architecture is one row of ``results.jsonl`` under ``--out``, made by :func:`sweep_one` (architecture,
directory) -> row, a plain function that runs the model in a subprocess of its own with a time and memory
limit, so a hang or an out-of-memory ends that model only. A rerun skips the architectures already in the file.
The table at the end counts what was tried, exported by torch and profiled by tracelink, and groups the
failures by cause, each with its one-line reason.

    .venv/bin/python tests/bench/zoo.py --out out/zoo [--only bert,vit] [--limit 120] [--jobs 1]
    .venv/bin/python tests/bench/zoo.py --out out/zoo_build --stage build   # the build alone: config, model, eager inputs
    .venv/bin/python tests/bench/zoo.py --out out/zoo --ray [--jobs 2]       # as Ray tasks on a local runtime
    .venv/bin/python tests/bench/zoo.py --out out/zoo --ray-address HOST:PORT  # on a cluster

With ``--ray`` or ``--ray-address`` each model is a Ray task (:func:`tracelink.pipeline.sweep.map_directories`):
its directory is written on its node and sent back to ``--out``; this directory's code goes to the nodes as
Ray's ``working_dir``, and every node needs the driver's tracelink, torch and transformers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from tracelink.tune.cluster import RayOptions

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

STAGES = ("build", "export", "profile")
RESULTS = "results.jsonl"
PROGRESS = "progress.json"  # in a model's directory: the stage it reached, and why it stopped
TIMEOUT_S = 420
MEMORY_GB = 10


@dataclass
class Row:
    """One architecture's sweep: how far it got and, where it stopped, why (one line)."""

    architecture: str
    model_class: str = ""
    exported: bool = False  # torch.export (tracelink's own export, strict then non-strict) succeeded
    profiled: bool = False  # `tracelink profile` of the model file wrote a profile
    failed_stage: str = ""  # build (config, model or an eager call), export, or profile; '' when it got through last_stage
    reason: str = ""  # the failure's one line
    not_tried: str = ""  # why the sweep cannot try the model here (a library it needs is not installed); not counted as tried
    last_stage: str = "profile"  # the last stage the sweep ran (--stage): a row of an earlier one is swept again for a later
    model_lines: int = 0  # rows of the profile's source lines in the model's own modeling_*.py
    hottest_line: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    profile_dir: str = ""


@dataclass(frozen=True)
class Limits:
    """A model's subprocess limits, and which tracelink it runs."""

    timeout_s: float = TIMEOUT_S
    memory_bytes: int = MEMORY_GB << 30
    # a directory holding a copy of the ``tracelink`` package to run instead of the installed one (a
    # commit's, from `git archive`), so that a long sweep is not measuring edits made while it runs
    tracelink_src: str = ""


def sweep_one(architecture: str, directory: Path, limits: Limits = Limits(), last_stage: str = "profile") -> Row:
    """Build ``architecture`` small, ``torch.export`` it and profile its model file, in one subprocess under ``limits``;
    the stages up to ``last_stage`` only."""
    from zoo_models import architectures

    directory.mkdir(parents=True, exist_ok=True)
    row = Row(architecture, architectures().get(architecture, ""), last_stage=last_stage)
    started = time.perf_counter()
    outcome = limited([sys.executable, str(Path(__file__).resolve()), "--one", architecture, str(directory), "--stage", last_stage],
                      directory / "sweep.log", limits)
    row.seconds["total"] = round(time.perf_counter() - started, 2)
    progress = read_json(directory / PROGRESS)
    row.seconds.update(progress.get("seconds", {}))
    row.exported = bool(progress.get("exported"))
    profile = directory / "profile"
    if not outcome and progress.get("not_tried"):
        row.not_tried = progress["not_tried"]
    elif not outcome and last_stage != "profile":
        pass  # it got through the stages it was asked for
    elif not outcome and (profile / "profile.json").is_file():
        row.profiled, row.profile_dir = True, str(profile)
        row.model_lines, row.hottest_line = model_lines(profile)
    else:
        row.failed_stage = progress.get("stage", "build")
        row.reason = progress.get("reason") or outcome or "no profile.json written"
    return row


def limited(command: list[str], log: Path, limits: Limits) -> str:
    """Run ``command`` (its output into ``log``) under the limits; '' when it exits 0, else its failure's one line."""
    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (limits.memory_bytes, limits.memory_bytes))

    with log.open("w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=log.parent, preexec_fn=limit_memory,
                                   start_new_session=True, env=stage_environment(limits))
        try:
            code = process.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the model's process and every tool it started
            process.wait()
            return f"timed out after {limits.timeout_s:.0f} s"
    if code == 0:
        return ""
    if code < 0:
        return f"killed by {signal.Signals(-code).name} (memory limit {limits.memory_bytes >> 30} GiB?)"
    return error_line(log.read_text(errors="replace"), code)


def stage_environment(limits: Limits) -> dict[str, str]:
    """The model subprocess's environment: unbuffered output (a killed one's log ends where it stopped), and the tracelink it runs."""
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if limits.tracelink_src:  # ahead of the editable install's finder, which Python consults after the path
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [limits.tracelink_src, environment.get("PYTHONPATH", "")]))
    return environment


# The last line of a Python traceback: the exception's type and message.
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(:|$)")


def error_line(text: str, code: int) -> str:
    """The one line that says why a stage failed: tracelink's error line, else a traceback's exception
    line (not what the interpreter printed at exit after it), else the log's last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("tracelink: error:")]
    if errors:
        return errors[-1].removeprefix("tracelink: error:").strip()
    raised = [line for line in lines if EXCEPTION_LINE.match(line)]
    return (raised or lines or [f"exit status {code}"])[-1][:400]


def model_lines(profile: Path) -> tuple[int, str]:
    """How many of the profile's source lines are in a ``modeling_*.py`` file, and the hottest of them."""
    import pandas as pd

    lines = pd.read_csv(profile / "source_lines.csv")
    own = lines[lines["file"].astype(str).str.contains(r"modeling_[^/]*\.py$", regex=True)]
    if own.empty:
        return 0, ""
    hottest = own.sort_values("user_self_ns", ascending=False).iloc[0]
    return len(own), f"{Path(str(hottest['file'])).name}:{hottest['line']}"


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def run_one(architecture: str, directory: Path, last_stage: str = "profile") -> int:
    """A model's subprocess: build it small and write its model file, ``torch.export`` it as tracelink does
    (the file loaded by :func:`tracelink.compile.frontends.load_entry`, as `tracelink profile` loads it),
    then run `tracelink profile` on the file, up to ``last_stage``. :data:`PROGRESS` says how far it got,
    rewritten as it goes, so a stage its limits kill is still named; the exit status is the last stage's."""
    from zoo_models import NotTried, architectures, write_model_file

    progress: dict[str, Any] = {"stage": "build", "exported": False, "seconds": {}}
    record = directory / PROGRESS
    record.write_text(json.dumps(progress))
    started = time.perf_counter()
    try:
        path = write_model_file(architecture, architectures()[architecture], directory, first_working)
        progress.update(stage="export", seconds={"build": round(time.perf_counter() - started, 2)})
        record.write_text(json.dumps(progress))
        if last_stage == "build":
            return 0
        from tracelink.compile.frontends import load_entry
        from tracelink.compile.frontends.torch_export import exported_program

        started = time.perf_counter()
        model = load_entry(f"{path}:make")
        exported_program(model.target, model.args, model.origin)
    except NotTried as why:
        progress["not_tried"] = str(why)
        record.write_text(json.dumps(progress))
        return 0
    except Exception as error:  # the sweep records any failure as its row's one line, its traceback in the log
        traceback.print_exc()
        progress["reason"] = one_line(error)
        record.write_text(json.dumps(progress))
        return 1
    progress["seconds"]["export"] = round(time.perf_counter() - started, 2)
    progress.update(stage="profile", exported=True)
    record.write_text(json.dumps(progress))
    if last_stage == "export":
        return 0
    from tracelink.commands.cli import main as tracelink

    started = time.perf_counter()
    status = tracelink(["profile", f"{path}:make", "-o", str(directory / "profile"), "--force", "--repetitions", "3"])
    progress["seconds"]["profile"] = round(time.perf_counter() - started, 2)
    record.write_text(json.dumps(progress))
    return status


def first_working(model: Any, candidates: Iterable[dict]) -> dict:
    """The first candidate input set the model runs on eagerly; the last candidate's error when none does."""
    import torch

    error: Exception = ValueError("no input set")
    for inputs in candidates:
        try:
            with torch.no_grad():
                model(**inputs)
            return inputs
        except Exception as failure:  # the next layout may fit
            print(f"inputs {shapes(inputs)} do not run: {one_line(failure)}", flush=True)
            error = failure
    raise RuntimeError(f"no input set runs eagerly: {one_line(error)}")


def shapes(inputs: dict) -> str:
    return ", ".join(f"{name} {list(getattr(value, 'shape', []))}" for name, value in inputs.items())


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}"[:400] if not str(error).startswith(type(error).__name__) else text[:400]


# Parts of a reason that differ between architectures failing the same way.
PATH = re.compile(r"(/[^\s:'\"()]+)+")
NUMBER = re.compile(r"\b\d+\b")
ADDRESS = re.compile(r"\b0x[0-9a-f]+\b")  # an object's address in a repr
SOURCE_LINE = re.compile(r"[\w.-]+\.py(:N)+")


def cause(reason: str) -> str:
    """A failure's cause for grouping: its reason without the model's path, file paths, source lines, numbers, addresses and the log's name."""
    text = re.sub(r"\(log: [^)]*\)", "", reason)
    text = re.sub(r"^\S*model\.py(:make)?: ", "", text)
    text = NUMBER.sub("N", ADDRESS.sub("0x…", PATH.sub(lambda match: Path(match.group(0)).name, text)))
    return SOURCE_LINE.sub("<line>", text).strip()[:120]


def table(rows: list[Row], wall_s: float, last_stage: str = "profile") -> str:
    """The sweep's one table, up to ``last_stage``: counts, then the failures grouped by stage and cause, then the
    architectures not tried and why."""
    untried = [row for row in rows if row.not_tried]
    rows = [row for row in rows if not row.not_tried]
    tried, exported = len(rows), sum(row.exported for row in rows)
    profiled = sum(row.profiled for row in rows)
    built = tried - sum(row.failed_stage == "build" for row in rows)
    percent = lambda part, whole: f"{100 * part / whole:.0f} %" if whole else "-"
    out = [f"architectures tried      {tried}" + (f"  ({len(untried)} more not tried: see below)" if untried else ""),
           f"built and ran eagerly    {built}  ({percent(built, tried)} of tried)"]
    if last_stage != "build":
        out.append(f"exported by torch        {exported}  ({percent(exported, tried)} of tried, {percent(exported, built)} of built)")
    if last_stage == "profile":
        out += [f"profiled by tracelink    {profiled}  ({percent(profiled, exported)} of exported)",
                f"with modeling_*.py lines {sum(row.model_lines > 0 for row in rows)}"]
    out.append(f"wall time                {wall_s / 60:.1f} min this run; "
               f"{sum(row.seconds.get('total', sum(row.seconds.values())) for row in rows + untried) / 60:.1f} min over all rows")
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in rows + untried:
        if row.failed_stage or row.not_tried:
            groups[(row.failed_stage or "not tried", cause(row.reason or row.not_tried))].append(row)
    for stage in (*STAGES, "not tried"):
        stage_groups = sorted(((key, members) for key, members in groups.items() if key[0] == stage), key=lambda item: -len(item[1]))
        if stage_groups:
            heading = stage if stage == "not tried" else f"failed at {stage}"
            out.append(f"\n{heading}: {sum(len(members) for _, members in stage_groups)}")
        for (_, why), members in stage_groups:
            out.append(f"  {len(members):3d}  {why}")
            out.append(f"       {', '.join(sorted(row.architecture for row in members))}")
    return "\n".join(out)


def done_to(row: Row, last_stage: str) -> bool:
    """Whether ``row`` needs no sweep up to ``last_stage``: it failed, was not tried, or got that far."""
    return bool(row.failed_stage or row.not_tried) or STAGES.index(row.last_stage) >= STAGES.index(last_stage)


def load_rows(path: Path) -> list[Row]:
    rows = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                fields = json.loads(line)
                rows[fields["architecture"]] = Row(**fields)
    return list(rows.values())


def chosen(only: str | None, limit: int | None) -> list[str]:
    """The architectures to sweep: ``--only``'s (comma-separated), else the zoo in :func:`zoo_models.sweep_order`, the first ``limit``."""
    from zoo_models import architectures, sweep_order

    known = architectures()
    if only:
        names = [name.strip() for name in only.split(",") if name.strip()]
        unknown = [name for name in names if name not in known]
        if unknown:
            raise SystemExit(f"zoo: unknown architecture(s): {', '.join(unknown)}")
        return names
    return sweep_order(list(known))[:limit]


def sweep(names: list[str], out: Path, jobs: int, limits: Limits, retry: tuple[str, ...] = (),
          ray: RayOptions | None = None, last_stage: str = "profile") -> list[Row]:
    """Sweep ``names`` not already in ``out/results.jsonl`` up to ``last_stage``, ``jobs`` at a time, appending each
    row as it ends; rows of ``names`` that failed at a stage of ``retry`` are dropped first and swept again (the other
    rows stay), and so are rows that got through an earlier last stage than this one; as Ray tasks on the runtime
    ``ray`` names when given."""
    results = out / RESULTS
    if retry:
        swept = set(names)
        kept = [row for row in load_rows(results) if row.failed_stage not in retry or row.architecture not in swept]
        results.write_text("".join(json.dumps(asdict(row)) + "\n" for row in kept))
    done = {row.architecture for row in load_rows(results) if done_to(row, last_stage)}
    todo = [name for name in names if name not in done]
    lock, ended = threading.Lock(), []

    def record(row: Row) -> None:
        with lock, results.open("a") as file:
            file.write(json.dumps(asdict(row)) + "\n")
            ended.append(row.architecture)
            verdict = ("profiled" if row.profiled else f"not tried: {row.not_tried}" if row.not_tried
                       else f"{row.failed_stage}: {row.reason[:150]}" if row.failed_stage else f"through {row.last_stage}")
            print(f"[{len(ended)}/{len(todo)}] {row.architecture}: {verdict}", flush=True)

    print(f"{len(names)} architectures, {len(names) - len(todo)} already in {results}", flush=True)
    if ray is None:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(lambda name: record(sweep_one(name, out / name, limits, last_stage)), todo))
    elif todo:
        import zoo  # by name, not as __main__: the nodes import it from their copy of this directory
        from tracelink.pipeline.sweep import map_directories

        def landed(row: Row) -> None:  # its profile was written on its node, and unpacked here
            row.profile_dir = str(out / row.architecture / "profile") if row.profiled else ""
            record(row)

        map_directories(partial(zoo.sweep_one, limits=limits, last_stage=last_stage), [(name, out / name) for name in todo],
                        replace(ray, working_dir=HERE), out / "ray", landed)
    return [row for row in load_rows(results) if row.architecture in set(names)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "out" / "zoo")
    parser.add_argument("--only", help="comma-separated architectures (model_type), e.g. bert,vit,whisper")
    parser.add_argument("--limit", type=int, help="the first N of the zoo in the sweep's fixed order")
    parser.add_argument("--jobs", type=int, default=1, help="models at once (with --ray: the local runtime's CPUs)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--ray", action="store_true", help="run the models as Ray tasks on a local runtime (loopback only)")
    where.add_argument("--ray-address", metavar="ADDRESS", help="run the models as Ray tasks on this Ray cluster")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds each model may take")
    parser.add_argument("--memory-gb", type=float, default=MEMORY_GB, help="each model's data limit (GiB, RLIMIT_DATA)")
    parser.add_argument("--retry", action="append", choices=STAGES, default=[], help="sweep again the rows that failed at this stage (repeatable)")
    parser.add_argument("--stage", choices=STAGES, default="profile", help="the last stage to run (build: the config, model and eager inputs alone)")
    parser.add_argument("--tracelink-src", type=Path, help="run the tracelink package under this directory, not the installed one")
    parser.add_argument("--one", nargs=2, metavar=("ARCHITECTURE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        return run_one(args.one[0], Path(args.one[1]), args.stage)
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    ray = None
    if args.ray or args.ray_address:
        from tracelink.tune.cluster import RayOptions

        ray = RayOptions(args.ray_address, cpus=max(1, args.jobs) if args.ray else None)
    rows = sweep(chosen(args.only, args.limit), args.out.resolve(), max(1, args.jobs), Limits(args.timeout, int(args.memory_gb * (1 << 30)),
                                                                                          str(args.tracelink_src.resolve()) if args.tracelink_src else ""), tuple(args.retry), ray, args.stage)
    print("\n" + table(rows, time.perf_counter() - started, args.stage))
    return 0


if __name__ == "__main__":
    sys.exit(main())

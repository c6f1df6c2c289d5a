"""Sweeps on Ray: a batch of `tracelink profile` runs (:func:`profile_all`), or any function that writes
a directory (:func:`map_directories`, e.g. the zoo bench's ``sweep_one(architecture, directory)``), as Ray
tasks, one item on one node each, on the same runtime `tune --ray` uses (:class:`~tracelink.tune.cluster.Cluster`).

Each task writes its directory in a scratch directory of its node, sends it back as a tar archive's bytes
through the object store, and the driver unpacks it where it asked: nothing assumes a shared
filesystem. A profile's files travel with its task the same way (:mod:`tracelink.tune.payload`): the
program (a ``model.py:make`` model's file), its ``--input @file`` and ``--parameters`` files and its
``--tuning-spec``. The node's copies of them then move into the profile's artifacts, and the paths the
profile records name the driver's places, so the profile stands on its own where the driver puts it
(`tracelink tune` and `diff` run it again). Code a swept function needs that the nodes do not have
installed (the zoo bench's modules) goes to them as Ray's ``working_dir``.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracelink.atomic import make_directory, remove_path, write_text_atomic
from tracelink.errors import TracelinkError
from tracelink.profile_dir import files
from tracelink.report.sources import SIGNED_KEYS
from tracelink.tune.cluster import Cluster, RayOptions
from tracelink.tune.payload import moved, pack, run_files, unpack

# `tracelink profile` options whose values name files a profile reads (the run's, and the spec)
INPUT, PARAMETERS, SPEC = "--input", "--parameters", "--tuning-spec"


@dataclass(frozen=True)
class ProfileJob:
    """One `tracelink profile PROGRAM ARGUMENTS... -o OUT`: ``out`` is where the driver writes it."""

    program: Path
    arguments: tuple[str, ...] = ()
    out: Path = Path("out")


@dataclass(frozen=True)
class ProfileRun:
    """What became of a :class:`ProfileJob`: the command's exit status, its last lines of output and
    the Ray node it ran on."""

    job: ProfileJob
    returncode: int
    output: str
    node: str


def _directory_task(function: Callable[[Any, Path], Any], item: Any, scratch: str | None) -> tuple[Any, bytes]:
    """On a node: ``function(item, directory)`` in a scratch directory, and the directory as a tar archive."""
    with tempfile.TemporaryDirectory(prefix="tracelink-sweep-", dir=scratch) as work:
        directory = Path(work) / "out"
        result = function(item, directory)
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w:gz") as tar:
            if directory.exists():
                tar.add(directory, arcname=".")
        return result, archive.getvalue()


def map_directories(function: Callable[[Any, Path], Any], items: Sequence[tuple[Any, Path]],
                    options: RayOptions = RayOptions(), scratch: Path = Path("out") / "ray",
                    done: Callable[[Any], None] | None = None) -> list[Any]:
    """``function(item, directory)`` for every ``(item, directory)`` as Ray tasks (a local runtime with its
    files under ``scratch`` unless ``options`` gives an address; the function's code that the nodes lack
    in its ``working_dir``); each directory written by the driver. Returns the results in order; ``done``
    is told each result as it arrives."""
    with Cluster(options, scratch) as cluster:
        import ray

        task = ray.remote(num_cpus=1)(_directory_task)
        pending = {task.remote(function, item, cluster.scratch()): index for index, (item, _) in enumerate(items)}
        results: list[Any] = [None] * len(items)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            index = pending.pop(ready[0])
            results[index], archive = ray.get(ready[0])
            _unpack(archive, items[index][1])
            if done is not None:
                done(results[index])
        return results


def _unpack(archive: bytes, directory: Path) -> None:
    """Write a task's directory where the driver asked (an earlier one there is replaced)."""
    if directory.exists():
        remove_path(directory, directory.parent)
    make_directory(directory)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(directory, filter="data")  # nothing outside it, no device or absolute link


def _profile(job: tuple[str, tuple[str, ...], dict[str, bytes], str], directory: Path) -> tuple[int, str, str]:
    """On a node: `tracelink profile` of the job's program into ``directory``, every file it reads a copy
    written here from the bytes it came with, kept in the profile (:func:`_keep_files`) for the driver's
    directory (the job's last item)."""
    import ray

    program, arguments, carried, out = job
    with tempfile.TemporaryDirectory(prefix="tracelink-program-") as work:
        copies = unpack(carried, Path(work))
        file, colon, entry = _entry(program)
        command = [sys.executable, "-m", "tracelink.commands.cli", "profile", f"{copies[file]}{colon}{entry}",
                   *_arguments_moved(arguments, copies), "-o", str(directory)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode == 0:
            _keep_files(copies, directory, Path(out))
        output = "\n".join((done.stdout + done.stderr).splitlines()[-5:])
        return done.returncode, output, ray.get_runtime_context().get_node_id()


def _keep_files(copies: dict[str, Path], directory: Path, out: Path) -> None:
    """Make the profile in ``directory`` stand on its own at ``out``, where the driver writes it: the node's
    copies of the files it read move into its artifacts (``inputs/<n>/<name>``, beside the inputs a run
    generates), and every path its summaries and manifests record, to a copy or into the directory,
    becomes the path at ``out`` (but for the signed source policy)."""
    kept = directory / files.ARTIFACTS / files.INPUTS
    renamed = {str(directory): str(out)}
    for copy in copies.values():
        place = make_directory(kept / copy.parent.name) / copy.name
        shutil.move(copy, place)
        renamed[str(copy)] = str(out / place.relative_to(directory))
    for path in [*directory.rglob(files.SUMMARY), *directory.rglob(files.MANIFEST)]:
        recorded = json.loads(path.read_text())
        # the source policy stays as the node's run signed it (the roots it allowed the report to read)
        kept = {key: value if key in SIGNED_KEYS else _renamed(value, renamed) for key, value in recorded.items()}
        write_text_atomic(path, json.dumps(kept, indent=2))


def _renamed(value: Any, renamed: dict[str, str]) -> Any:
    """``value`` with every path of ``renamed`` in its strings replaced (a path in a flag or an input value
    too), through lists and objects."""
    if isinstance(value, str):
        for old, new in renamed.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [_renamed(item, renamed) for item in value]
    if isinstance(value, dict):
        return {key: _renamed(item, renamed) for key, item in value.items()}
    return value


def _file_values(arguments: Sequence[str]) -> list[tuple[int, str, str]]:
    """Where the options naming files are: (index, option, value) of ``--input X``, ``--input=X`` and the
    like."""
    found = []
    for index, word in enumerate(arguments):
        option, equals, value = word.partition("=")
        if option in (INPUT, PARAMETERS, SPEC) and equals:
            found.append((index, option, value))
        elif word in (INPUT, PARAMETERS, SPEC) and index + 1 < len(arguments):
            found.append((index + 1, word, arguments[index + 1]))
    return found


def _files_read(program: str, arguments: Sequence[str]) -> list[str]:
    """The files a profile reads: its program file, then those its options name."""
    values = _file_values(arguments)
    inputs = [value for _, option, value in values if option == INPUT]
    parameters = [value for _, option, value in values if option == PARAMETERS]
    return [_entry(program)[0], *run_files(inputs, parameters), *(value for _, option, value in values if option == SPEC)]


def _arguments_moved(arguments: Sequence[str], copies: dict[str, Path]) -> list[str]:
    """``arguments`` with every file an option names replaced by the node's copy."""
    out = list(arguments)
    for index, _, value in _file_values(arguments):
        out[index] = out[index][: len(out[index]) - len(value)] + moved(value, copies)
    return out


def _entry(program: str) -> tuple[str, str, str]:
    """A program argument as (file, ":", entry) for ``model.py:make``, else (file, "", "")."""
    return program.rpartition(":") if ":" in Path(program).name else (program, "", "")


def profile_all(jobs: Sequence[ProfileJob], options: RayOptions = RayOptions(),
                scratch: Path = Path("out") / "ray") -> list[ProfileRun]:
    """Every job's `tracelink profile` as a Ray task, its profile directory written at ``job.out``."""
    items = []
    for job in jobs:
        paths = _files_read(str(job.program), job.arguments)
        missing = next((path for path in paths if not Path(path).is_file()), None)
        if missing is not None:
            raise TracelinkError(f"{missing}: no such file (read by the profile of {job.program})")
        items.append(((str(job.program), tuple(job.arguments), pack(paths), str(job.out.absolute())), job.out))
    results = map_directories(_profile, items, options, scratch)
    return [ProfileRun(job, *result) for job, result in zip(jobs, results)]

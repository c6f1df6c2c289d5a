"""Sweeps on Ray: a batch of `tracelink profile` runs (:func:`profile_all`), or any function that writes
a directory (:func:`map_directories`, e.g. the zoo bench's ``sweep_one(architecture, directory)``), as Ray
tasks, one item on one node each, on the same runtime `tune --ray` uses (:class:`~tracelink.tune.cluster.Cluster`).

Each task writes its directory in a scratch directory of its node, sends it back as a tar archive's bytes
through the object store, and the driver unpacks it where it asked: nothing assumes a shared
filesystem. A profile's program file travels with its task; its other files (``--input @file``,
``--parameters``) must be on every node at the same path.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracelink.atomic import make_directory, remove_path
from tracelink.errors import TracelinkError
from tracelink.tune.cluster import Cluster, RayOptions


@dataclass(frozen=True)
class ProfileJob:
    """One `tracelink profile PROGRAM ARGUMENTS... -o OUT`: ``out`` is where the driver writes it."""

    program: Path
    arguments: tuple[str, ...] = ()
    out: Path = Path("out")


@dataclass(frozen=True)
class ProfileRun:
    """What became of a :class:`ProfileJob`: the command's exit status and its last lines of output."""

    job: ProfileJob
    returncode: int
    output: str


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
    files under ``scratch`` unless ``options`` gives an address); each directory written by the driver.
    Returns the results in order; ``done`` is told each result as it arrives."""
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


def _profile(job: tuple[str, bytes, tuple[str, ...]], directory: Path) -> tuple[int, str]:
    """On a node: `tracelink profile` of the program's bytes into ``directory``."""
    name, program, arguments = job
    with tempfile.TemporaryDirectory(prefix="tracelink-program-") as work:
        file, colon, entry = _entry(name)
        copy = Path(work) / Path(file).name
        copy.write_bytes(program)
        command = [sys.executable, "-m", "tracelink.commands.cli", "profile", f"{copy}{colon}{entry}", *arguments, "-o", str(directory)]
        done = subprocess.run(command, capture_output=True, text=True)
        return done.returncode, "\n".join((done.stdout + done.stderr).splitlines()[-5:])


def _entry(program: str) -> tuple[str, str, str]:
    """A program argument as (file, ":", entry) for ``model.py:make``, else (file, "", "")."""
    return program.rpartition(":") if ":" in Path(program).name else (program, "", "")


def profile_all(jobs: Sequence[ProfileJob], options: RayOptions = RayOptions(),
                scratch: Path = Path("out") / "ray") -> list[ProfileRun]:
    """Every job's `tracelink profile` as a Ray task, its profile directory written at ``job.out``."""
    items = []
    for job in jobs:
        file = Path(_entry(str(job.program))[0])
        if not file.is_file():
            raise TracelinkError(f"{file}: no such program file")
        items.append(((str(job.program), file.read_bytes(), tuple(job.arguments)), job.out))
    results = map_directories(_profile, items, options, scratch)
    return [ProfileRun(job, code, output) for job, (code, output) in zip(jobs, results)]

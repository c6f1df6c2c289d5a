"""Tune's work as Ray tasks (:class:`RayWork`, over a :class:`~.cluster.Cluster`): the strategy search's builds
and races, and the tile search's candidate builds and timings (:mod:`~.measure`).

Every task is a :class:`Job`: a function run on a node in a scratch directory, the driver's files it reads
carried there as bytes through Ray's object store (:mod:`~.payload`), what it makes coming back as its
result, which the driver writes into its own directories (a resumed search finds the builds there), never
on a shared filesystem. Builds run anywhere, one per CPU; any other job (a race, a timing) takes a whole
node as a Ray resource (all of the node's :data:`~.cluster.RACE_RESOURCE`, of which each build holds a
sliver), so no build and no other race runs on its node meanwhile, its builds are timed side by side on
one machine, and races of other searches run on other nodes at once. Where and when each ran goes to the
record log (each search's own kinds of records: ``placement``, or ``tile_placement``); a task whose worker
or node died is recorded (``lost``) and submitted once more (Ray places it on any alive node where it
fits), and a second loss is the job's :class:`LostError`. What is decided (which build, which race, which
winner) stays in the driver.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracelink.profile_dir.tune_record import STRATEGY_WHERE, RecordLog
from tracelink.atomic import make_directory, remove_path, write_text_atomic
from tracelink.errors import TracelinkError, first_line
from tracelink.tune.cluster import RACE_RESOURCE, Cluster
from tracelink.tune.payload import moved, run_files, unpack
from tracelink.profile_dir import files

# A build holds this much of its node's race resource: builds share a node (one per CPU), a race waits
# until none runs there, and a build waits for the node's race to end.
BUILD_SHARE = 0.001
BUILD_OPTIONS = {"num_cpus": 1, "resources": {RACE_RESOURCE: BUILD_SHARE}, "max_retries": 0}
RACE_OPTIONS = {"num_cpus": 1, "resources": {RACE_RESOURCE: 1}, "max_retries": 0}


class LostError(TracelinkError):
    """A task lost twice (its worker or node died)."""


@dataclass(frozen=True)
class Job:
    """A task: ``function(work, copies, *arguments)`` on a node, ``copies`` the node's copy of each of the
    driver's ``files`` (under the task's scratch directory ``work``), its result a dict. A ``build`` (its
    ``what``) holds a CPU and a sliver of its node, any other job the whole node; on ``node`` only when one
    is given. ``names`` and ``stage`` go to its placement record."""

    what: str
    names: tuple[str, ...]
    function: Callable[..., dict]
    arguments: tuple = ()
    files: tuple[Path | str, ...] = ()  # as its arguments name them: a copy is found by the same text
    node: str | None = None
    stage: int = 0


@dataclass(frozen=True)
class BuildJob:
    """One build: ``program`` compiled with ``flags`` (the profiled build's) and ``extra``, into ``directory``."""

    name: str
    program: Path
    flags: list[str]
    extra: list[str]
    directory: Path
    timeout: float


def _node() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def node_task(function: Callable[..., dict], paths: list[str], contents: list, arguments: tuple,
              scratch: str | None) -> dict:
    """On a node: a :class:`Job`'s function on copies of its files; its result, with the node and when it ran."""
    import ray

    with tempfile.TemporaryDirectory(prefix="tracelink-task-", dir=scratch) as work:
        # references inside a list arrive as references
        copies = unpack(dict(zip(paths, ray.get(list(contents)))), Path(work))
        start, started = time.monotonic(), time.time()
        result = function(Path(work), copies, *arguments)
        return {**result, "node": _node(), "started": started, "seconds": time.monotonic() - start}


def compile_job(work: Path, copies: dict[str, Path], program: str, flags: list[str], extra: list[str], timeout: float,
                what: str, directory: str) -> dict:
    """On a node: compile the program's copy; the build's bytes and its log, or the compiler's error (naming
    the driver's program and ``directory``, not the node's copies)."""
    from tracelink.tune.spec import compile_variant

    source, build = copies[program], work / "build"
    result: dict = {}
    try:
        result["vmfb"] = compile_variant(source, flags, extra, build, timeout, what).read_bytes()
    except TracelinkError as error:
        result["error"] = first_line(error).replace(str(source), program).replace(str(build), directory)
    log = build / "compile.log"
    result["log"] = log.read_text(errors="replace").replace(str(source), program) if log.is_file() else ""
    return result


def race_job(work: Path, copies: dict[str, Path], vmfbs: list[str], function: str, inputs: list[str],
             parameters: list[str], calls: int, rounds: int, timeout: float) -> dict:
    """On a node: time the builds in alternating rounds (each its median per round), as the driver would."""
    from tracelink.collect.rounds import alternate, time_program

    inputs = [moved(value, copies) for value in inputs]
    parameters = [moved(value, copies) for value in parameters]
    runs = [lambda _, v=copies[vmfb]: time_program(v, function, inputs, parameters, calls, timeout) for vmfb in vmfbs]
    return {"times": alternate(runs, rounds)}


def _as_returned(_: Job, result: dict) -> dict:
    return result


class RayWork:
    """Jobs on ``cluster``; ``log`` gets where each ran and what was lost, as records of ``kinds`` (where
    and lost: the strategy search's unless a search says otherwise, :meth:`record_to`)."""

    def __init__(self, cluster: Cluster, log: RecordLog | None = None):
        import ray

        self.ray, self.cluster, self.log, self.kinds = ray, cluster, log, STRATEGY_WHERE
        self.nodes = cluster.racing_nodes()
        self.remote = ray.remote(node_task)
        self.status: Callable[[str], None] = lambda text: None
        self.done = 0  # builds finished
        self.shared: dict[tuple, object] = {}  # files put in the object store once

    def record_to(self, log: RecordLog, kinds: tuple[str, str]) -> None:
        """Record where the jobs ran and what was lost in ``log``, as its search's ``kinds`` of records."""
        self.log, self.kinds = log, kinds

    def run_all(self, jobs: list[Job], landed: Callable[[Job, dict], Any] = _as_returned) -> list:
        """Every job at once across the cluster; each one's result given to ``landed`` (which writes what it
        made or records its verdicts) before its placement is recorded; what ``landed`` returns, in order,
        or the :class:`LostError` of a job lost twice. An error a job raised itself is raised."""
        pending = {self.submit(job): (index, 1) for index, job in enumerate(jobs)}
        results: list = [None] * len(jobs)
        while pending:
            self._show([jobs[index] for index, _ in pending.values()])
            ready, _ = self.ray.wait(list(pending), num_returns=1)
            index, attempt = pending.pop(ready[0])
            job = jobs[index]
            try:
                result = self.ray.get(ready[0])
            except self.ray.exceptions.RayError as error:
                self._raise_task_error(error)
                if self._lost(job, error, attempt):
                    pending[self.submit(job)] = (index, attempt + 1)
                    continue
                results[index] = LostError(f"{job.what} of {', '.join(job.names)}: lost twice ({first_line(error)})")
            else:
                results[index] = landed(job, result)
                self._place(job, result)
            self.done += job.what == "build"
        self._show([])
        return results

    def run(self, job: Job, landed: Callable[[Job, dict], Any] = _as_returned) -> Any:
        """One job (:meth:`run_all`); lost twice, its :class:`LostError` is raised."""
        result = self.run_all([job], landed)[0]
        if isinstance(result, LostError):
            raise result
        return result

    def submit(self, job: Job):
        """The job as a Ray task, its files put in the object store (once each)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options = {**(BUILD_OPTIONS if job.what == "build" else RACE_OPTIONS), "name": f"{job.what}_task"}
        if job.node is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(job.node, soft=False)
        return self.remote.options(**options).remote(job.function, [str(path) for path in job.files],
                                                     [self._put(Path(path)) for path in job.files], job.arguments,
                                                     self.cluster.scratch())

    def build_all(self, jobs: list[BuildJob]) -> dict[str, Path | TracelinkError]:
        """The strategy search's builds at once across the cluster; each build's vmfb in its directory, or its error."""
        named = {job.name: job for job in jobs}
        tasks = [Job("build", (job.name,), compile_job, (str(job.program), job.flags, job.extra, job.timeout, job.name,
                                                         str(job.directory)), (job.program,)) for job in jobs]
        built = self.run_all(tasks, lambda task, result: self._landed(named[task.names[0]], result))
        return {job.name: result for job, result in zip(jobs, built)}

    def _landed(self, job: BuildJob, result: dict) -> Path | TracelinkError:
        """The build's bytes written into the driver's directory."""
        remove_path(job.directory, job.directory.parent)  # an earlier build's files must not be read as this one's
        make_directory(job.directory)
        write_text_atomic(job.directory / "compile.log", result["log"])
        if "error" in result:
            return TracelinkError(result["error"])
        vmfb = job.directory / files.VMFB
        vmfb.write_bytes(result["vmfb"])
        return vmfb

    def race(self, vmfbs: list[Path], function: str, inputs: list[str], parameters: list[str], calls: int, rounds: int,
             names: list[str], stage: int, settle: Callable[[list[list[float]]], object]) -> list[list[float]]:
        """Time ``vmfbs`` in alternating rounds on one whole node; per build, each round's time, given to
        ``settle`` (which records the verdicts) before the race's placement is recorded, so a resumed
        search that finds the placement finds the verdicts. A race lost twice raises :class:`LostError`."""
        def settled(_: Job, result: dict) -> list[list[float]]:
            settle(result["times"])
            return result["times"]

        carried = (*vmfbs, *run_files(inputs, parameters))
        return self.run(Job("race", tuple(names), race_job, ([str(vmfb) for vmfb in vmfbs], function, inputs, parameters,
                                                             calls, rounds, 600.0), carried, stage=stage), settled)

    def _put(self, path: Path):
        """A file's bytes in the object store, put once per content."""
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key not in self.shared:
            self.shared[key] = self.ray.put(path.read_bytes())
        return self.shared[key]

    def _raise_task_error(self, error: BaseException) -> None:
        """An error the task itself raised (a tool that failed) is the trial's, as in this process; only a
        worker or node that died makes the task lost."""
        if isinstance(error, self.ray.exceptions.RayTaskError):
            cause = error.cause if isinstance(error.cause, BaseException) else error
            raise TracelinkError(first_line(cause)) from None

    def _lost(self, job: Job, error: BaseException, attempt: int) -> bool:
        """Record a task lost with its worker or node; whether it runs again (its first loss)."""
        retried = attempt == 1
        if self.log is not None:
            self.log.append([{"kind": self.kinds[1], "what": job.what, "names": list(job.names),
                              "reason": first_line(error), "retried": retried}])
        return retried

    def _place(self, job: Job, result: dict) -> None:
        if self.log is not None:
            self.log.append([{"kind": self.kinds[0], "what": job.what, "names": list(job.names), "node": result["node"],
                              "address": self.cluster.address_of(result["node"]), "started": result["started"],
                              "seconds": result["seconds"], "stage": job.stage}])

    def _show(self, pending: list[Job]) -> None:
        """builds queued, running and done, races in flight (running: as many as the cluster has CPUs)."""
        cpus = sum(node.cpus for node in self.nodes)
        builds = sum(job.what == "build" for job in pending)
        running = min(builds, cpus)
        self.status(f"ray, {len(self.nodes)} node(s): builds {builds - running} queued, {running} running, "
                    f"{self.done} done; races in flight {len(pending) - builds}")

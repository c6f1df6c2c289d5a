"""The strategy search's builds and races as Ray tasks (:class:`RayWork`, over a :class:`~.cluster.Cluster`).

Builds run anywhere, one per CPU; a race takes a whole node as a Ray resource (all of the node's
:data:`~.cluster.RACE_RESOURCE`, of which each build holds a sliver), so no build and no other race runs
on its node meanwhile, its builds are timed side by side on one machine, and races of other searches
run on other nodes at once. Programs, builds, inputs and parameters travel as bytes through Ray's
object store (:mod:`~.payload`); the builds land in the driver's directories (the resumed search finds
them there), never on a shared filesystem. Where and when each ran goes to the record log
(``placement`` records); a task whose worker or node died is recorded (``lost``) and submitted once
more (Ray places it on any alive node where it fits), and a second loss is the trial's error. What is decided (which build, which race, which winner) stays in the driver.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tracelink.profile_dir.tune_record import RecordLog
from tracelink.atomic import write_text_atomic
from tracelink.errors import TracelinkError, first_line
from tracelink.tune.cluster import RACE_RESOURCE, Cluster
from tracelink.tune.payload import moved, pack, run_files, unpack
from tracelink.profile_dir import files

# A build holds this much of its node's race resource: builds share a node (one per CPU), a race waits
# until none runs there, and a build waits for the node's race to end.
BUILD_SHARE = 0.001
BUILD_OPTIONS = {"num_cpus": 1, "resources": {RACE_RESOURCE: BUILD_SHARE}, "max_retries": 0}
RACE_OPTIONS = {"num_cpus": 1, "resources": {RACE_RESOURCE: 1}, "max_retries": 0}


class LostError(TracelinkError):
    """A task lost twice (its worker or node died)."""


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


def build_task(program: bytes, suffix: str, flags: list[str], extra: list[str], timeout: float, what: str,
               scratch: str | None, shown: tuple[str, str]) -> dict:
    """On a node: compile the program's bytes; the build's bytes and its log, or the compiler's error
    (naming ``shown``: the driver's program and directory, not the node's copies)."""
    from tracelink.tune.spec import compile_variant

    start, started = time.monotonic(), time.time()
    with tempfile.TemporaryDirectory(prefix="tracelink-build-", dir=scratch) as work:
        source, directory = Path(work) / f"program{suffix}", Path(work) / "build"
        source.write_bytes(program)
        result: dict = {}
        try:
            result["vmfb"] = compile_variant(source, flags, extra, directory, timeout, what).read_bytes()
        except TracelinkError as error:
            result["error"] = first_line(error).replace(str(source), shown[0]).replace(str(directory), shown[1])
        log = directory / "compile.log"
        result["log"] = log.read_text(errors="replace").replace(str(source), shown[0]) if log.is_file() else ""
        return {**result, "node": _node(), "started": started, "seconds": time.monotonic() - start}


def race_task(builds: list, function: str, inputs: list[str], parameters: list[str], files: dict[str, bytes],
              calls: int, rounds: int, timeout: float, scratch: str | None) -> dict:
    """On a node: time ``builds`` in alternating rounds (each its median per round), as the driver would."""
    import ray

    from tracelink.collect.rounds import alternate, time_program

    builds = ray.get(list(builds))  # references inside a list arrive as references
    with tempfile.TemporaryDirectory(prefix="tracelink-race-", dir=scratch) as work:
        copies = unpack(files, Path(work))
        vmfbs = []
        for index, data in enumerate(builds):
            vmfbs.append(Path(work) / f"build{index}.vmfb")
            vmfbs[-1].write_bytes(data)
        inputs = [moved(value, copies) for value in inputs]
        parameters = [moved(value, copies) for value in parameters]
        runs = [lambda _, v=v: time_program(v, function, inputs, parameters, calls, timeout) for v in vmfbs]
        start, started = time.monotonic(), time.time()
        times = alternate(runs, rounds)
        return {"times": times, "node": _node(), "started": started, "seconds": time.monotonic() - start}


class RayWork:
    """The strategy search's builds and races on ``cluster``; ``log`` gets where each ran and what was lost."""

    def __init__(self, cluster: Cluster, log: RecordLog | None = None):
        import ray

        self.ray, self.cluster, self.log = ray, cluster, log
        self.nodes = cluster.racing_nodes()
        self.build_remote = ray.remote(**BUILD_OPTIONS)(build_task)
        self.race_remote = ray.remote(**RACE_OPTIONS)(race_task)
        self.status: Callable[[str], None] = lambda text: None
        self.counts = {"done": 0, "races": 0}
        self.shared: dict[tuple, object] = {}  # files put in the object store once

    def build_all(self, jobs: list[BuildJob]) -> dict[str, Path | TracelinkError]:
        """Build every job at once across the cluster; each build's vmfb in its directory, or its error."""
        pending = {self._submit_build(job): (job, 1) for job in jobs}
        results: dict[str, Path | TracelinkError] = {}
        while pending:
            self._show(len(pending))
            ready, _ = self.ray.wait(list(pending), num_returns=1)
            job, attempt = pending.pop(ready[0])
            try:
                result = self.ray.get(ready[0])
            except self.ray.exceptions.RayError as error:
                self._raise_task_error(error)
                if self._lost("build", [job.name], error, attempt):
                    pending[self._submit_build(job)] = (job, attempt + 1)
                else:
                    results[job.name] = LostError(f"{job.name}: lost twice ({first_line(error)})")
                    self.counts["done"] += 1
                continue
            self.counts["done"] += 1
            results[job.name] = self._landed(job, result)
        self._show(0)
        return results

    def _submit_build(self, job: BuildJob):
        program = self._put(job.program)
        return self.build_remote.remote(
            program, job.program.suffix, job.flags, job.extra, job.timeout, job.name, self.cluster.scratch(),
            (str(job.program), str(job.directory)))

    def _landed(self, job: BuildJob, result: dict) -> Path | TracelinkError:
        """The build's bytes written into the driver's directory (its placement recorded)."""
        from tracelink.atomic import make_directory, remove_path

        self._place("build", [job.name], result, 0)
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
        files = self._put_files(run_files(inputs, parameters))
        builds = [self._put(vmfb) for vmfb in vmfbs]
        attempt = 0
        while True:
            attempt += 1
            self.counts["races"] += 1
            self._show(0)
            reference = self.race_remote.remote(
                builds, function, inputs, parameters, files, calls, rounds, 600.0, self.cluster.scratch())
            try:
                result = self.ray.get(reference)
            except self.ray.exceptions.RayError as error:
                self._raise_task_error(error)
                if not self._lost("race", names, error, attempt):
                    raise LostError(f"the race of {', '.join(names)}: lost twice ({first_line(error)})") from None
                continue
            finally:
                self.counts["races"] -= 1
                self._show(0)
            settle(result["times"])
            self._place("race", names, result, stage)
            return result["times"]

    def _put(self, path: Path):
        """A file's bytes in the object store, put once per content."""
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key not in self.shared:
            self.shared[key] = self.ray.put(path.read_bytes())
        return self.shared[key]

    def _put_files(self, paths: list[str]):
        """A run's files as one object (path -> bytes), put once."""
        key = tuple((path, Path(path).stat().st_mtime_ns) for path in paths)
        if key not in self.shared:
            self.shared[key] = self.ray.put(pack(paths))
        return self.shared[key]

    def _raise_task_error(self, error: BaseException) -> None:
        """An error the task itself raised (a tool that failed) is the trial's, as in this process; only a
        worker or node that died makes the task lost."""
        if isinstance(error, self.ray.exceptions.RayTaskError):
            cause = error.cause if isinstance(error.cause, BaseException) else error
            raise TracelinkError(first_line(cause)) from None

    def _lost(self, what: str, names: list[str], error: BaseException, attempt: int) -> bool:
        """Record a task lost with its worker or node; whether it runs again (its first loss)."""
        retried = attempt == 1
        if self.log is not None:
            self.log.append([{"kind": "lost", "what": what, "names": names, "reason": first_line(error), "retried": retried}])
        return retried

    def _place(self, what: str, names: list[str], result: dict, stage: int) -> None:
        if self.log is not None:
            self.log.append([{"kind": "placement", "what": what, "names": names, "node": result["node"],
                              "address": self.cluster.address_of(result["node"]), "started": result["started"],
                              "seconds": result["seconds"], "stage": stage}])

    def _show(self, pending: int) -> None:
        """builds queued, running and done, races in flight (running: as many as the cluster has CPUs)."""
        cpus = sum(node.cpus for node in self.nodes)
        running = min(pending, cpus)
        self.status(f"ray, {len(self.nodes)} node(s): builds {pending - running} queued, {running} running, "
                    f"{self.counts['done']} done; races in flight {self.counts['races']}")

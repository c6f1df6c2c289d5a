"""Capture a Tracy trace of a program run with IREE's tracy-enabled runtime tools.

``iree-base-runtime`` ships a second build of its tools with Tracy instrumentation
(``iree/_runtime_libs_tracy/``) and Tracy's command-line capture server, ``iree-tracy-capture``. The
instrumented program listens on ``TRACY_PORT``; the capture connects to it, receives the trace and
saves it when the program disconnects. ``TRACY_NO_EXIT=1`` keeps the program alive at exit until the
capture has everything.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tracelink.errors import Crashed, TracelinkError
from tracelink.atomic import make_directory, open_for_writing
from tracelink.tools import kill_group, reap, signal_name, start_process, wait_for_exit

TRACY_PACKAGE = "iree._runtime_libs_tracy"
CAPTURE_TOOL = "iree-tracy-capture"
# After the program exits the capture still has to receive the tail of the trace and save it.
_FAILED_PROGRAM_GRACE_S = 5.0
_LOG_TAIL_CHARS = 2000
_POLL_S = 0.05


@dataclass(frozen=True)
class TracyTools:
    """The directory of the tracy-enabled IREE tools."""

    directory: Path

    def tool(self, name: str) -> Path:
        """Path of tool ``name`` (e.g. ``iree-benchmark-module``); raises if it is not there."""
        path = self.directory / name
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise TracelinkError(f"no tracy-enabled {name} in {self.directory}")
        return path

    @property
    def capture(self) -> Path:
        return self.tool(CAPTURE_TOOL)


def tracy_tools() -> TracyTools:
    """Locate the tracy-enabled tools installed with iree-base-runtime."""
    spec = importlib.util.find_spec(TRACY_PACKAGE)
    if spec is None or spec.origin is None:
        raise TracelinkError(
            f"the tracy-enabled IREE tools are not installed (iree-base-runtime provides {TRACY_PACKAGE})"
        )
    return TracyTools(Path(spec.origin).parent)


def free_port() -> int:
    """A local TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class _Process:
    """A child in its own process group, with its output in a log file."""

    name: str
    popen: subprocess.Popen
    log: Path

    def tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-_LOG_TAIL_CHARS:].strip()

    def stop(self) -> None:
        """Kill the whole process group if anything of it is still running."""
        kill_group(self.popen)
        reap(self.popen)


def _start(name: str, argv: list[str], log: Path, env: dict[str, str], cwd: Path | None) -> _Process:
    try:
        with open_for_writing(log, "wb") as out:
            # its own process group, so stop() reaches its children too
            popen = start_process(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    except OSError as error:
        raise TracelinkError(f"cannot run {argv[0]}: {error.strerror or error}") from error
    return _Process(name, popen, log)


def _wait(process: _Process, deadline: float) -> int | None:
    """Wait until the process exits or the deadline passes; its exit code, or None on timeout."""
    try:
        return wait_for_exit(process.popen, deadline - time.monotonic())
    except subprocess.TimeoutExpired:
        return None


def _wait_for_program(program: _Process, capture: _Process, deadline: float, timeout_s: float) -> int:
    """Wait for the program's exit code, failing early if the capture dies first (the program, kept
    alive by TRACY_NO_EXIT, would otherwise wait for it until the deadline)."""
    while (code := program.popen.poll()) is None:
        if capture.popen.poll() is not None:
            raise TracelinkError(
                f"{CAPTURE_TOOL} exited (code {capture.popen.returncode}) before {program.name} finished: "
                f"{capture.tail()}"
            )
        if time.monotonic() > deadline:
            raise TracelinkError(f"{program.name} did not finish within {timeout_s:g} s")
        time.sleep(_POLL_S)
    return code


def capture_tracy(command: list[str], output: Path, timeout_s: float, *, cwd: Path | None = None) -> Path:
    """Run ``command`` (a tracy-enabled IREE tool and its arguments) under ``iree-tracy-capture``.

    Writes the trace to ``output`` (a .tracy path; its directory is created) and the two processes'
    output next to it (``<stem>.capture.log``, ``<stem>.program.log``). Both processes are gone when
    this returns or raises, whatever happens. Raises :class:`TracelinkError` if the program fails,
    the capture saves nothing, or the whole run takes longer than ``timeout_s``.
    """
    output = Path(output)
    make_directory(output.parent)
    output.unlink(missing_ok=True)  # a stale trace must not pass for this run's
    port = free_port()
    env = dict(os.environ, TRACY_PORT=str(port), TRACY_NO_EXIT="1")
    deadline = time.monotonic() + timeout_s
    capture_argv = [str(tracy_tools().capture), "-o", str(output), "-f", "-a", "127.0.0.1", "-p", str(port)]
    processes: list[_Process] = []
    try:
        capture = _start("capture", capture_argv, output.with_name(output.stem + ".capture.log"), env, cwd)
        processes.append(capture)
        program = _start(Path(command[0]).name, command, output.with_name(output.stem + ".program.log"), env, cwd)
        processes.append(program)

        program_code = _wait_for_program(program, capture, deadline, timeout_s)
        if program_code != 0:
            _wait(capture, min(deadline, time.monotonic() + _FAILED_PROGRAM_GRACE_S))
            if program_code < 0:
                raise Crashed(f"{program.name} crashed ({signal_name(-program_code)}); its output is in {program.log}")
            raise TracelinkError(f"{program.name} failed with exit code {program_code}: {program.tail()}")
        capture_code = _wait(capture, deadline)
        if capture_code is None:
            raise TracelinkError(f"{CAPTURE_TOOL} did not save the trace within {timeout_s:g} s")
        if capture_code != 0 or not output.is_file():
            raise TracelinkError(f"{CAPTURE_TOOL} failed (exit code {capture_code}): {capture.tail()}")
        return output
    finally:
        for process in processes:
            process.stop()

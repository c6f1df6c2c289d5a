"""IREE's command-line tools as background processes: found beside the running Python, logged, bounded.

A :class:`ToolRun` starts at once and is waited for later, so the pipeline can parse and build while
the compiler or the program runs. Each tool runs in its own process group, so a timeout kills every
process it started and nothing is left behind. When tracelink dies without a chance to stop them
(SIGKILL, a crash), a guard process kills them: it holds the group of every tool running and kills
those left when its pipe from tracelink closes. (``PR_SET_PDEATHSIG`` would need a ``preexec_fn``,
which makes every start fork the whole interpreter and wait on its import lock: stopping tune's
workers then took over 2 s.)

The tools are the packages' binaries themselves, not the Python scripts pip puts in the venv's bin/:
those run the binary as their child and exit with its status modulo 256 (a crash, -11, reads as exit
245), and their child would outlive a killed script.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import math
import multiprocessing
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Generic, TypeVar

from iree.compiler import version as compiler_package

from tracelink.errors import Crashed, TracelinkError, first_line
from tracelink.atomic import open_for_writing


# Where each installed IREE package keeps its binaries (the compiler's and the runtime's tools).
TOOL_PACKAGES = {"iree-compile": "iree.compiler._mlir_libs"}
RUNTIME_PACKAGE = "iree._runtime_libs"


def tool_path(name: str) -> str:
    """Path of an IREE tool: the binary of the installed package, else beside the running Python (the
    venv's bin/), else on PATH."""
    spec = importlib.util.find_spec(TOOL_PACKAGES.get(name, RUNTIME_PACKAGE))
    if spec is not None and spec.origin is not None:
        binary = Path(spec.origin).parent / name
        if binary.is_file() and os.access(binary, os.X_OK):
            return str(binary)
    beside_python = Path(sys.executable).parent / name
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which(name)
    if found is None:
        raise TracelinkError(f"{name} not found: install iree-base-compiler and iree-base-runtime 3.13.0")
    return found


def compiler_version() -> str:
    """The compiler's version and revision, as ``iree-compile --version`` reports them (without running it)."""
    return f"{compiler_package.VERSION} @ {compiler_package.REVISIONS.get('IREE', '?')[:8]}"


# Leaders of the process groups of the tools running now: an interrupt kills each whole group.
_RUNNING: set[int] = set()
_RUNNING_LOCK = threading.RLock()  # re-entrant: a signal handler may take it on the thread holding it


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
MAX_POLL_MS = 2**31 - 1  # poll(2) takes an int of milliseconds
# The guard: reads "+GROUP" / "-GROUP" lines; at the end of its input (tracelink gone, however) it kills
# the groups left and removes the tools' temporary directory (its argument). A tool whose "+" line never
# came (tracelink killed between starting it and telling the guard) is found by that directory, its
# TMPDIR, which only this tracelink's tools have. Python without site: it starts in a few tens of
# milliseconds.
GUARD = """
import os, shutil, signal, sys
groups = set()
for line in sys.stdin:
    (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
ours = ("\\0TMPDIR=" + sys.argv[1] + "\\0").encode()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open("/proc/" + pid + "/environ", "rb") as environ:
            if ours in b"\\0" + environ.read():
                groups.add(os.getpgid(int(pid)))
    except OSError:
        pass
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
shutil.rmtree(sys.argv[1], ignore_errors=True)
"""
_guard: subprocess.Popen | None = None
_guard_pid = 0


def guard() -> subprocess.Popen:
    """This process's guard, started before its first tool (a forked child gets one of its own, with its own
    TMPDIR, by which the guard finds its tools)."""
    global _guard, _guard_pid
    if _guard is None or _guard_pid != os.getpid() or _guard.poll() is not None:
        _guard_pid = os.getpid()
        # its own session: a Ctrl-C to the terminal's group leaves it to watch the tools until tracelink ends
        _guard = subprocess.Popen([sys.executable, "-S", "-c", GUARD, str(tools_temp_dir())], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True, text=True, bufsize=1)
    return _guard


def guard_note(line: str) -> None:
    """Tell this process's guard that a group starts or ends (holding the lock)."""
    try:
        guard().stdin.write(line + "\n")
    except (BrokenPipeError, ValueError):  # the guard was killed: tools are still stopped on interrupts
        pass


def tools_temp_dir() -> Path:
    """The ``TMPDIR`` of every tool this process starts, made on first use and removed when the process
    ends (by the guard if it is killed). IREE's runtime leaves an empty ``iree_dylib_XXXXXX`` file in
    ``TMPDIR`` each time it loads a module of system-library executables (the hook's, tune's candidates),
    which would otherwise pile up in ``/tmp``."""
    global _tools_temp, _tools_temp_pid
    if _tools_temp is None or _tools_temp_pid != os.getpid():
        _tools_temp, _tools_temp_pid = Path(tempfile.mkdtemp(prefix="tracelink-tools-")), os.getpid()
        atexit.register(shutil.rmtree, _tools_temp, ignore_errors=True)
    return _tools_temp


_tools_temp: Path | None = None
_tools_temp_pid = 0


def start_process(command: list[str], **popen_options) -> subprocess.Popen:
    """Start a tool in its own session (so it survives no interrupt of tracelink: see :func:`stop_all_tools`),
    watched by the guard, with :func:`tools_temp_dir` as its ``TMPDIR``."""
    popen_options["env"] = (popen_options.get("env") or os.environ) | {"TMPDIR": str(tools_temp_dir())}
    command, module = module_on_stdin(command) if popen_options.get("stdin") in (None, subprocess.DEVNULL) else (command, None)
    if module is not None:
        popen_options["stdin"] = module
    try:
        with _RUNNING_LOCK:
            guard()
            process = subprocess.Popen(command, start_new_session=True, **popen_options)
            _RUNNING.add(process.pid)
            guard_note(f"+{process.pid}")
    finally:
        if module is not None:
            module.close()
    return process


def open_files(pid: int) -> set[str] | None:
    """The files process ``pid`` holds open (from Linux's ``/proc``), or None where they cannot be read."""
    descriptors = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(descriptors)
    except OSError:
        return None
    held = set()
    for name in names:
        try:
            held.add(os.readlink(descriptors / name))
        except OSError:
            continue  # closed since it was listed
    return held


def module_on_stdin(command: list[str]) -> tuple[list[str], BinaryIO | None]:
    """``command`` with a ``--module=PATH`` whose path holds an ``@`` read from standard input instead
    (``--module=-``), and that file opened; IREE's tools cut ``PATH@NAME`` at the ``@`` (a native module's
    create function), so such a path would not load."""
    for position, argument in enumerate(command):
        if argument.startswith("--module=") and "@" in argument and Path(argument.removeprefix("--module=")).is_file():
            module = open(argument.removeprefix("--module="), "rb")  # noqa: SIM115 (closed once the tool has it)
            return [*command[:position], "--module=-", *command[position + 1:]], module
    return command, None


def kill_group(process: subprocess.Popen, signal_number: int = signal.SIGKILL) -> None:
    """Signal the tool's whole process group unless it was reaped (its pid may be reused since)."""
    with _RUNNING_LOCK:
        if process.pid not in _RUNNING:
            return
        try:
            os.killpg(process.pid, signal_number)
        except ProcessLookupError:
            pass


def reap(process: subprocess.Popen) -> int:
    """Wait for a tool after its group was killed or it exited; it no longer needs stopping."""
    code = process.wait()
    with _RUNNING_LOCK:
        if process.pid in _RUNNING:
            _RUNNING.discard(process.pid)
            guard_note(f"-{process.pid}")
    return code


def run_tool(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Like ``subprocess.run(capture_output=True, text=True)``, with the tool's whole group killed on a
    timeout or an interrupt (raises ``subprocess.TimeoutExpired`` on a timeout). Bytes that are not
    UTF-8 read as U+FFFD: iree-compile's diagnostics print an imported ONNX model's raw attribute bytes."""
    process = start_process(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except BaseException:
        kill_group(process)
        reap(process)
        raise
    return subprocess.CompletedProcess(command, reap(process), stdout, stderr)


class ToolTimedOut(TracelinkError):
    """A tool :func:`run_checked` ran past its time limit: a caller may tell it from a failure (tune records
    such a candidate as timed out)."""


def run_checked(command: list[str], timeout: float, subject: Path | str, doing: str) -> subprocess.CompletedProcess:
    """:func:`run_tool`, with a time-out (:class:`ToolTimedOut`), a crash or a failure as one line naming ``subject``."""
    try:
        done = run_tool(command, timeout)
    except subprocess.TimeoutExpired as error:
        raise ToolTimedOut(f"{subject}: {doing} took over {timeout:g} s") from error
    tool = Path(command[0]).name
    if done.returncode < 0:
        raise TracelinkError(f"{subject}: {tool} crashed ({signal_name(-done.returncode)}) {doing}")
    if done.returncode != 0:
        raise TracelinkError(f"{subject}: {tool} failed {doing}: {last_lines(done.stderr, 1)}")
    return done


def session_children() -> set[int]:
    """Direct children leading their own session: tools started by this process.

    An interrupt can arrive while ``Popen`` returns, before the tool is registered; this finds it anyway.
    """
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # gone meanwhile
            ppid, _group, session = stat[stat.rindex(")") + 2 :].split()[1:4]
            if int(ppid) == os.getpid() and int(session) == int(entry.name) and (_guard is None or _guard.pid != int(entry.name)):
                found.add(int(entry.name))
    return found


def stop_all_tools() -> None:
    """Kill the process group of every tool still running, and tracelink's worker processes."""
    with _RUNNING_LOCK:
        for leader in _RUNNING | session_children():
            try:
                os.killpg(leader, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for worker in multiprocessing.active_children():
        worker.terminate()  # a worker kills its own tools on SIGTERM (see stop_on_sigterm)
    for worker in multiprocessing.active_children():
        worker.join(timeout=1.0)


def stop_on_sigterm() -> None:
    """In a worker process: on SIGTERM kill the tools it started and exit; leave SIGINT to the parent.
    The worker gets SIGTERM when tracelink dies without stopping it (SIGKILL)."""

    def stop(signal_number: int, frame: object) -> None:
        stop_all_tools()
        if _tools_temp is not None:  # os._exit runs no atexit
            shutil.rmtree(_tools_temp, ignore_errors=True)
        os._exit(128 + signal_number)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class ToolRun:
    """One tool invocation running in the background, its output (stdout and stderr) going to ``log``."""

    def __init__(self, command: list[str], log: Path, what: str) -> None:
        self.command = command
        self.log = log
        self.what = what
        with open_for_writing(log) as out:
            out.write(" ".join(command) + "\n\n")
            out.flush()
            self.process = start_process(command, stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        """What the tool printed so far (without the command line heading the log)."""
        return self.log.read_text(errors="replace").split("\n\n", 1)[-1]

    def wait(self, timeout_s: float, explain: Callable[[str], str] | None = None) -> None:
        """Wait for the tool; a timeout or failure becomes one clear line (``explain`` picks from its output)."""
        try:
            code = reap_within(self.process, timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TracelinkError(f"{self.what} did not finish within {timeout_s:g} s (killed; log: {self.log}); raise --timeout") from None
        if code < 0:  # its output is only a banner then: say it crashed and where to look
            raise Crashed(f"{self.what} crashed ({signal_name(-code)}); its output is in {self.log}")
        if code != 0:
            detail = explain(self.output()) if explain else last_lines(self.output())
            raise TracelinkError(f"{self.what} failed (exit {code}): {detail} (log: {self.log})")

    def kill(self) -> None:
        """Kill the tool's whole process group (idempotent)."""
        kill_group(self.process)
        reap(self.process)


Result = TypeVar("Result")


class InBackground(Generic[Result]):
    """Work that runs tools, started in a background thread (the tools are subprocesses, so the thread
    waits without holding the GIL) while the caller goes on; stopping it kills the tools it started."""

    def __init__(self, work: Callable[[], Result], name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._future: Future = self._executor.submit(work)

    def wait(self) -> None:
        """Wait until the work has ended, without raising what it raised (:meth:`result` does)."""
        try:
            self._future.exception()
        except BaseException:
            self.cancel()
            raise

    def result(self) -> Result:
        """What the work returned, or what it raised; an interrupt while waiting stops it first."""
        try:
            value = self._future.result()
        except BaseException:
            self.cancel()
            raise
        self._executor.shutdown()
        return value

    def cancel(self) -> None:
        """Kill the tools running (their whole process groups) and wait for the thread, which then ends."""
        stop_all_tools()
        self._executor.shutdown(cancel_futures=True)


class InChildProcess(Generic[Result]):
    """Python work forked into a child process, so that it runs beside the caller's own (one interpreter
    runs one thread at a time). Forked, the child starts at once and shares the caller's data without
    copying it; it touches nothing but what it returns and the files it writes (no console, no tools).
    :meth:`wait` returns what the work returned, or raises its failure in one line.

    Where a loaded library's own threads make forking unsafe (:data:`FORK_UNSAFE_MODULES`), the work
    runs at once in the caller instead, and what it raises is raised by :meth:`wait` too, so that the
    caller's own work beside it is done either way."""

    def __init__(self, work: Callable[[], Result], name: str) -> None:
        self._process = None
        self._failure: Exception | None = None
        if any(module in sys.modules for module in FORK_UNSAFE_MODULES):
            try:
                self._value = work()
            except Exception as error:  # noqa: BLE001: raised by wait(), as a forked child's failure is
                self._failure = error
            return
        context = multiprocessing.get_context("fork")
        self._outcome, sent = context.Pipe(duplex=False)
        self._process = context.Process(target=report_to, args=(work, sent), name=name, daemon=True)
        self._process.start()
        sent.close()

    def wait(self) -> Result:
        """What the child's work returned; what it raised, or how it ended if it could not say, as a TracelinkError."""
        if self._process is None:
            if self._failure is not None:
                raise self._failure
            return self._value
        try:
            failed, value = self._outcome.recv()
        except EOFError:  # killed before it could say
            failed, value = True, None
        self._process.join()
        if failed or self._process.exitcode != 0:
            raise TracelinkError(value or f"{self._process.name} ended with exit code {self._process.exitcode}")
        return value

    def cancel(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()


# JAX runs threads of its own and warns at every fork that the child may deadlock (a JAX model is
# exported inside the tracelink process).
FORK_UNSAFE_MODULES = ("jax",)


def report_to(work: Callable[[], object], sent) -> None:
    """In a forked child: run ``work`` and send (False, what it returned), or (True, the first line of what it raised)."""
    try:
        value = work()
    except BaseException as error:  # noqa: BLE001: everything the child raises is the parent's to report
        sent.send((True, first_line(error) or type(error).__name__))
        raise SystemExit(1) from None
    sent.send((False, value))


def reap_within(process: subprocess.Popen, timeout_s: float) -> int:
    """Wait up to ``timeout_s`` for a tool to exit (raises ``subprocess.TimeoutExpired``), then :func:`reap` it."""
    wait_for_exit(process, timeout_s)
    return reap(process)


def wait_for_exit(process: subprocess.Popen, timeout_s: float | None) -> int:
    """The exit code of ``process`` once it exits, waiting at most ``timeout_s`` (None: as long as it
    runs; raises ``subprocess.TimeoutExpired``). Woken by the kernel through a pidfd where Linux has
    them: ``Popen.wait`` with a timeout polls, sleeping between looks, so it saw each tool's end late."""
    if process.returncode is not None or timeout_s is None:
        return process.wait()
    try:
        descriptor = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # no pidfd (kernel < 5.3), or already reaped elsewhere
        return process.wait(timeout=timeout_s)
    try:
        waiting = select.poll()  # not select(): a descriptor above 1023 is valid here
        waiting.register(descriptor, select.POLLIN)
        deadline = time.monotonic() + timeout_s
        while not waiting.poll(min(max(0, math.ceil((deadline - time.monotonic()) * 1000)), MAX_POLL_MS)):
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(process.args, timeout_s)
    finally:
        os.close(descriptor)
    return process.wait()


def signal_name(number: int) -> str:
    """``SIGSEGV`` for 11; the number for a signal Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# A frame of an MLIR tool's crash backtrace inside a pass (frames run innermost first).
PASS_FRAME = re.compile(r"(\w+Pass)::runOnOperation")


def compiler_failure(stderr: str, returncode: int) -> str:
    """A failed iree-compile in one line: its first error, or the signal it crashed with and the
    innermost pass of its backtrace (a crash prints no error line, only "Please report issues...")."""
    if returncode < 0:
        frame = PASS_FRAME.search(stderr)
        return f"iree-compile crashed ({signal_name(-returncode)}){f' in {frame[1]}' if frame else ''}"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return next((line for line in lines if "error" in line), lines[0] if lines else f"exit status {returncode}")[:300]


def last_lines(output: str, count: int = 3) -> str:
    """The last non-empty lines of a tool's output, on one line."""
    return " | ".join([line.strip() for line in output.splitlines() if line.strip()][-count:]) or "no output"

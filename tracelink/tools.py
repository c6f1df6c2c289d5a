"""IREE's command-line tools as background processes: found beside the running Python, logged, bounded.

A :class:`ToolRun` starts at once and is waited for later, so the pipeline can parse and build while
the compiler or the program runs. Each tool runs in its own process group, so a timeout kills every
process it started and nothing is left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from iree.compiler import version as compiler_package

from tracelink import TracelinkError


def tool_path(name: str) -> str:
    """Path of an IREE tool installed beside the running Python (the venv's bin/), else on PATH."""
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


class ToolRun:
    """One tool invocation running in the background, its output (stdout and stderr) going to ``log``."""

    def __init__(self, command: list[str], log: Path, what: str) -> None:
        self.command = command
        self.log = log
        self.what = what
        with log.open("w") as out:
            out.write(" ".join(command) + "\n\n")
            out.flush()
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        """What the tool printed so far (without the command line heading the log)."""
        return self.log.read_text(errors="replace").split("\n\n", 1)[-1]

    def wait(self, timeout_s: float, explain: Callable[[str], str] | None = None) -> None:
        """Wait for the tool; a timeout or failure becomes one clear line (``explain`` picks from its output)."""
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TracelinkError(f"{self.what} did not finish within {timeout_s:g} s (killed; log: {self.log}); raise --timeout") from None
        if code != 0:
            reason = f"killed by signal {-code}" if code < 0 else f"exit {code}"
            detail = explain(self.output()) if explain else last_lines(self.output())
            raise TracelinkError(f"{self.what} failed ({reason}): {detail} (log: {self.log})")

    def kill(self) -> None:
        """Kill the tool's whole process group (idempotent)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def last_lines(output: str, count: int = 3) -> str:
    """The last non-empty lines of a tool's output, on one line."""
    return " | ".join([line.strip() for line in output.splitlines() if line.strip()][-count:]) or "no output"

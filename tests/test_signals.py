"""SIGINT and SIGTERM stop tracelink within 2 s in every stage and leave no process of its own behind."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.test_bad_input import TRACELINK
from tests.test_safety import program

STOP_WITHIN_S = 2.0


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """pid -> (process group, command name) of every live process below ``root``."""
    parents: dict[int, int] = {}
    info: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":
            continue
        parents[int(entry.name)] = int(fields[1])
        info[int(entry.name)] = (int(fields[2]), name)
    found: dict[int, tuple[int, str]] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = info[pid]
                frontier.append(pid)
    return found


def group_alive(group: int) -> bool:
    """Whether any process (not a zombie) is left in ``group``."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == group and fields[0] != "Z":
                return True
    return False


def interrupt_when(command: list[str], ready, signal_number: int, cwd: Path) -> tuple[subprocess.CompletedProcess, set[int]]:
    """Start ``command`` in a session of its own, send ``signal_number`` once ``ready(children)`` holds.

    SIGINT goes to the whole group (as Ctrl-C in a terminal), SIGTERM to tracelink only (as ``kill``).
    Returns the result and the process groups of every process tracelink had started.
    """
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, start_new_session=True)
    groups: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while not ready(children := descendants(process.pid)):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the stage never started"
            time.sleep(0.05)
        groups = {group for group, _ in children.values()} | {process.pid}
        if signal_number == signal.SIGINT:
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal_number)
        sent = time.monotonic()
        stdout, stderr = process.communicate(timeout=30)
        assert time.monotonic() - sent < STOP_WITHIN_S, f"took {time.monotonic() - sent:.1f} s"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), groups


def running(*names: str):
    """Ready once a process whose name starts with one of ``names`` runs below tracelink."""
    return lambda children: any(name.startswith(names) for _, name in children.values())


def check_stopped(done: subprocess.CompletedProcess, groups: set[int], signal_number: int) -> None:
    assert done.returncode == (130 if signal_number == signal.SIGINT else 143), done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip() and "interrupted" in line]
    assert any(f"interrupted ({signal.Signals(signal_number).name})" in line and "kept" in line for line in lines), done.stderr
    deadline = time.monotonic() + 1.0  # killed groups vanish as soon as the kernel reaps them
    while any(group_alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [g for g in groups if group_alive(g)], "a process group survived"


@pytest.fixture(scope="module")
def slow_program(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("signals") / "slow.mlir"
    path.write_text(program("slow", matmuls=4).replace("32x32", "256x256"))
    return path


@pytest.mark.parametrize(
    ("collector", "stage", "signal_number"),
    [
        ("hal", "compile", signal.SIGINT), ("hal", "compile", signal.SIGTERM),
        ("hal", "run", signal.SIGINT), ("hal", "run", signal.SIGTERM),
        ("tracy", "run", signal.SIGTERM), ("hook", "run", signal.SIGINT),
    ],
)
def test_profile_stops_in_every_stage(slow_program, tmp_path, collector, stage, signal_number):
    out = tmp_path / "out"
    command = [*TRACELINK, "profile", str(slow_program), "-o", str(out), "--repetitions", "1000000", "--collector", collector]
    ready = running("iree-compile") if stage == "compile" else (
        lambda children: (out / "provenance.json").is_file() and running("iree-benchmark")(children))
    done, groups = interrupt_when(command, ready, signal_number, tmp_path)
    check_stopped(done, groups, signal_number)
    assert (out / "artifacts" / "compile.log").is_file()  # what was written is kept


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_tune_stops_and_keeps_its_trials(tmp_path, signal_number):
    out = tmp_path / "base"
    source = tmp_path / "one.mlir"
    source.write_text(program("one", matmuls=1).replace("32x32", "256x256"))
    assert subprocess.run([*TRACELINK, "profile", str(source), "-o", str(out), "--repetitions", "2"], capture_output=True).returncode == 0
    command = [*TRACELINK, "tune", str(out), "--top", "1", "--trials", "64"]
    # wait for a candidate compile started by a pool worker (a python process below tracelink)
    done, groups = interrupt_when(command, running("iree-compile", "iree-run-module", "iree-benchmark"), signal_number, tmp_path)
    check_stopped(done, groups, signal_number)


def test_a_signal_whose_exception_was_swallowed_still_ends_tracelink_as_interrupted(monkeypatch, capsys):
    """Raised while an extension runs Python code, a signal's exception can be swallowed there (about 1
    SIGTERM in 100 during start-up; the profile then ran to its end and exited 0)."""
    from tracelink.commands import cli

    def swallowing(args) -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler raises here
        except KeyboardInterrupt:
            pass  # what the extension did
        return 0

    monkeypatch.setattr(cli, "received", [], raising=False)
    monkeypatch.setattr(cli, "build_parser", lambda command: argparse.Namespace(parse_args=lambda argv: argparse.Namespace(handler=swallowing)))
    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        assert cli.main(["profile"]) == 128 + signal.SIGTERM
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    assert "interrupted (SIGTERM)" in capsys.readouterr().err

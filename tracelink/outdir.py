"""Ownership of a profile directory: a marker, a lock, and a clean slate for every run.

A profile directory holds a marker file (``.tracelink``, with a format version). ``tracelink profile``
refuses a non-empty directory without it (unless forced; a profile an older tracelink wrote before
the marker existed is recognised by its files), locks the directory for the whole run (a
second run into it is refused), and removes every file an earlier run wrote before writing its own,
so nothing of an earlier profile can be read as this one's.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tracelink import TracelinkError, __version__

MARKER = ".tracelink"
LOCK = ".tracelink.lock"
FORMAT_VERSION = 1
# Everything a profile run (and tune / diff / report on it) writes at the top of the directory.
OWNED = (
    "artifacts", "tune", "profile.json", "events.parquet", "call_sites.csv", "exports.csv", "source_ops.csv",
    "source_lines.csv", "provenance.graphml", "provenance.json", "report.html", "trace.json", "profile.pb.gz", "workgroups.parquet",
    "zones.parquet", "diff.csv", "diff.json",
)


@dataclass
class OutputClaim:
    """A locked profile directory; :meth:`release` unlocks it (also released when the process ends)."""

    directory: Path
    lock_fd: int

    def release(self) -> None:
        """Unlock the directory (idempotent)."""
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1


# The files every tracelink profile directory held before the marker existed (format 0).
UNMARKED_PROFILE_FILES = ("profile.json", "call_sites.csv", "source_ops.csv", "artifacts/manifest.json")


def is_profile_directory(directory: Path) -> bool:
    """Whether ``directory`` carries tracelink's marker (of any format) or is a profile written before it."""
    directory = Path(directory)
    return (directory / MARKER).is_file() or is_unmarked_profile(directory)


def is_unmarked_profile(directory: Path) -> bool:
    """Whether ``directory`` holds an older tracelink's profile: its file set, a summary naming the program."""
    if not all((directory / name).is_file() for name in UNMARKED_PROFILE_FILES):
        return False
    try:
        summary = json.loads((directory / "profile.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(summary, dict) and {"program", "function", "iterations"} <= summary.keys()


def ensure_inside(root: Path, path: Path) -> Path:
    """``path`` resolved; refused when it (through symbolic links too) leaves ``root``."""
    resolved = Path(path).resolve()
    if not resolved.is_relative_to(Path(root).resolve()):
        raise TracelinkError(f"{path}: resolves to {resolved}, outside the output directory {root}; refusing to write there")
    return resolved


def claim_output(directory: Path, force: bool = False, inputs: tuple[Path, ...] = ()) -> OutputClaim:
    """Take ``directory`` for a new profile: check it, lock it, clear the previous profile's files.

    ``inputs`` are files the run reads (program, spec, inputs): one inside the previous profile would be
    deleted before use, so that is refused.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise TracelinkError(f"{directory}: exists and is not a directory")
    if directory.is_dir() and any(directory.iterdir()) and not is_profile_directory(directory) and not force:
        raise TracelinkError(
            f"{directory}: not empty and not a tracelink profile directory; choose another -o or pass --force to write into it"
        )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        claim = OutputClaim(directory, lock(directory))
    except OSError as error:
        raise TracelinkError(f"{directory}: cannot write the profile directory ({error.strerror})") from None
    try:
        refuse_inputs_inside(directory, inputs)
        clear_previous(directory)
        write_marker(directory)
    except BaseException:
        claim.release()
        raise
    return claim


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s lock while a command writes into an existing profile (report, ingest, tune, diff)."""
    try:
        fd = lock(Path(directory))
    except OSError as error:
        raise TracelinkError(f"{directory}: cannot lock the profile directory ({error.strerror})") from None
    try:
        yield
    finally:
        os.close(fd)


def lock(directory: Path) -> int:
    """An exclusive, non-blocking lock on ``directory/.tracelink.lock``; refused while another run holds it."""
    fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise TracelinkError(f"{directory}: another tracelink run (pid {holder}) is writing this directory") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def refuse_inputs_inside(directory: Path, inputs: tuple[Path, ...]) -> None:
    """Refuse inputs that lie in the part of ``directory`` about to be cleared."""
    owned = [(directory / name).resolve() for name in OWNED]
    for path in inputs:
        resolved = Path(path).resolve()
        if any(resolved == root or resolved.is_relative_to(root) for root in owned):
            raise TracelinkError(f"{path}: lies inside the previous profile in {directory}, which this run replaces; copy it elsewhere first")


def clear_previous(directory: Path) -> None:
    """Remove what an earlier run wrote (only tracelink's own names; links are removed, never followed)."""
    for name in OWNED:
        path = directory / name
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
        except OSError as error:
            raise TracelinkError(f"{path}: cannot remove the previous profile's file ({error.strerror})") from None
    for leftover in directory.glob(".*.tmp"):  # temporary files of an interrupted atomic write
        leftover.unlink(missing_ok=True)


def write_marker(directory: Path) -> None:
    """Mark ``directory`` as a tracelink profile directory of this format."""
    (directory / MARKER).write_text(json.dumps({"format": FORMAT_VERSION, "tracelink": __version__}) + "\n")


def refuse_foreign_file(path: Path, header: str) -> None:
    """Refuse to write ``path`` when it holds something other than a file tracelink wrote (starting with ``header``)."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_file():
        raise TracelinkError(f"{path}: exists and is not a regular file; choose another output path")
    try:
        with path.open("rb") as file:
            ours = file.read(len(header.encode())) == header.encode()
    except OSError as error:
        raise TracelinkError(f"{path}: cannot read the existing file ({error.strerror})") from None
    if not ours:
        raise TracelinkError(f"{path}: exists and was not written by tracelink; refusing to overwrite it (choose another output path)")

"""Ownership of a profile directory: a marker, a lock, and a clean slate for every run.

A profile directory holds a marker file (``.tracelink``, with a format version). ``tracelink profile``
refuses a non-empty directory without it (unless forced; a profile an older tracelink wrote before
the marker existed is recognised by its files), locks the directory for the whole run (a
second run into it is refused), and takes away every file an earlier run wrote before writing its own
(moved into a hidden folder at once, which is removed in the background), so nothing of an earlier
profile can be read as this one's. Forced into a directory that is not a
profile, it refuses to replace anything there with one of its own names: tracelink removes or
overwrites only what it wrote.

Every command that writes into a profile directory locks it and refuses it while a symbolic link (or
a file with a second name) sits where it writes, so nothing outside the directory is written through
one; the writes themselves go through :mod:`tracelink.atomic`, which follows no link either.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tracelink.version import __version__
from tracelink.errors import TracelinkError
from tracelink.atomic import TEMPORARY_SUFFIX, link_error, make_directory, remove_path, write_text_atomic
from tracelink.profile_dir import files

FORMAT_VERSION = 1
# The start of an HTML report tracelink wrote (its <head> names the generator), for `report -o`.
REPORT_HEADER = '<meta name="generator" content="tracelink'
# The first line of a repro folder's README.md, by which `repro -o` recognises a folder it wrote.
REPRO_HEADER = "# Dispatch call site #"


@dataclass
class OutputClaim:
    """A locked profile directory; :meth:`release` unlocks it (also released when the process ends)."""

    directory: Path
    lock_fd: int
    clearing: threading.Thread | None = None  # removing the previous profile's files (:func:`clear_previous`)

    def release(self) -> None:
        """Wait until the previous profile's files are removed, then unlock the directory (idempotent)."""
        if self.clearing is not None:
            self.clearing.join()
            self.clearing = None
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1


# The files every tracelink profile directory held before the marker existed (format 0).
UNMARKED_PROFILE_FILES = (files.SUMMARY, files.csv("call_sites"), files.csv("source_ops"), f"{files.ARTIFACTS}/{files.MANIFEST}")


def is_profile_directory(directory: Path) -> bool:
    """Whether ``directory`` carries tracelink's marker (of any format) or is a profile written before it."""
    directory = Path(directory)
    return (directory / files.MARKER).is_file() or is_unmarked_profile(directory)


def is_unmarked_profile(directory: Path) -> bool:
    """Whether ``directory`` holds an older tracelink's profile: its file set, a summary naming the program."""
    if not all((directory / name).is_file() for name in UNMARKED_PROFILE_FILES):
        return False
    try:
        summary = json.loads((directory / files.SUMMARY).read_text())
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
    ours = not directory.is_dir() or not any(directory.iterdir()) or is_profile_directory(directory)
    if not ours and not force:
        raise TracelinkError(
            f"{directory}: not empty and not a tracelink profile directory; choose another -o or pass --force to write into it"
        )
    refuse_links(directory, (files.MARKER, files.LOCK, *files.OWNED))
    if not ours:  # forced: write beside the user's files, never over them
        for name in (files.MARKER, *files.OWNED):
            if os.path.lexists(directory / name):
                raise TracelinkError(f"{directory / name}: exists and was not written by tracelink; --force does not replace it "
                                     "(move it away or choose another -o)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        claim = OutputClaim(directory, lock(directory))
    except OSError as error:
        raise TracelinkError(f"{directory}: cannot write the profile directory ({error.strerror})") from None
    try:
        refuse_inputs_inside(directory, inputs)
        write_marker(directory)  # first: from the lock on, other commands see a profile directory (and its lock)
        claim.clearing = clear_previous(directory)
    except BaseException:
        claim.release()
        raise
    return claim


@contextmanager
def locked(directory: Path, writes: Iterable[str] = (), trees: Iterable[str] = ()) -> Iterator[None]:
    """Hold ``directory``'s lock while a command writes into an existing profile (report, ingest, tune, diff, repro).

    ``writes`` are the paths (relative to ``directory``) the command writes, ``trees`` the folders it
    writes anywhere under: a directory that is not a profile, or that holds a link on the way to one of
    them, is refused before the lock file is made.
    """
    directory = Path(directory)
    if not directory.is_dir() or not is_profile_directory(directory):
        raise TracelinkError(f"{directory}: not a profile directory (no tracelink marker; run 'tracelink profile -o {directory}' first)")
    refuse_links(directory, (files.MARKER, files.LOCK, *writes), trees)
    try:
        fd = lock(directory)
    except OSError as error:
        raise TracelinkError(f"{directory}: cannot lock the profile directory ({error.strerror})") from None
    try:
        yield
    finally:
        os.close(fd)


def lock(directory: Path) -> int:
    """An exclusive, non-blocking lock on ``directory/.tracelink.lock``; refused while another run holds it.

    The lock file is opened without following a link and refused unless it is a regular file of its
    own, since tracelink writes its pid into it.
    """
    path = directory / files.LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        if os.path.islink(path):
            raise link_error(path) from None
        raise TracelinkError(f"{path}: cannot open the lock file ({error.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise TracelinkError(f"{path}: not a regular file of its own (a hard link or special file); remove it")
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
    owned = [(directory / name).resolve() for name in files.OWNED]
    for path in inputs:
        resolved = Path(path).resolve()
        if any(resolved == root or resolved.is_relative_to(root) for root in owned):
            raise TracelinkError(f"{path}: lies inside the previous profile in {directory}, which this run replaces; copy it elsewhere first")


def clear_previous(directory: Path) -> threading.Thread | None:
    """Take away what an earlier run wrote (only tracelink's own names, and the temporaries of an
    interrupted run): each is moved at once into a new hidden folder of ``directory``, which a
    background thread then removes (returned; None when there was nothing to remove). The compiler can
    start meanwhile, as renaming is much quicker than unlinking. Links inside are moved and removed, never followed; a folder
    left behind (interrupted, or not removable) is a leftover temporary the next run removes."""
    previous = [path for path in (*(directory / name for name in files.OWNED), *directory.glob(f".*{TEMPORARY_SUFFIX}")) if os.path.lexists(path)]
    if not previous:
        return None
    trash = Path(tempfile.mkdtemp(prefix=".previous.", suffix=TEMPORARY_SUFFIX, dir=directory))
    for path in previous:
        try:
            os.rename(path, trash / path.name)  # renames a link itself, never its target
        except OSError as error:
            raise TracelinkError(f"{path}: cannot remove the previous profile's file ({error.strerror})") from None
    clearing = threading.Thread(target=remove_quietly, args=(trash, directory), name="tracelink-clear", daemon=True)
    clearing.start()
    return clearing


def remove_quietly(path: Path, inside: Path) -> None:
    """:func:`remove_path`; a failure leaves ``path`` for the next run to remove."""
    with suppress(OSError):
        remove_path(path, inside)


def write_marker(directory: Path) -> None:
    """Mark ``directory`` as a tracelink profile directory of this format."""
    write_text_atomic(directory / files.MARKER, json.dumps({"format": FORMAT_VERSION, "tracelink": __version__}) + "\n")


def refuse_links(directory: Path, writes: Iterable[str], trees: Iterable[str] = ()) -> None:
    """Refuse ``directory`` when a symbolic link sits on the way to a path it writes (``writes``, relative),
    or anywhere under a folder it writes into (``trees``), where a file with a second name (a hard link)
    is refused too: writing it in place would change the other file."""
    directory = Path(directory)
    for relative in (*writes, *trees):
        path = directory
        for part in Path(relative).parts:
            path = path / part
            if os.path.islink(path):
                raise link_error(path)
    for tree in trees:
        if os.path.lexists(directory / tree) and not (directory / tree).is_dir():
            raise TracelinkError(f"{directory / tree}: exists and is not a directory")
        for root, folders, files in os.walk(directory / tree):  # os.walk enters no link
            for name in (*folders, *files):
                path = Path(root) / name
                info = path.lstat()
                if stat.S_ISLNK(info.st_mode):
                    raise link_error(path)
                if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                    raise TracelinkError(f"{path}: has another name (a hard link); tracelink writes nothing shared "
                                         "with files outside its output (remove it)")


def claim_output_directory(directory: Path, readme: str = "README.md", header: str = REPRO_HEADER) -> Path:
    """Take a folder named by ``-o`` (``repro -o``): missing, empty, or one tracelink wrote (its ``readme``
    starts with ``header``); anything else is refused. Returns it, created."""
    directory = Path(directory)
    if os.path.lexists(directory) and not directory.is_dir():
        raise TracelinkError(f"{directory}: exists and is not a directory; choose another output path")
    if directory.is_dir() and any(directory.iterdir()):
        refuse_foreign_file(directory / readme, header)
        if not (directory / readme).is_file():
            raise TracelinkError(f"{directory}: not empty and not written by tracelink; refusing to write into it "
                                 "(choose another output path)")
        refuse_links(directory, (), ("",))
    return make_directory(directory)


def refuse_foreign_file(path: Path, header: str) -> None:
    """Refuse to write ``path`` when it holds something other than a file tracelink wrote (``header`` in its
    first kilobyte) or is not a regular file."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_file():
        raise TracelinkError(f"{path}: exists and is not a regular file; choose another output path")
    try:
        with path.open("rb") as file:
            ours = header.encode() in file.read(1024)
    except OSError as error:
        raise TracelinkError(f"{path}: cannot read the existing file ({error.strerror})") from None
    if not ours:
        raise TracelinkError(f"{path}: exists and was not written by tracelink; refusing to overwrite it (choose another output path)")

"""Write files without following links, atomically, so a failure never leaves a half-written output behind.

Every file and directory tracelink writes goes through these few primitives:

- a whole file is written to a temporary made with ``O_EXCL`` under an unpredictable name (``mkstemp``)
  in its directory, then renamed over the final name: a link planted at either name is never
  followed, and a hard link planted there is replaced, not written through;
- a file written while it grows (a tool's log, trials appended) is opened with ``O_NOFOLLOW`` and
  refused unless it is a regular file of its own;
- directories are created, opened and removed one component at a time, each relative to its
  parent's descriptor with ``O_NOFOLLOW``, so no link inside the output directory is followed.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from tracelink.errors import TracelinkError, first_line

# Every temporary ends so; an interrupted run's leftovers are recognised by it and nothing else.
TEMPORARY_SUFFIX = ".tracelink.tmp"
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def link_error(path: Path) -> TracelinkError:
    return TracelinkError(f"{path}: is a symbolic link; tracelink writes nothing through links in its output (remove it)")


def refuse_link(path: Path) -> None:
    """Refuse ``path`` when it is a symbolic link."""
    if os.path.islink(path):
        raise link_error(path)


def creation_mode(mode: int) -> int:
    """``mode`` less the process's umask, as ``open`` would apply it (mkstemp makes its files 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def write_atomic(path: Path, write: Callable[[Path], object], mode: int = 0o666) -> Path:
    """Call ``write(temporary_path)`` then rename the result over ``path``; remove it on failure.

    A failed write (a full disk, ...) is one error naming ``path``, not the temporary file. A link at
    ``path`` is refused.
    """
    path = Path(path)
    refuse_link(path)
    temporary: Path | None = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX, dir=path.parent)
        temporary = Path(name)
        os.fchmod(fd, creation_mode(mode))
        os.close(fd)
        write(temporary)
        os.replace(temporary, path)
    except OSError as error:  # pyarrow's write errors name no file at all
        reason = error.strerror or first_line(error)
        raise TracelinkError(f"{path}: cannot write ({reason}); the earlier files in {path.parent} are kept") from None
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
    return path


def write_text_atomic(path: Path, text: str, mode: int = 0o666) -> Path:
    return write_atomic(path, lambda p: p.write_text(text), mode)


def copy_atomic(source: Path, path: Path, mode: int = 0o666) -> Path:
    """Copy ``source`` to ``path`` atomically (a full disk leaves no half copy; the error names ``path``)."""
    return write_atomic(path, lambda p: shutil.copyfile(source, p), mode)


def open_for_writing(path: Path, mode: str = "w", newline: str | None = None) -> IO:
    """``path`` opened for writing without following a link: ``w`` replaces the file, ``a`` appends to it.

    An existing file is appended to only when it is a regular file with no other name (a hard link
    would carry the writes to another file).
    """
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    if "a" in mode:
        flags |= os.O_APPEND
    else:
        if os.path.lexists(path) and not os.path.isdir(path):
            os.unlink(path)  # replaced, never truncated in place
        flags |= os.O_EXCL
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise link_error(path) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise TracelinkError(f"{path}: not a regular file of its own (a hard link or special file); refusing to write into it")
    return os.fdopen(fd, mode, newline=newline) if "b" not in mode else os.fdopen(fd, mode)


@contextmanager
def open_directory(path: Path, inside: Path, create: bool = False) -> Iterator[int]:
    """A descriptor of directory ``path``, walked from ``inside`` one component at a time without following links.

    ``inside`` itself is opened as named (a link the user named is theirs to follow); below it a link
    or a non-directory is refused. ``create`` makes the missing components.
    """
    relative = Path(path).relative_to(inside)
    fd = os.open(inside, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        walked = Path(inside)
        for part in relative.parts:
            walked = walked / part
            if create:
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as error:  # it names only the component
                    raise TracelinkError(f"{walked}: cannot create the directory ({error.strerror})") from None
            try:
                child = os.open(part, DIRECTORY_FLAGS, dir_fd=fd)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    if os.path.islink(walked):
                        raise link_error(walked) from None
                    raise TracelinkError(f"{walked}: exists and is not a directory") from None
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def make_directory(path: Path, inside: Path | None = None) -> Path:
    """Create directory ``path`` and its missing parents; no link below ``inside`` is followed.

    Without ``inside`` (a path the user named outside any profile) the parents are created as named.
    """
    path = Path(path)
    if inside is None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise TracelinkError(f"{path}: exists and is not a directory") from None
        except OSError as error:
            raise TracelinkError(f"{path}: cannot create the directory ({error.strerror})") from None
        return path
    Path(inside).mkdir(parents=True, exist_ok=True)
    with open_directory(path, Path(inside), create=True):
        return path


def remove_path(path: Path, inside: Path) -> None:
    """Remove the file, link or directory tree at ``path`` (under ``inside``); no link is followed.

    The tree is removed relative to its parent's descriptor, and shutil's descriptor-based walk
    unlinks the links it meets instead of entering them.
    """
    path = Path(path)
    if not os.path.lexists(path):
        return
    with open_directory(path.parent, Path(inside)) as parent:
        try:
            info = os.lstat(path.name, dir_fd=parent)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(path.name, dir_fd=parent)
        else:
            os.unlink(path.name, dir_fd=parent)

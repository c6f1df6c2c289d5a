"""The files a Ray task reads (a run's ``--input @file`` and ``--parameters`` files, a program), carried to
its node as bytes through the object store and written there as copies: no node is assumed to see the
driver's filesystem. A task's arguments name the driver's paths; :func:`moved` gives each its copy."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path


def run_files(inputs: Sequence[str], parameters: Sequence[str]) -> list[str]:
    """The files a run reads: ``@file`` / ``SHAPE=@file`` inputs and ``[SCOPE=]FILE`` parameters."""
    files = [value.partition("@")[2] for value in inputs if "@" in value]
    return files + [value.rpartition("=")[2] for value in parameters]


def pack(paths: Iterable[str]) -> dict[str, bytes]:
    """Each file's bytes, by the path the driver names it with."""
    return {path: Path(path).read_bytes() for path in dict.fromkeys(paths)}


def unpack(files: dict[str, bytes], directory: Path) -> dict[str, Path]:
    """On a node: write each file under ``directory`` with its own name (a model's module is named after
    its file), in a folder of its own (two files may share a name); the copy of each driver path."""
    copies = {}
    for index, (path, data) in enumerate(files.items()):
        copies[path] = directory / str(index) / Path(path).name
        copies[path].parent.mkdir()
        copies[path].write_bytes(data)
    return copies


def moved(value: str, copies: dict[str, Path]) -> str:
    """``value`` (an input, a parameters value or a path) with its file replaced by the node's copy (the
    longest path it ends with: ``a/w.irpa`` before ``w.irpa``)."""
    for path, copy in sorted(copies.items(), key=lambda item: -len(item[0])):
        if value.endswith(path):
            return value[: len(value) - len(path)] + str(copy)
    return value

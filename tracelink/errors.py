"""The error every stage raises for a problem with the user's input or environment, and how one reads.

Below every stage and the package root: any module imports it without importing anything else of
tracelink's.
"""

from __future__ import annotations


class TracelinkError(Exception):
    """A problem with the user's input or environment, reported as one clear line."""


class Crashed(TracelinkError):
    """A tool running the user's program was ended by a signal. ``export`` names the dispatch whose
    workgroup call took the fault, where the perf hook saw it (None otherwise)."""

    def __init__(self, message: str, export: str | None = None) -> None:
        super().__init__(message)
        self.export = export


def first_line(error: BaseException) -> str:
    """An exception's first line of text, or its type's name when it has no text.

    >>> first_line(ValueError("bad shape\\nmore detail"))
    'bad shape'
    >>> first_line(KeyError())
    'KeyError'
    """
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__

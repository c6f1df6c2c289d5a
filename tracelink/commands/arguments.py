"""Argument types and options shared by several commands (range-checked by argparse itself)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path


def at_least(minimum: int, kind: Callable[[str], int] = int) -> Callable[[str], int]:
    """An argparse type: an integer no smaller than ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def positive_float(text: str) -> float:
    """An argparse type: a finite number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
    return value


def source_map_entry(text: str) -> tuple[str, Path]:
    """An argparse type: ``OLD=NEW``, a path prefix recorded in locations and the local directory it stands for."""
    old, equals, new = text.partition("=")
    if not equals or not old or not new:
        raise argparse.ArgumentTypeError(f"expected OLD=NEW (a recorded path prefix = a local directory), got {text!r}")
    return old, Path(new)


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--source-root``, ``--source-map`` and ``--no-sources``: which source files the report may embed."""
    parser.add_argument("--source-root", action="append", type=Path, default=[],
                        help="a directory whose files the report may embed, besides the program's directory and the cwd (repeatable)")
    parser.add_argument("--source-map", action="append", type=source_map_entry, default=[], metavar="OLD=NEW",
                        help="look for files whose recorded path starts with OLD under NEW instead, e.g. "
                             "/home/someone/proj=./proj; NEW is an allowed source root (repeatable)")
    parser.add_argument("--no-sources", action="store_true", help="embed no source file in the report (for sharing it)")

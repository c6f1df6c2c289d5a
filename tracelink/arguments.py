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


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--source-root`` and ``--no-sources``: which source files the report may embed."""
    parser.add_argument("--source-root", action="append", type=Path, default=[],
                        help="a directory whose files the report may embed, besides the program's directory and the cwd (repeatable)")
    parser.add_argument("--no-sources", action="store_true", help="embed no source file in the report (for sharing it)")

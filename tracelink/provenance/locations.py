"""Normalise MLIR locations into hashable source locations, using the typed location classes.

A location is flattened into *frames*: a call-site location ``callsite(A at B)`` becomes the frames
of A followed by those of B (innermost first, like a Python stack). IREE wraps every location in the
dumps as ``callsite(<op's own loc> at <enclosing function's loc>)``; that trailing frame is dropped
by :func:`strip_enclosing`. A frame that is a name, file or fused location stays whole, so its key
is the same text in the input program and in the dumps.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir


@dataclass(frozen=True, order=True)
class Position:
    """One file:line:col a location points at."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class SourceLocation:
    """A normalised location: its frames (innermost first), names and every position in it."""

    frames: tuple[str, ...]
    names: tuple[str, ...]
    positions: tuple[Position, ...]

    @property
    def known(self) -> bool:
        return bool(self.frames)

    @property
    def name(self) -> str | None:
        return self.names[0] if self.names else None

    def display(self) -> str:
        """Short text for tables: ``name @ file:line:col``, plus ``← caller`` for call stacks."""
        where = str(self.positions[0]) if self.positions else (self.frames[0] if self.frames else "unknown")
        if len(self.frames) > 1 and len(self.positions) > 1:
            where += f" ← {self.positions[-1]}"
        return f"{self.name} @ {where}" if self.name and self.positions else where


def frames_of(loc: ir.Location) -> list[ir.Location]:
    """Flatten call-site locations into frames, innermost first; unknown locations give none."""
    frames: list[ir.Location] = []
    pending = [loc]  # an explicit stack: call-site chains of ~1,000 frames exceed Python's recursion limit
    while pending:
        current = pending.pop()
        if isinstance(current, ir.CallSiteLoc):
            pending += [current.caller, current.callee]
        elif not isinstance(current, ir.UnknownLoc):
            frames.append(current)
    return frames


def leaves(loc: ir.Location) -> list[ir.Location]:
    """Name and file locations in ``loc``, outermost wrapper first, through names, fused and call sites."""
    found: list[ir.Location] = []
    pending = [loc]
    while pending:
        current = pending.pop()
        if isinstance(current, ir.NameLoc):
            found.append(current)
            pending.append(current.child_loc)
        elif isinstance(current, ir.FileLineColLoc):
            found.append(current)
        elif isinstance(current, ir.CallSiteLoc):
            pending += [current.caller, current.callee]
        elif isinstance(current, ir.FusedLoc):
            pending += reversed(current.locations)
    return found


def names_of(loc: ir.Location) -> list[str]:
    """Every name in a location (NameLoc), outermost wrapper first, through fused and call sites."""
    return [leaf.name_str for leaf in leaves(loc) if isinstance(leaf, ir.NameLoc)]


def positions_of(loc: ir.Location) -> list[Position]:
    """Every file:line:col in a location, innermost first, through names, fused and call sites."""
    return [Position(leaf.filename, leaf.start_line, leaf.start_col) for leaf in leaves(loc) if isinstance(leaf, ir.FileLineColLoc)]


def normalise(loc: ir.Location, enclosing: frozenset[str] = frozenset()) -> SourceLocation:
    """Turn a location into a :class:`SourceLocation`, dropping a trailing enclosing-function frame."""
    frames = strip_enclosing(frames_of(loc), enclosing)
    names: list[str] = []
    positions: list[Position] = []
    for frame in frames:
        names.extend(names_of(frame))
        positions.extend(p for p in positions_of(frame) if p not in positions)
    return SourceLocation(tuple(str(f) for f in frames), tuple(dict.fromkeys(names)), tuple(positions))


def strip_enclosing(frames: list[ir.Location], enclosing: frozenset[str]) -> list[ir.Location]:
    """Drop the outermost frame when it is the location of an enclosing function (IREE's wrapper).

    A location that is nothing but a function's location (ops the compiler created with the
    function's location) says nothing about which op it came from: it becomes unknown.
    """
    if frames and str(frames[-1]) in enclosing:
        return frames[:-1]
    return frames

"""Normalise MLIR locations into hashable source locations, using the typed location classes.

A location stands for one or more *members*: a fused location ``fused[a, b]`` is the two ops a and b
the compiler merged, anything else is one member. A member is flattened into *frames*: a call-site
location ``callsite(A at B)`` becomes the frames of A followed by those of B (innermost first, like a
Python stack). A frame that is a name or file location stays whole, so its key is the same text in
the input program and in the dumps.

IREE wraps every location in the dumps as ``callsite(<op's own loc> at <enclosing function's loc>)``,
and when it fuses ops it wraps every member the same way (``fused[callsite(a at F), callsite(b at F)]``).
Frames that are the location of a function of the input program are dropped at every depth: they say
where a function starts, never which op ran. A member left with no frames is dropped, so a location
that is nothing but a function's location (ops the compiler created with it) becomes unknown.

The walks are iterative over call-site chains, so a stack thousands of frames deep does not recurse.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from iree.compiler import ir

# A location with more fused members than this keeps the first ones (no real program comes close).
MAX_MEMBERS = 256


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
    """One member of a location: its frames (innermost first), names and every position in it."""

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
        """Text for tables: ``name @ file:line:col``, then the callers (``← caller``), innermost first.

        Up to four positions are shown whole; a deeper stack shows its two innermost and its outermost,
        so two ops called through different middle frames still read differently where it matters.
        """
        if not self.positions:  # located by a name only (an ONNX node): the name is the location
            return self.name or (self.frames[0] if self.frames else "unknown")
        positions = self.positions
        shown = [str(p) for p in positions] if len(positions) <= 4 else [str(positions[0]), str(positions[1]), "…", str(positions[-1])]
        where = " ← ".join(shown)
        return f"{self.name} @ {where}" if self.name else where


@dataclass(frozen=True)
class OpLocation:
    """The normalised location of an op: its members (one, or several for a fused location)."""

    members: tuple[SourceLocation, ...]

    @property
    def known(self) -> bool:
        return bool(self.members)

    @property
    def first(self) -> SourceLocation | None:
        return self.members[0] if self.members else None

    def display(self) -> str:
        if not self.members:
            return "unknown"
        extra = f" (+{len(self.members) - 1} fused)" if len(self.members) > 1 else ""
        return self.members[0].display() + extra


UNKNOWN = OpLocation(())


def chain_pieces(loc: ir.Location) -> list[ir.Location]:
    """The pieces of a call-site chain, innermost first, without unknown pieces (iterative)."""
    pieces: list[ir.Location] = []
    pending = [loc]
    while pending:
        current = pending.pop()
        if isinstance(current, ir.CallSiteLoc):
            pending.append(current.caller)
            pending.append(current.callee)
        elif not isinstance(current, ir.UnknownLoc):
            pieces.append(current)
    return pieces


def member_frames(loc: ir.Location, enclosing: frozenset[str], text: Callable[[ir.Location], str] = str) -> list[list[ir.Location]]:
    """The members of a location, each as its frames innermost first, enclosing-function frames removed
    (a frame's ``text`` is its printed form).

    A fused piece inside a call stack (``callsite(fused[a, b] at c)``) gives one member per fused
    member, each with the rest of the stack.
    """
    choices: list[list[list[ir.Location]]] = []
    for piece in chain_pieces(loc):
        if isinstance(piece, ir.FusedLoc):
            options = [frames for member in piece.locations for frames in member_frames(member, enclosing, text)]
            if options:
                choices.append(options)
        elif text(piece) not in enclosing:
            choices.append([[piece]])
    members: list[list[ir.Location]] = []
    for combination in itertools.islice(itertools.product(*choices), MAX_MEMBERS):
        members.append([frame for part in combination for frame in part])
    return [frames for frames in members if frames]


def names_of(loc: ir.Location) -> list[str]:
    """Every name in one frame (NameLoc), outermost wrapper first."""
    names: list[str] = []
    pending = [loc]
    while pending:
        current = pending.pop()
        if isinstance(current, ir.NameLoc):
            names.append(current.name_str)
            pending.append(current.child_loc)
        elif isinstance(current, ir.CallSiteLoc):
            pending.extend([current.caller, current.callee])
        elif isinstance(current, ir.FusedLoc):
            pending.extend(reversed(list(current.locations)))
    return names


def positions_of(loc: ir.Location) -> list[Position]:
    """Every file:line:col in one frame, innermost first, through names, fused and call sites."""
    positions: list[Position] = []
    pending = [loc]
    while pending:
        current = pending.pop()
        if isinstance(current, ir.FileLineColLoc):
            positions.append(Position(current.filename, current.start_line, current.start_col))
        elif isinstance(current, ir.NameLoc):
            pending.append(current.child_loc)
        elif isinstance(current, ir.CallSiteLoc):
            pending.extend([current.caller, current.callee])
        elif isinstance(current, ir.FusedLoc):
            pending.extend(reversed(list(current.locations)))
    return positions


@dataclass(frozen=True)
class Frame:
    """One frame of a member: its printed form, its names and its positions."""

    text: str
    names: tuple[str, ...]
    positions: tuple[Position, ...]


def frame_of(loc: ir.Location) -> Frame:
    """One frame, decomposed (uncached; see :meth:`Normaliser.frame`)."""
    return Frame(str(loc), tuple(names_of(loc)), tuple(positions_of(loc)))


def source_location(frames: list[ir.Location], frame: Callable[[ir.Location], Frame] = frame_of) -> SourceLocation:
    """A member from its frames (``frame`` decomposes one)."""
    parts = [frame(loc) for loc in frames]
    names = dict.fromkeys(name for part in parts for name in part.names)
    positions = dict.fromkeys(position for part in parts for position in part.positions)
    return SourceLocation(tuple(part.text for part in parts), tuple(names), tuple(positions))


class Normaliser:
    """Normalises locations against one program's function locations, caching by location.

    The dumps repeat the same few thousand locations on every op. Locations are uniqued in their
    context and their attribute form hashes by identity there, so each distinct one is decomposed
    (and printed) once; the cache must only see locations of one context. The frames are cached too:
    a fused location repeats frames of others (a host program's few hundred frames are named by its
    locations' members many thousands of times, and printing them was most of the normalising).
    """

    def __init__(self, enclosing: frozenset[str] = frozenset()) -> None:
        self.enclosing = enclosing
        self.cache: dict[ir.Attribute, OpLocation] = {}
        self.frames_cache: dict[ir.Attribute, tuple[tuple[str, ...], ...]] = {}
        self.frame_cache: dict[ir.Attribute, Frame] = {}

    def __call__(self, loc: ir.Location) -> OpLocation:
        key = loc.attr
        found = self.cache.get(key)
        if found is None:
            members = dict.fromkeys(source_location(frames, self.frame) for frames in member_frames(loc, self.enclosing, self.text))
            found = self.cache[key] = OpLocation(tuple(members))
        return found

    def frame(self, loc: ir.Location) -> Frame:
        """One frame decomposed, once per distinct frame."""
        key = loc.attr
        found = self.frame_cache.get(key)
        if found is None:
            found = self.frame_cache[key] = frame_of(loc)
        return found

    def text(self, loc: ir.Location) -> str:
        """A frame's printed form (:meth:`frame`'s)."""
        return self.frame(loc).text

    def frames(self, loc: ir.Location) -> tuple[tuple[str, ...], ...]:
        """The frames of each member of ``loc`` (those of ``self(loc).members``), without reading the
        members' names and positions: most of the time on the host program's big fused locations."""
        key = loc.attr
        normalised = self.cache.get(key)
        if normalised is not None:
            return tuple(member.frames for member in normalised.members)
        found = self.frames_cache.get(key)
        if found is None:
            members = member_frames(loc, self.enclosing, self.text)
            found = self.frames_cache[key] = tuple(dict.fromkeys(tuple(self.text(frame) for frame in frames) for frames in members))
        return found


def normalise(loc: ir.Location, enclosing: frozenset[str] = frozenset()) -> OpLocation:
    """Turn a location into an :class:`OpLocation` (uncached; see :class:`Normaliser`)."""
    return Normaliser(enclosing)(loc)

"""Where each op of an MLIR file is written: its text line, and the source ops its location names.

An op's location says where it *came from*; the report also needs where it *is* in the file shown
(the input program, an executable dump). MLIR keeps no text position for an op that has a location,
so the file is parsed twice: as written, and with every ``loc(...)`` removed (line breaks kept), where
the parser gives each op the file:line:col of its own text. Both parses hold the same ops in the same
order; pairing them gives each op's location and its line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from iree.compiler import ir

from tracelink.ir_utils import new_context, walk
from tracelink.provenance.locations import Normaliser
from tracelink.provenance.program import FUNCTION_OPS

ALIAS_DEFINITION = re.compile(r"^#[\w.$-]+\s*=\s*loc\(")


@dataclass
class TextOp:
    """One op of a parsed file: its name, the line its text starts on and its location's frames keys."""

    name: str
    line: int
    keys: list[str]  # JSON frames keys of the location, or of each member of a fused location


# The rest of a string literal after its opening quote; written as runs of plain characters between
# escapes, which the regex engine takes a run at a time (one alternation per character is quadratic
# on a long name).
STRING_REST = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"?', re.S)
STRING_OR_LOC = re.compile(r'"|(?<![\w$.@%#!^-])loc\(')
STRING_OR_PAREN = re.compile(r'["()]')


def skip_string(text: str, start: int) -> int:
    """Index just past the string literal opening at ``start``."""
    return STRING_REST.match(text, start + 1).end()


def strip_locations(text: str) -> str:
    """``text`` without any ``loc(...)`` nor location alias definition, every line break kept."""
    text = "\n".join("" if ALIAS_DEFINITION.match(line) else line for line in text.split("\n"))
    pieces: list[str] = []
    index = copied = 0
    while (found := STRING_OR_LOC.search(text, index)) is not None:
        if found.group() == '"':
            index = skip_string(text, found.start())
            continue
        start, depth, cursor = found.start(), 0, found.end() - 1  # cursor on the "(" of "loc("
        while (token := STRING_OR_PAREN.search(text, cursor)) is not None:
            if token.group() == '"':
                cursor = skip_string(text, token.start())
                continue
            depth += 1 if token.group() == "(" else -1
            cursor = token.end()
            if depth == 0:
                break
        removed = text[start:cursor]
        before = text[copied:start]
        pieces.append(before.rstrip(" ") if "\n" not in removed else before)
        pieces.append("\n" * removed.count("\n"))
        index = copied = cursor
    pieces.append(text[copied:])
    return "".join(pieces)


def location_keys(loc: ir.Location, normalise: Normaliser) -> list[str]:
    """Frame keys (as the provenance graph stores each member's frames) a location may match, one per member."""
    keys = []
    for member in normalise(loc).members:
        keys.append(json.dumps(list(member.frames)))
        if not normalise.enclosing and len(member.frames) > 1:  # program unknown: IREE's outer frame may still be there
            keys.append(json.dumps(list(member.frames[:-1])))
    return list(dict.fromkeys(keys))


def text_ops(text: str, enclosing: frozenset[str] | None, context: ir.Context | None = None, path: Path | None = None) -> list[TextOp] | None:
    """Every op of an MLIR text with its text line and location keys; None if the text does not parse.

    Give the ``path`` the text was read from when ops may lack a location: the parser then names
    that file in their locations, as it did when the profile was built. With ``enclosing`` None,
    the enclosing-function locations are those of the text's own top-level functions (an input program).
    """
    found, _ = parse_text_ops(text, enclosing, context, path)
    return found


def parse_text_ops(text, enclosing, context, path) -> tuple[list[TextOp] | None, frozenset[str]]:
    context = context or new_context()
    try:
        with context:
            written = ir.Module.parseFile(str(path), context) if path is not None else ir.Module.parse(text, context)
            stripped = ir.Module.parse(strip_locations(text), context)
            if enclosing is None:
                enclosing = frozenset(str(op.operation.location) for op in written.body.operations if op.operation.name in FUNCTION_OPS)
            pairs = list(zip(walk(written.operation), walk(stripped.operation), strict=True))
            normaliser = Normaliser(enclosing)  # one per parse: the ops of a program repeat few locations
            found = []
            for op, bare in pairs:
                if op.name != bare.name:
                    return None, enclosing
                position = bare.location
                line = position.start_line if isinstance(position, ir.FileLineColLoc) else 0
                found.append(TextOp(op.name, line, location_keys(op.location, normaliser)))
            return found, enclosing
    except (ir.MLIRError, ValueError, TypeError, AttributeError):
        return None, enclosing or frozenset()


def program_text_ops(path: Path) -> tuple[list[TextOp] | None, frozenset[str]]:
    """:func:`text_ops` of the input program, and the locations of its functions (IREE's outer frames)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return None, frozenset()
    return parse_text_ops(text, None, None, Path(path).resolve())


@dataclass
class DumpText:
    """An executable dump as the report shows it: its text without locations, and its ops (:func:`text_ops`)."""

    stripped: str
    ops: list[TextOp] | None


@dataclass
class SourceTexts:
    """The texts one report shows, each parsed once: the input program's (:func:`program_text_ops`) and each
    executable dump's (:class:`DumpText`, against the program's function locations). `tracelink profile`
    parses them beside the compiler (:mod:`tracelink.pipeline.provenance_job`) and hands them to the report;
    a report given none parses what it shows."""

    programs: dict[Path, tuple[list[TextOp] | None, frozenset[str]]] = field(default_factory=dict)
    dumps: dict[tuple[Path, frozenset[str]], DumpText | None] = field(default_factory=dict)

    def program(self, path: Path) -> tuple[list[TextOp] | None, frozenset[str]]:
        """:func:`program_text_ops` of ``path``."""
        key = Path(path).resolve()
        if key not in self.programs:
            self.programs[key] = program_text_ops(key)
        return self.programs[key]

    def dump(self, path: Path, enclosing: frozenset[str], context: Callable[[], ir.Context]) -> DumpText | None:
        """An executable dump's :class:`DumpText`; None when it cannot be read. One not parsed yet is parsed in
        the context ``context()`` gives: each process makes its own (the report's forked child too), lazily."""
        key = (Path(path).resolve(), enclosing)
        if key not in self.dumps:
            try:
                text = key[0].read_text(errors="replace")
            except OSError:
                text = None
            self.dumps[key] = None if text is None else DumpText(strip_locations(text), text_ops(text, enclosing, context()))
        return self.dumps[key]

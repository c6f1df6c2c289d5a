"""Check a program's text before anything parses or compiles it.

Two things in program text are dangerous outside the program itself:

- symbol names become file names: iree-compile names phase dumps after the module's symbol and
  executable dumps after its functions, so ``module @"../../x"`` writes outside the output directory;
- the MLIR Python bindings abort the whole process (no exception) on a string that is not valid UTF-8,
  e.g. a location name written with the escape ``"bad\\FFname"``.

Both are refused here with the line they are on, before iree-compile starts.
"""

from __future__ import annotations

import re
from pathlib import Path

from tracelink import TracelinkError

BYTECODE_MAGIC = b"ML\xefR"
# A string literal (escapes included; MLIR strings never span lines) or a comment to skip. The loop is
# unrolled (runs of plain characters, then one escape) so a weights blob of 90 MB (an exported
# ResNet-18) scans in about a second, where one alternation per character took 50 s.
TOKEN = re.compile(rb'"([^"\\\n]*(?:\\.[^"\\\n]*)*)"|//[^\n]*')
ESCAPE = re.compile(rb"\\([0-9a-fA-F]{2}|.)", re.DOTALL)
SIMPLE_ESCAPES = {b"n": b"\n", b"t": b"\t", b'"': b'"', b"\\": b"\\"}
# Characters that make a name a path or a hidden/odd file: separators, NUL and other controls.
UNSAFE_NAME_CHARS = re.compile(r"[/\\\x00-\x1f\x7f]")


def unescape(literal: bytes) -> bytes:
    """The bytes an MLIR string literal stands for (``\\XX`` hex, ``\\n``, ``\\t``, ``\\"``, ``\\\\``)."""
    if b"\\" not in literal:
        return literal

    def one(match: re.Match[bytes]) -> bytes:
        code = match.group(1)
        return bytes([int(code, 16)]) if len(code) == 2 else SIMPLE_ESCAPES.get(code, code)

    return ESCAPE.sub(one, literal)


def unsafe_symbol_reason(name: str) -> str | None:
    """Why a symbol name cannot become part of a file name, or None when it can."""
    if name in (".", ".."):
        return "is a relative directory name"
    if UNSAFE_NAME_CHARS.search(name):
        return "contains a path separator or a control character"
    if len(name.encode()) > 200:
        return "is longer than 200 bytes"
    return None


def line_of(text: bytes, offset: int) -> int:
    return text.count(b"\n", 0, offset) + 1


def check_program_text(path: Path) -> None:
    """Refuse a program whose text is not UTF-8, holds a non-UTF-8 string or an unsafe symbol name."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as error:
        raise TracelinkError(f"{path}: cannot read the program ({error.strerror})") from None
    if text.startswith(BYTECODE_MAGIC):
        text = bytecode_as_text(path)
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TracelinkError(f"{path}:{line_of(text, error.start)}: the program text is not valid UTF-8") from None
    for match in TOKEN.finditer(text):
        literal = match.group(1)
        if literal is None:
            continue
        check_literal(path, text, match, unescape(literal))


def check_literal(path: Path, text: bytes, match: re.Match[bytes], value: bytes) -> None:
    """One string literal: valid UTF-8, and a file-name-safe name when it is a symbol (``@"..."``)."""
    try:
        decoded = value.decode("utf-8")
    except UnicodeDecodeError:
        raise TracelinkError(
            f"{path}:{line_of(text, match.start())}: string {match.group(0)[:80].decode('ascii', 'replace')} is not valid UTF-8 "
            "once its escapes are decoded (the MLIR bindings cannot read it)"
        ) from None
    if match.start() > 0 and text[match.start() - 1 : match.start()] == b"@":
        reason = unsafe_symbol_reason(decoded)
        if reason is not None:
            raise TracelinkError(
                f"{path}:{line_of(text, match.start())}: symbol name {decoded!r} {reason}; IREE names dump files after "
                "symbols, so rename it"
            )


def bytecode_as_text(path: Path) -> bytes:
    """MLIR bytecode printed as text (generic form, binary-safe), so the same checks apply to it."""
    from tracelink.provenance.ir_utils import new_context, parse_file  # the bindings load only for bytecode

    module = parse_file(path, new_context())
    return module.operation.get_asm(binary=True, print_generic_op_form=True)

"""Check a program before iree-compile sees it.

Two things in a program are dangerous outside the program itself:

- some symbol names become file names (see :func:`file_name_symbols`), so ``module @"../../x"`` makes
  iree-compile write outside the output directory, whatever syntax names it: pretty, generic
  (``"builtin.module"() <{sym_name = "../../x"}>``) or MLIR bytecode;
- the MLIR Python bindings abort the whole process (no exception) on a string that is not valid UTF-8,
  e.g. a location name written with the escape ``"bad\\FFname"``.

The text's strings are checked first, before the bindings parse it; then the parsed program's
file-name symbols. Either is refused with its line, before iree-compile starts. Other symbols (a
TensorFlow export's globals ``@"__iree_flow_bert/embeddings/..."``) never reach a file name and may
hold anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from iree.compiler import ir

from tracelink.errors import TracelinkError
from tracelink.ir_utils import new_context, parse_file

BYTECODE_MAGIC = b"ML\xefR"
# A string literal (escapes included; MLIR strings never span lines) or a comment to skip. The loop is
# unrolled (runs of plain characters, then one escape) so a large weights blob scans in linear time,
# where one alternation per character was many times slower.
TOKEN = re.compile(rb'"([^"\\\n]*(?:\\.[^"\\\n]*)*)"|//[^\n]*')
ESCAPE = re.compile(rb"\\([0-9a-fA-F]{2}|.)", re.DOTALL)
SIMPLE_ESCAPES = {b"n": b"\n", b"t": b"\t", b'"': b'"', b"\\": b"\\"}
# Characters that make a name a path or a hidden/odd file: separators, NUL and other controls.
UNSAFE_NAME_CHARS = re.compile(r"[/\\\x00-\x1f\x7f]")
# Executable variants name the dumped binaries (`<module>_<executable>_<variant>.so`).
VARIANT_OPS = frozenset({"hal.executable.variant"})


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
    """Refuse a program that is not UTF-8, holds a non-UTF-8 string or names a dump file unsafely."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as error:
        raise TracelinkError(f"{path}: cannot read the program ({error.strerror})") from None
    bytecode = text.startswith(BYTECODE_MAGIC)
    if not bytecode:
        check_strings(path, text)
    module = parse_file(path, new_context())
    if bytecode:
        # printed as text (generic form, binary-safe), so the same string checks apply to it
        check_strings(path, module.operation.get_asm(binary=True, print_generic_op_form=True))
    for op, name in file_name_symbols(module):
        reason = unsafe_symbol_reason(name)
        if reason is not None:
            where = f"{path}:{op.location.start_line}" if not bytecode and isinstance(op.location, ir.FileLineColLoc) else str(path)
            raise TracelinkError(
                f"{where}: symbol name {name!r} of {op.name} {reason}; IREE names dump files after it, so rename it"
            )


def check_strings(path: Path, text: bytes) -> None:
    """Every string literal of the text is valid UTF-8 once its escapes are decoded."""
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TracelinkError(f"{path}:{line_of(text, error.start)}: the program text is not valid UTF-8") from None
    for match in TOKEN.finditer(text):
        literal = match.group(1)
        if literal is None:
            continue
        try:
            unescape(literal).decode("utf-8")
        except UnicodeDecodeError:
            raise TracelinkError(
                f"{path}:{line_of(text, match.start())}: string {match.group(0)[:80].decode('ascii', 'replace')} is not valid UTF-8 "
                "once its escapes are decoded (the MLIR bindings cannot read it)"
            ) from None


def file_name_symbols(module: ir.Module) -> Iterator[tuple[ir.Operation, str]]:
    """The symbols IREE 3.13 names files after, with their names.

    - the module: phase dumps are ``<module>.<n>.<phase>.mlir``, the name taken as parsed (IREE
      sanitises it only later, for executable dumps);
    - every top-level function with a body: its dispatches are outlined into executables
      ``<function>_dispatch_<n>``, whose sources, configurations, benchmarks and binaries are dumped as
      ``<module>_<executable>...``, the function's part unsanitised;
    - executables written in the program (``hal.executable``, ``hal.executable.source``,
      ``flow.executable``, ...: top-level symbols with a body too) and their ``hal.executable.variant``
      ops, which name the dumped binaries and benchmarks.

    Globals, declarations and everything inside a function never reach a file name.
    """
    top = module.operation
    if "sym_name" in top.attributes:
        yield top, symbol_text(top)
    for child in top.regions[0].blocks[0].operations:
        child = child.operation
        if "sym_name" not in child.attributes or not has_body(child):
            continue
        yield child, symbol_text(child)
        if "function_type" in child.attributes:  # a function's ops hold no variant (and are most of the program)
            continue
        for region in child.regions:
            for block in region.blocks:
                for inner in block.operations:
                    inner = inner.operation
                    if inner.name in VARIANT_OPS and "sym_name" in inner.attributes:
                        yield inner, symbol_text(inner)


def has_body(op: ir.Operation) -> bool:
    return any(len(region.blocks) > 0 for region in op.regions)


def symbol_text(op: ir.Operation) -> str:
    """The symbol name, never through a Python str conversion the bindings could abort on."""
    return ir.StringAttr(op.attributes["sym_name"]).value_bytes.decode("utf-8", "replace")

"""Text from program locations made safe for XML (GraphML, the HTML report) and for a terminal.

XML 1.0 cannot hold NUL and most other control characters, which MLIR string escapes put in names
(``loc("a\\01b"(...))``); each becomes a visible ``\\xNN`` escape instead.

A terminal obeys control characters: an ESC in a location's file name or a Tracy zone name could set the
window title, write the clipboard (OSC 52) or clear the screen. Every console tracelink prints with is a
:class:`TerminalConsole`, which writes each such character of the text it prints as a visible escape,
and its own colours and cursor moves as they are.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.console import Console
from rich.segment import Segment

if TYPE_CHECKING:  # the command line imports this module for its consoles, networkx only when a graph is written
    import networkx as nx

XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` with every character XML cannot hold written as ``\\xNN`` (or ``\\uNNNN``)."""
    return XML_INVALID.sub(lambda match: escaped(match.group()), text)


# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), the bidirectional
# overrides and isolates that make a terminal show text in another order than it is, and lone
# surrogates (the bytes of a file name that is not UTF-8, which no terminal encoding can write).
TERMINAL_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def escaped(character: str) -> str:
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(text: str) -> str:
    """``text`` with every character a terminal would act on (but tab and newline) written as ``\\xNN``."""
    return TERMINAL_UNSAFE.sub(lambda match: escaped(match.group()), text)


class TerminalConsole(Console):
    """A rich console that prints control characters of its text as escapes (see the module docstring)."""

    def _render_buffer(self, buffer) -> str:
        # rich's own control sequences are the segments marked as control; every other text is printed
        return super()._render_buffer(segment if segment.control else Segment(terminal_text(segment.text), segment.style)
                                      for segment in buffer)


def xml_safe_graph(graph: nx.DiGraph) -> nx.DiGraph:
    """A copy of ``graph`` whose string ids and attributes XML can hold (the graph itself is unchanged)."""
    import networkx as nx

    def clean(value: object) -> object:
        return xml_text(value) if isinstance(value, str) else value

    safe = nx.DiGraph(**{k: clean(v) for k, v in graph.graph.items()})
    safe.add_nodes_from((clean(node), {k: clean(v) for k, v in data.items()}) for node, data in graph.nodes(data=True))
    safe.add_edges_from((clean(a), clean(b), {k: clean(v) for k, v in data.items()}) for a, b, data in graph.edges(data=True))
    return safe

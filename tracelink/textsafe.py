"""Text from program locations made safe for XML (GraphML, the HTML report).

XML 1.0 cannot hold NUL and most other control characters, which MLIR string escapes put in names
(``loc("a\\01b"(...))``); each becomes a visible ``\\xNN`` escape instead.
"""

from __future__ import annotations

import re

import networkx as nx

XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` with every character XML cannot hold written as ``\\xNN`` (or ``\\uNNNN``)."""
    return XML_INVALID.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def xml_safe_graph(graph: nx.DiGraph) -> nx.DiGraph:
    """A copy of ``graph`` whose string ids and attributes XML can hold (the graph itself is unchanged)."""

    def clean(value: object) -> object:
        return xml_text(value) if isinstance(value, str) else value

    safe = nx.DiGraph(**{k: clean(v) for k, v in graph.graph.items()})
    safe.add_nodes_from((clean(node), {k: clean(v) for k, v in data.items()}) for node, data in graph.nodes(data=True))
    safe.add_edges_from((clean(a), clean(b), {k: clean(v) for k, v in data.items()}) for a, b, data in graph.edges(data=True))
    return safe

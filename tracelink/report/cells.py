"""Small pieces of markup several sections of the report page share: short locations, verdict badges, number cards."""

from __future__ import annotations

from lxml import etree

from tracelink.report.fmt import el


def short_loc(loc: str, limit: int = 48) -> str:
    """A location for a narrow cell: file names without their directories."""
    parts = []
    for piece in loc.split(" "):
        if "/" in piece and ":" in piece:
            piece = piece.rsplit("/", 1)[1]
        parts.append(piece)
    text = " ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def verdict_badge(verdict: str) -> etree._Element:
    """A coloured badge naming what bounds a dispatch (``compute-bound`` → ``compute``)."""
    node = etree.Element("span", {"class": f"bound {verdict.split('-')[0] or 'none'}"})
    node.text = verdict.removesuffix("-bound") if verdict else "–"
    return node


def stat_card(parent, value: str, label: str, title: str | None = None) -> None:
    """A number with what it is under it (a card of a ``cards`` row)."""
    card = el(parent, "div", class_="card", title=title)
    el(card, "div", class_="big", text=value)
    el(card, "div", class_="muted", text=label)

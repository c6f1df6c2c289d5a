"""The report page's audit section: what the mapping could not explain, or explains with a caveat,
its long lists folded by reason with counts."""

from __future__ import annotations

from collections.abc import Callable

from tracelink.report.cells import short_loc
from tracelink.report.fmt import el
from tracelink.report.model import ReportModel, short_export
from tracelink.report.widgets import bar, chips, grid_table, op_link, section


def audit_section(main, model: ReportModel) -> None:
    audit = model.audit or {}
    node = section(main, "audit", "Audit", "What the mapping could not explain, or explains with a caveat.")
    ops_without_location(node, audit.get("ops_without_location", []))
    ops_without_dispatch(node, model, audit.get("ops_without_dispatch", []))
    ops_split(node, model, audit.get("ops_split", []))
    shared_executables(node, model, audit.get("shared_executables", []))


def ops_without_location(node, names: list) -> None:
    if not audit_heading(node, f"Compute ops without a location ({len(names)})", None, names, "None: every compute op of the input has a location."):
        return
    counts: dict[str, int] = {}
    for name in names:
        counts[str(name)] = counts.get(str(name), 0) + 1
    group = el(node, "details", class_="reason")
    el(group, "summary", None, f"{len(counts)} op names")
    ul = el(group, "ul", class_="plain")
    for name, count in sorted(counts.items()):
        el(ul, "li", class_="mono", text=f"{name} × {count}" if count > 1 else name)


def ops_without_dispatch(node, model: ReportModel, missing: list[dict]) -> None:
    if not audit_heading(node, f"Compute ops in no dispatch ({len(missing)})", None, missing, "None."):
        return

    def cells(row, item: dict) -> None:
        el(row, "td", class_="mono", text=str(item.get("op_names", "")))

    folded_by_reason(node, model, missing, lambda item: str(item.get("reason", "")), ("op", "location", "op names"), cells)


def ops_split(node, model: ReportModel, split: list[dict]) -> None:
    if not audit_heading(node, f"Ops split across dispatches ({len(split)})",
                         "A source op computed in several dispatches: split by the compiler, or recomputed as a fused producer in each consumer.",
                         split, "None: every source op is computed by one dispatch."):
        return

    def cells(row, item: dict) -> None:
        roles = dict(model.ops.get(str(item.get("op")), {}).get("call_sites", []))
        chips(el(row, "td"), {int(i): roles.get(int(i)) for i in item.get("call_sites", [])}, 24)
        el(row, "td", None, ", ".join(item.get("roles", [])))

    folded_by_reason(node, model, split, lambda item: split_reason(item.get("roles", [])), ("op", "location", "call sites", "roles"), cells)


def audit_heading(node, title: str, note: str | None, items: list, empty: str) -> bool:
    """A part's heading and note; with no ``items``, the ``empty`` line instead of a table (and False)."""
    el(node, "h3", None, title)
    if note:
        el(node, "p", class_="note", text=note)
    if not items:
        el(node, "p", class_="muted", text=empty)
    return bool(items)


def folded_by_reason(node, model: ReportModel, items: list[dict], reason: Callable[[dict], str], columns: tuple[str, ...], cells: Callable) -> None:
    """Audited ops folded by reason, the most frequent first: each a table of op, location, then ``cells``."""
    by_reason: dict[str, list[dict]] = {}
    for item in items:
        by_reason.setdefault(reason(item), []).append(item)
    for why, members in sorted(by_reason.items(), key=lambda pair: -len(pair[1])):
        group = el(node, "details", class_="reason")
        el(group, "summary", None, f"{why} ({len(members)})")
        body = grid_table(group, columns)
        for item in members:
            row = el(body, "tr")
            op_link(el(row, "td", class_="mono"), model, str(item.get("op", "")))
            el(row, "td", class_="mono", text=str(item.get("loc", "")))
            cells(row, item)


def shared_executables(node, model: ReportModel, shared: list[dict]) -> None:
    if not audit_heading(node, f"Executables shared by several call sites ({len(shared)})",
                         "IREE compiles identical dispatches once; a tool that knows one location per executable (e.g. Tracy's zones) "
                         "cannot tell these call sites apart.", shared, "None: each executable serves one call site."):
        return
    sites = {site["index"]: site for site in model.call_sites}
    group = el(node, "details", class_="reason")
    el(group, "summary", None, f"{len(shared)} executables serving {sum(len(item.get('call_sites', [])) for item in shared)} call sites")
    body = grid_table(group, ("export", "call sites", "total share", "sources"))
    for item in shared:
        indices = [int(i) for i in item.get("call_sites", [])]
        row = el(body, "tr")
        el(row, "td", class_="mono", title=str(item.get("export", "")), text=short_export(str(item.get("export", ""))))
        chips(el(row, "td"), indices, 24)
        bar(el(row, "td"), sum((sites[i]["share"] or 0.0) for i in indices if i in sites))
        el(row, "td", class_="src", text="; ".join(dict.fromkeys(short_loc(sites[i]["loc"], 40) for i in indices if i in sites)))


def split_reason(roles: list[str]) -> str:
    """Why an op is in several dispatches, from its roles there: split (root of several), recomputed (a producer), or both."""
    distinct = set(roles)
    if distinct == {"root"}:
        return "split by the compiler (root op of several dispatches)"
    if distinct == {"root", "producer"}:
        return "root op of a dispatch, recomputed as a fused producer in others"
    return "recomputed as a fused producer in each consumer" if distinct == {"producer"} else "in several dispatches as " + ", ".join(sorted(distinct))

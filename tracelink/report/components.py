"""The report's "which part of my model" view: the component tree and the op kinds across repeated layers.

The tree is nested ``<details>`` elements (collapsible to any depth without script): each component
shows its inclusive share as a bar, its self share and its time per iteration. Components that are
the only child of their parent, and the top level, start open. Data from
:mod:`tracelink.aggregate.components`.
"""

from __future__ import annotations

import pandas as pd

from tracelink.aggregate.components import NO_SCOPE
from tracelink.report.fmt import el, ns, pct
from tracelink.report.summary import ratio_text, reference_by_component
from tracelink.report.model import ReportModel
from tracelink.report.widgets import bar, grid_table

KIND_ROWS = 12


def components_view(parent, model: ReportModel) -> None:
    """Time by component (when some op has a name scope), then by op kind across repeated layers."""
    iterations = max(int(model.summary.get("iterations") or 1), 1)
    components = model.profile.shown.components
    if not components.empty and not (components["component"] == NO_SCOPE).all():  # no names, no tree: the lines say it
        el(parent, "h3", None, "Time by component")
        el(parent, "p", class_="note", text="Name scopes of the ops' locations (a JAX or ONNX scope, a torch module path); "
                                            "the bar is inclusive time, 'self' the component's own ops. Click to fold.")
        tree = el(parent, "div", id="components", class_="ctree")
        component_nodes(tree, components, iterations, reference_by_component(model.profile))
    kinds = model.profile.shown.kinds
    if not kinds.empty and (kinds["pattern"] == NO_SCOPE).all():  # no layers to fold: one line, the lines table follows
        line = el(parent, "p", id="kinds-line", class_="kinds-line")
        el(line, "strong", None, "Time by op kind: ")
        line[-1].tail = " · ".join(f"{row.kind} {pct(row.share)}" for row in kinds.head(KIND_ROWS).itertuples())
    elif not kinds.empty:
        el(parent, "h3", None, "Time by op kind across repeated layers")
        body = grid_table(parent, ("kind", "in", "share", "per iteration", "instances"), id="kinds-by-layer", class_="grid",
                          titles=(None, "the component, numbers read as * so repeated layers fold together", None, None, "components folded into the row"))
        for row in kinds.head(KIND_ROWS).itertuples():
            tr = el(body, "tr")
            el(tr, "td", class_="mono", text=row.kind)
            el(tr, "td", class_="mono", text=row.pattern)
            bar(el(tr, "td"), row.share)
            el(tr, "td", class_="num", text=ns(row.total_ns / iterations))
            el(tr, "td", class_="num", text=str(row.instances))


def component_nodes(tree, components: pd.DataFrame, iterations: int, reference: dict[str, float] | None = None) -> None:
    """Every component inside its parent's element, depth-first (a loop, not recursion: a name can nest deep);
    with ``reference`` (the framework's own run's time per call by component), its time and IREE's over it."""
    children: dict[str, list[dict]] = {}
    for row in components.to_dict("records"):  # depth-first already, hottest sibling first
        children.setdefault(row["parent"], []).append(row)
    pending = [(tree, row, len(children[""])) for row in reversed(children.get("", []))]
    while pending:
        parent, row, siblings = pending.pop()
        inner = children.get(row["component"], [])
        node = el(parent, "details" if inner else "div", class_="comp" if inner else "comp leaf", data_c=row["component"],
                  open="open" if inner and (row["depth"] == 1 or siblings == 1) else None)
        head = el(node, "summary" if inner else "div", class_="chead")
        el(head, "span", class_="mono cname", title=row["component"], text=row["name"])
        bar(head, row["inclusive_share"])
        el(head, "span", class_="num muted", text=f"self {pct(row['self_share'])} · {ns(row['inclusive_ns'] / iterations)}/iter")
        if reference is not None:
            theirs = reference.get(row["component"])
            text = "reference: none" if theirs is None else f"reference {ns(theirs)} · IREE/ref. {ratio_text(row['inclusive_ns'] / iterations, theirs)}"
            el(head, "span", class_="num muted reference", text=text)
        pending.extend((node, child, len(inner)) for child in reversed(inner))

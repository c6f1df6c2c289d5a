"""Time by component (name scope or Python module path) and by op kind across repeated layers.

A source op's *component* is its name scope: the name of its location (a ``NameLoc``) split on
``/`` without the last segment, which is the op itself — JAX ``Dense_0/dot_general`` → ``Dense_0``,
ONNX ``conv1/7x7_s2`` → ``conv1``, a torch module path ``encoder/layers.3/attention/matmul`` →
``encoder/layers.3/attention``. tracelink's ONNX import prefixes names with the op type
(``onnx.Conv:conv1/7x7_s2``); that prefix is not part of the scope. Ops whose name has no ``/`` (or
that have no name) go to :data:`NO_SCOPE`.
"""

from __future__ import annotations

import re

import pandas as pd

from tracelink.provenance.regions import INIT_OPS

NO_SCOPE = "(no scope)"
SEPARATOR = "/"
ONNX_PREFIX = re.compile(r"^onnx\.[^/:]+:")  # "onnx.Conv:" that tracelink's ONNX import puts before a node name
LAYER_INDEX = re.compile(r"\d+")
COMPONENT_COLUMNS = ["component", "name", "depth", "parent", "self_ns", "inclusive_ns", "self_share", "inclusive_share", "ops"]
KIND_COLUMNS = ["pattern", "kind", "total_ns", "share", "instances", "ops"]


def component_of(name: str | None) -> str:
    """The component path of an op named ``name``: its name scope, or :data:`NO_SCOPE`."""
    parts = [part for part in ONNX_PREFIX.sub("", str(name or "")).split(SEPARATOR)]
    scope = SEPARATOR.join(parts[:-1]).strip(SEPARATOR)
    return scope or NO_SCOPE


def component_table(ops: pd.DataFrame, grand_total: float | None = None) -> pd.DataFrame:
    """Time per component, every level of the scope tree, as CPU profilers give per function.

    ``ops`` has one row per source op with ``name`` and ``total_ns`` (its self time, as in
    ``source_ops.csv``). Returns one row per component and per ancestor of one (``encoder``,
    ``encoder/layer_3``, ``encoder/layer_3/attention``): ``self_ns`` is the time of the ops whose
    component it is, ``inclusive_ns`` adds every descendant's; shares are over ``grand_total`` (default:
    the ops' total time). ``depth`` counts from 1, ``parent`` is "" at the top, ``ops`` counts the ops
    with time that it holds itself. Ordered depth-first, siblings by inclusive time.
    """
    timed = ops[ops["total_ns"] > 0] if not ops.empty else ops
    if timed.empty:
        return pd.DataFrame(columns=COMPONENT_COLUMNS)
    own = timed.assign(component=timed["name"].map(component_of)).groupby("component")["total_ns"].agg(["sum", "size"])
    self_ns: dict[str, float] = {}
    inclusive: dict[str, float] = {}
    counts: dict[str, int] = {}
    for component, (time, count) in own.iterrows():
        self_ns[component] = self_ns.get(component, 0.0) + float(time)
        counts[component] = counts.get(component, 0) + int(count)
        for path in ancestors(component):
            inclusive[path] = inclusive.get(path, 0.0) + float(time)
    total = grand_total if grand_total else float(timed["total_ns"].sum())
    children: dict[str, list[str]] = {}
    for path in inclusive:
        children.setdefault(parent_of(path), []).append(path)
    rows = []
    pending = sorted(children.get("", []), key=lambda path: inclusive[path])
    while pending:  # depth-first, hottest sibling first
        path = pending.pop()
        rows.append({
            "component": path, "name": path.rsplit(SEPARATOR, 1)[-1] if path != NO_SCOPE else path, "depth": depth_of(path),
            "parent": parent_of(path), "self_ns": self_ns.get(path, 0.0), "inclusive_ns": inclusive[path],
            "self_share": self_ns.get(path, 0.0) / total, "inclusive_share": inclusive[path] / total, "ops": counts.get(path, 0),
        })
        pending.extend(sorted(children.get(path, []), key=lambda child: inclusive[child]))
    return pd.DataFrame(rows, columns=COMPONENT_COLUMNS)


def ancestors(component: str) -> list[str]:
    """A component and every scope above it: ``a/b/c`` → ``a``, ``a/b``, ``a/b/c``."""
    if component == NO_SCOPE:
        return [component]
    parts = component.split(SEPARATOR)
    return [SEPARATOR.join(parts[: i + 1]) for i in range(len(parts))]


def parent_of(component: str) -> str:
    return component.rsplit(SEPARATOR, 1)[0] if SEPARATOR in component and component != NO_SCOPE else ""


def depth_of(component: str) -> int:
    return 1 if component == NO_SCOPE else component.count(SEPARATOR) + 1


def kind_table(ops: pd.DataFrame, grand_total: float | None = None) -> pd.DataFrame:
    """Time per op kind across repeated layers.

    Each source op with time (``name``, ``total_ns``, and ``op_kinds``, its compute op names; its kind is
    the first that is not an accumulator's fill, which the frontend writes first at a matmul's location) is grouped by its kind and its component with every number replaced by ``*``
    (``encoder/layers.3/attention`` → ``encoder/layers.*/attention``), so the 24 attention softmaxes of
    a 24-layer encoder are one row. ``instances`` counts the distinct components folded into the row.
    Ordered by time.
    """
    timed = ops[ops["total_ns"] > 0] if not ops.empty else ops
    if timed.empty:
        return pd.DataFrame(columns=KIND_COLUMNS)
    kinds = timed["op_kinds"] if "op_kinds" in timed else timed["op_names"]
    components = timed["name"].map(component_of)
    frame = pd.DataFrame({
        "pattern": components.map(lambda component: component if component == NO_SCOPE else LAYER_INDEX.sub("*", component)),
        "kind": kinds.fillna("").astype(str).map(op_kind),
        "component": components, "total_ns": timed["total_ns"].astype(float),
    })
    total = grand_total if grand_total else float(frame["total_ns"].sum())
    table = frame.groupby(["pattern", "kind"], as_index=False).agg(
        total_ns=("total_ns", "sum"), instances=("component", "nunique"), ops=("component", "size"),
    )
    table["share"] = table["total_ns"] / total
    return table[KIND_COLUMNS].sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def op_kind(names: str) -> str:
    """An op's kind from its compute op names (``linalg.fill, linalg.matmul`` → ``linalg.matmul``)."""
    kinds = [name for name in names.split(", ") if name]
    return next((kind for kind in kinds if kind not in INIT_OPS), kinds[0] if kinds else "(unknown)")


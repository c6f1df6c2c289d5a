"""The viewer's data contract (tracelink/report/viewer_contract.py) holds on both sides.

Every key of the contract is documented; the JSON a real page embeds has exactly the contract's keys
and types; and the viewer (viewer/report.js), driven through its interactions in Chromium, reads no
key the contract does not name: the parsed data is wrapped in a Proxy that records every read.
"""

from __future__ import annotations

import ast
import json
import types
from pathlib import Path
from typing import Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest
from lxml import html as lxml_html

import tracelink.report.viewer_contract as contract
from tests.test_report_browser import browser, convnet  # noqa: F401  (the shared Chromium fixture and report)
from tracelink.report import build_report
from tracelink.report.viewer_contract import ViewerData


def page_data(report: Path) -> dict:
    return json.loads(lxml_html.parse(str(report)).getroot().get_element_by_id("tl-data").text)


def is_record(kind) -> bool:
    """A NamedTuple: an array of the JSON read by position."""
    return isinstance(kind, type) and issubclass(kind, tuple) and hasattr(kind, "_fields")


def arms(kind) -> tuple:
    return get_args(kind) if get_origin(kind) in (Union, types.UnionType) else (kind,)


def contract_errors(value, kind=ViewerData, path: str = "data") -> list[str]:
    """Where ``value`` differs from the contract type ``kind``: undocumented or missing keys, wrong types."""
    if len(arms(kind)) > 1:
        tried = [contract_errors(value, arm, path) for arm in arms(kind)]
        return [] if any(not errors for errors in tried) else [f"{path}: {value!r:.80} is none of {kind}"]
    if kind is types.NoneType:
        return [] if value is None else [f"{path}: {value!r:.80} is not null"]
    if is_typeddict(kind):
        if not isinstance(value, dict):
            return [f"{path}: not an object"]
        hints = get_type_hints(kind)
        errors = [f"{path}.{key}: not in the contract ({kind.__name__})" for key in value if key not in hints]
        errors += [f"{path}.{key}: missing ({kind.__name__})" for key in kind.__required_keys__ if key not in value]
        return errors + [error for key, item in value.items() if key in hints for error in contract_errors(item, hints[key], f"{path}.{key}")]
    if is_record(kind):
        if not isinstance(value, list) or len(value) != len(kind._fields):
            return [f"{path}: not an array of {len(kind._fields)} ({kind.__name__})"]
        hints = get_type_hints(kind)
        return [error for field, item in zip(kind._fields, value) for error in contract_errors(item, hints[field], f"{path}[{field}]")]
    if get_origin(kind) is dict:
        if not isinstance(value, dict):
            return [f"{path}: not an object"]
        return [error for key, item in value.items() for error in contract_errors(item, get_args(kind)[1], f"{path}[{key!r}]")]
    if get_origin(kind) is list:
        if not isinstance(value, list):
            return [f"{path}: not an array"]
        return [error for position, item in enumerate(value) for error in contract_errors(item, get_args(kind)[0], f"{path}[{position}]")]
    allowed = {float: (int, float), int: (int,), str: (str,), bool: (bool,)}[kind]
    return [] if isinstance(value, allowed) and isinstance(value, bool) == (kind is bool) else [f"{path}: {value!r:.80} is not {kind.__name__}"]


def contract_path(path: list[str]) -> tuple[str, ...] | str:
    """A read of the viewer at ``path`` (keys from the data's root) as a path of the contract (``*`` for
    a map's key or a list's position, a record's field by name); or why the contract has no such key."""
    kind, general = ViewerData, []
    for position, key in enumerate(path):
        kind = next(arm for arm in arms(kind) if arm is not types.NoneType)
        where = ".".join(path[: position + 1])
        if is_typeddict(kind):
            hints = get_type_hints(kind)
            if key not in hints:
                return f"{where}: {kind.__name__} has no key {key!r}"
            kind, key = hints[key], key
        elif is_record(kind):
            if not key.isdigit() or int(key) >= len(kind._fields):
                return f"{where}: {kind.__name__} has {len(kind._fields)} positions"
            key = kind._fields[int(key)]
            kind = get_type_hints(kind)[key]
        elif get_origin(kind) in (dict, list):
            kind, key = get_args(kind)[-1], "*"
        else:
            return f"{where}: {kind} has no keys"
        general.append(key)
    return tuple(general)


def read_error(path: list[str]) -> str | None:
    """Why a read of the viewer is not in the contract, or None."""
    found = contract_path(path)
    return found if isinstance(found, str) else None


def contract_paths(kind=ViewerData, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every path of the contract, as :func:`contract_path` writes them."""
    kind = next(arm for arm in arms(kind) if arm is not types.NoneType)
    if is_typeddict(kind) or is_record(kind):
        children = get_type_hints(kind).items()
    elif get_origin(kind) in (dict, list):
        children = [("*", get_args(kind)[-1])]
    else:
        return set()
    return {path for key, child in children for path in {(*prefix, key)} | contract_paths(child, (*prefix, key))}


def test_every_key_of_the_contract_is_documented():
    tree = ast.parse(Path(contract.__file__).read_text())
    records = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    assert {record.name for record in records} >= {"ViewerData", "LineRecord", "CallSiteRecord", "PlacedNode"}
    for record in records:
        assert ast.get_docstring(record), record.name
        body = record.body
        for position, statement in enumerate(body):
            if isinstance(statement, ast.AnnAssign):
                following = body[position + 1] if position + 1 < len(body) else None
                documented = isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant) and isinstance(following.value.value, str)
                assert documented, f"{record.name}.{statement.target.id} has no docstring"


def test_the_check_finds_what_breaks_the_contract():
    """The checks can fail: an extra key, a missing one, a wrong type, a record of the wrong length, a read of an unknown key."""
    line = {"s": 0.5, "t": 10.0, "cs": [[0, "r"]], "ops": ["op"]}
    data = {"files": [], "lines": {"f0:1": line}, "ops": {}, "cs": {}, "tx": [], "ex": {}, "exe": {},
            "graph": {"views": {}, "succ": {}, "pred": {}, "dims": dict.fromkeys(("top", "nodeH", "header", "gap", "opX", "opW"), 1)}}
    assert contract_errors(data) == []
    assert contract_errors({**data, "extra": 1}) == ["data.extra: not in the contract (ViewerData)"]
    assert contract_errors({key: value for key, value in data.items() if key != "exe"}) == ["data.exe: missing (ViewerData)"]
    assert contract_errors({**data, "lines": {"f0:1": {**line, "s": "half"}}})
    assert contract_errors({**data, "lines": {"f0:1": {**line, "cs": [[0, "r", 1]]}}})
    assert contract_errors({**data, "exe": {"x0": {"name": "e", "cs": [0], "source": 1, "dumped": 0}}})  # a number is no bool
    assert contract_errors({**data, "exe": {"x0": {"name": "e", "cs": [0], "source": True, "dumped": 0}}}) == []
    assert read_error(["lines", "f0:1", "cs", "0", "1"]) is None
    assert read_error(["graph", "views", "full", "nodes", "cs:0", "3"]) is None
    assert read_error(["cs", "0", "share"]) == "cs.0.share: CallSiteRecord has no key 'share'"
    assert read_error(["graph", "views", "full", "nodes", "cs:0", "4"]) == "graph.views.full.nodes.cs:0.4: PlacedNode has 4 positions"
    assert contract_path(["graph", "views", "full", "nodes", "cs:0", "3"]) == ("graph", "views", "*", "nodes", "*", "group")
    assert ("lines", "*", "cs", "*", "role") in contract_paths() and ("cs", "*", "share") not in contract_paths()


@pytest.mark.parametrize("name", ["mlp", "attention", "convnet"])
def test_page_data_is_the_contract(example_profiles, name):
    data = page_data(build_report(example_profiles[name]))
    assert contract_errors(data) == []
    assert data["lines"] and data["cs"] and data["graph"]["views"]["full"]["nodes"]


# Wraps the page's data (JSON.parse of #tl-data) in Proxies that record each key read, as a path from the root.
RECORD_READS = """(() => {
    const reads = new Set(), proxies = new WeakMap();
    window.tlReads = () => [...reads].map(path => JSON.parse(path));
    const wrap = (value, path) => {
        if (value === null || typeof value !== 'object') { return value; }
        if (!proxies.has(value)) {
            proxies.set(value, new Proxy(value, { get(target, key, receiver) {
                const result = Reflect.get(target, key, receiver);
                // an array's methods and length are not keys of the data; its positions are
                if (typeof key !== 'string' || (Array.isArray(target) && !/^\\d+$/.test(key))) { return result; }
                const at = path.concat([key]);
                reads.add(JSON.stringify(at));
                return wrap(result, at);
            } }));
        }
        return proxies.get(value);
    };
    const parse = JSON.parse;
    JSON.parse = function (text, reviver) {
        const value = parse.call(JSON, text, reviver);
        const data = document.getElementById('tl-data');
        return data && text === data.textContent ? wrap(value, []) : value;
    };
})()"""


def test_the_viewer_reads_the_keys_of_the_contract_and_no_other(browser, convnet):  # noqa: F811
    _, report = convnet
    page = browser.new_page()
    page.add_init_script(RECORD_READS)
    page.goto(report.resolve().as_uri())
    page.wait_for_load_state("load")
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # a line from the first screen, an op of its details, a dispatch it feeds (the drill-down with its executable)
    page.click("#hot-lines a.lnk[data-k]")
    page.click("#line-details a.opl[data-op]")
    page.click("#hot-lines a.lnk[data-k]")
    page.click("#line-sites a.chip[data-cs]")
    assert page.locator("#panel").is_visible()
    page.keyboard.press("Escape")
    # the drill-down of a call site whose executable others run too (it names them)
    data = page_data(report)
    shared = next(executable["cs"][-1] for executable in data["exe"].values() if len(executable["cs"]) > 1)
    page.click(f"#cs-{shared}")
    assert page.locator("#panel .drill .chip").count() >= 2
    page.keyboard.press("Escape")
    # the graph: a call site and an op (neighbourhoods), groups folded and unfolded, the minimap, search
    page.click("#graph-svg .node[data-id^='cs:']")
    page.click("#graph-svg .grp .node")
    page.click("#graph-collapse")
    page.click("#graph-expand")
    page.locator(".graph-wrap").scroll_into_view_if_needed()
    page.wait_for_function("document.getElementById('graph-minimap').hasAttribute('data-drawn')")
    page.fill("#graph-search", "conv")
    page.press("#graph-search", "Enter")
    reads = page.evaluate("tlReads()")
    page.close()
    assert errors == []
    assert [read for read in reads if read_error(read)] == [], [read_error(read) for read in reads if read_error(read)]
    # and reads every key of it: the data holds nothing the viewer does not use (but a diff's gains, a
    # big page's packed templates and a collector's counters, which this page has not)
    unread = contract_paths() - {contract_path(read) for read in reads}
    assert {path for path in unread if path[0] not in ("gains", "packed") and path != ("cs", "*", "k", "*")} == set()

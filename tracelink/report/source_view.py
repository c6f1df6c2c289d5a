"""The report page's views of time by source: each file with per-line heat (the Source section) and the
flame graph along the source hierarchy."""

from __future__ import annotations


from tracelink.report.flame import flame_svg, flame_tree
from tracelink.report.fmt import el, file_name, heat, pct
from tracelink.report.gains import gain_badge
from tracelink.report.model import ReportModel
from tracelink.report.widgets import bar, chips, section


# A file view with more lines than this is a template too (packed with the others in a big report): the
# viewer puts it in place once the page is interactive, or when a line is first asked for: a long
# program's text is a large part of its report and of the nodes parsed at load (docs/reference/numbers.md).
TEMPLATE_FILE_LINES = 1000


def source_section(main, model: ReportModel, templates) -> None:
    node = section(
        main, "source", "Source",
        "Each line's self share of dispatch time: an op's time is split between the members of its fused location, each part on its innermost line. "
        "Click a line to see the dispatches it feeds (root op or fused producer) and the lines fused with it.",
    )
    if not model.files:
        el(node, "p", class_="muted", text="No source file: the program path is unknown and no op has a file location.")
        return
    tabs = el(node, "div", class_="tabs", role="tablist")
    for source in model.files:
        label = f"{source.name}" + (" (program)" if source.is_program else "")
        tab = el(tabs, "button", type="button", class_="tab" + (" on" if source.index == 0 else ""), data_f=source.id, title=source.path, role="tab")
        el(tab, "span", None, label)
        el(tab, "span", class_=f"tab-heat h{heat(source.max_share)}", text=pct(source.max_share) if source.max_share else "")
    layout = el(node, "div", class_="source-layout")
    files = el(layout, "div", class_="files")
    for source in model.files:
        file_view(files, model, source, templates)
    details = el(layout, "aside", id="line-details", class_="details")
    el(details, "p", class_="muted", text="Select a line to see its dispatches.")
    skipped_sources(node, model.skipped_sources)


def skipped_sources(parent, skipped: dict[str, str]) -> None:
    """The files locations name that the report did not embed, and why."""
    if not skipped:
        return
    el(parent, "h3", None, f"Files not embedded ({len(skipped)})")
    ul = el(parent, "ul", class_="plain", id="skipped-sources")
    for path, reason in sorted(skipped.items()):
        el(ul, "li", class_="mono", text=f"{path}: {reason}")


def file_view(parent, model: ReportModel, source, templates) -> None:
    """One file's lines. A big program has thousands, so each is a few nodes: its number is a
    ``data-n`` the stylesheet shows, its share one element drawing its own bar (:func:`bar`). Beyond
    :data:`TEMPLATE_FILE_LINES` lines they go to a template the viewer puts in place (``data-packed``)."""
    view = el(parent, "div", class_="file", id=f"file-{source.id}", data_f=source.id)
    if source.index != 0:
        view.set("hidden", "hidden")
    head = el(view, "div", class_="file-head")
    el(head, "span", class_="mono", text=source.path)
    if source.text is None:
        el(head, "span", class_="muted", text=" · not on this machine: its mapped lines and their ops")
    elif not source.is_program:
        el(head, "span", class_="muted", text=" · mapped lines with context")
    hottest = sorted((line for line in source.lines.values() if line.share > 0), key=lambda line: -line.share)[:6]
    if hottest:
        jump = el(head, "span", class_="jump")
        el(jump, "span", class_="muted", text="hottest:")
        for line in hottest:
            el(jump, "a", href="#", class_="lnk", data_k=line.key, title=pct(line.share), text=f"{line.number} ({pct(line.share)})")
    classes = "code src" + (" gains" if model.gains is not None else "")
    if len(source.shown) > TEMPLATE_FILE_LINES:
        el(view, "div", class_=classes, data_packed=source.id, text=f"{len(source.shown)} lines, shown in a moment…")
        code = el(el(templates, "template", id=f"t-code-{source.id}"), "div", class_=classes)
    else:
        code = el(view, "div", class_=classes)
    previous = 0
    for number in source.shown:
        skipped = number - previous - 1
        if skipped > 0 and (previous > 0 or source.text is not None):
            el(code, "div", class_="gap", text=f"⋯ {skipped} line{'s' if skipped > 1 else ''}")
        previous = number
        line = source.lines.get(number)
        text = source.text[number - 1] if source.text is not None and number - 1 < len(source.text) else None
        if line is None:
            row = el(code, "div", class_="ln", data_n=number)
            el(row, "code", None, cut_text(text or ""))
            continue
        row = el(code, "div", class_=f"ln m h{heat(line.share)}", id=f"L-{source.id}-{number}", data_k=line.key, data_n=number, tabindex="0")
        if line.share > 0:
            bar(row, line.share)
        if line.call_sites:
            chips(el(row, "span", class_="cs"), line.call_sites, 3)
        if model.gains is not None:
            gain_badge(row, model.gains.lines.get(line.key))
        if text is not None:
            el(row, "code", None, cut_text(text))
        else:
            ranked = sorted(line.ops, key=lambda o: -model.ops[o]["share"])
            described = " · ".join(dict.fromkeys(describe_op(model.ops[o]) for o in ranked))
            el(row, "code", class_="desc", title="\n".join(model.ops[o]["label"] for o in ranked), text=cut_text(described))


def cut_text(text: str, limit: int = 400) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else f"{text[:limit]} … ({len(text) - limit} more characters)"


def describe_op(op: dict) -> str:
    """``torch.aten.mm @ conv.py:443:15``: what the op is and where its innermost position is."""
    what = op["name"] or op["op_names"] or "op"
    if op["positions"]:
        path, number = op["positions"][0]
        return f"{what} @ {file_name(path)}:{number}"
    return what


def flame_section(main, model: ReportModel) -> None:
    node = section(
        main, "flame", "Flame graph by source",
        "Self time along the source hierarchy: Python call stacks where locations carry them, name scopes where names have '/', "
        "else file and line, down to the dispatch. Click a frame to zoom into it, the top frame to zoom out, a dispatch to open its drill-down.",
    )
    wrap = el(node, "div", class_="flame-wrap")
    wrap.append(flame_svg(flame_tree(model, model.profile.graph)))

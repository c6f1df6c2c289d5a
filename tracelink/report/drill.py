"""The executable sources the drill-downs show: one template per executable (``t-<executable id>``),
which the viewer puts in the source slot of a call site's drill-down (``viewer/drill.js`` builds the
rest of a drill-down from the page's data).
"""

from __future__ import annotations

from tracelink.report.fmt import el
from tracelink.report.layout import op_label
from tracelink.report.model import ReportModel
from tracelink.report.sources import EXECUTABLE_DUMPS


def executable_template(parent, model: ReportModel, executable) -> None:
    template = el(parent, "template", id=f"t-{executable.id}")
    code = el(template, "div", class_="code exe")
    if executable.text is None:
        if EXECUTABLE_DUMPS in model.skipped_sources:
            el(code, "p", class_="muted", text=f"{executable.name}: executable source not embedded (--no-sources)")
        return
    text = executable.text[:-1] if executable.text and executable.text[-1] == "" else executable.text
    for number, line in enumerate(text, start=1):
        ops = executable.line_ops.get(number)
        row = el(code, "div", class_="ln" + (" m" if ops else ""), data_ops=" ".join(ops) if ops else None)
        el(row, "span", class_="no", text=str(number))
        tag = ", ".join(dict.fromkeys(op_label(model.ops[o]) for o in ops if o in model.ops)) if ops else ""
        el(row, "span", class_="tag", title=tag or None, text=("…" + tag[-25:]) if len(tag) > 26 else tag)
        el(row, "code", None, line)

"""The report page's glossary section: the terms the other sections use."""

from __future__ import annotations

from tracelink.report.fmt import el
from tracelink.report.widgets import section


GLOSSARY = (
    ("dispatch, call site", "one launch of compiled code on the device; a call site is one place in the program that launches it, numbered in execution order"),
    ("export", "the dispatch function a call site runs (an entry point of an executable)"),
    ("executable", "a compiled unit holding exports; IREE compiles identical dispatches once, so one executable can serve several call sites"),
    ("root op", "the op a dispatch is formed around and named after (its heaviest); codegen tiles it and fuses the rest into its tiles"),
    ("producer", "an op fused into another op's dispatch (typically elementwise), so its work happens inside that dispatch"),
    ("absorbed", "an op the compiler merged into another op without keeping its location (a softmax's max, exp and sum raised into one softmax op at the divide's line); it shares that op's time by its own FLOPs"),
    ("init", "a fill that initialises an accumulator; it costs nothing and its location may come from another layer"),
    ("workgroup, tile", "a block of a dispatch's iteration space run by one worker thread; fewer workgroups than workers leaves cores idle"),
    ("self time", "time of the ops at a line itself (each fused op's time split between its locations)"),
    ("inclusive time", "time of every op whose call stack passes through a line, like a caller's time in a CPU profiler"),
    ("FLOPs, bytes", "arithmetic ops of one execution (from each op's iteration space and body) and the bytes it must read and write at least"),
    ("bound", "what limits a dispatch: compute (at 10 % of the FLOP peak or more), memory (below the ridge intensity), far-from-roofs (under 10 % of both peaks: the generated code), parallelism (fewer workgroups than workers) or overhead (under 5 µs); none when its FLOPs and bytes are lower bounds (≥: a dynamic size the run did not fix)"),
)


def glossary_section(main) -> None:
    node = section(main, "glossary", "Glossary")
    terms = el(node, "dl", class_="glossary")
    for term, meaning in GLOSSARY:
        el(terms, "dt", None, term)
        el(terms, "dd", None, meaning)

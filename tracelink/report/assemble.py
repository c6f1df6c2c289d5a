"""Assemble the report model: the core data of :mod:`tracelink.report.model` and each optional view's data.

This is the one place that imports both the model and the views that fill it (workgroups, zones,
gains), so the model imports no view and the views import the model without a circle.
"""

from __future__ import annotations

import functools
from pathlib import Path

from tracelink.profile_dir.profile import Profile
from tracelink.provenance.graph import audit_of
from tracelink.ir_utils import new_context
from tracelink.report.gains import gain_data
from tracelink.report.model import (
    MAX_PROGRAM_BYTES, ReportModel, add_line_utilization, call_site_rows, counter_columns, event_series, iteration_strip,
    map_lines, member_keys, op_table, read_executables,
)
from tracelink.report.sources import SourcePolicy
from tracelink.report.strategies import advised
from tracelink.report.textmap import SourceTexts
from tracelink.report.workgroups import workgroup_data
from tracelink.report.zones import zone_data


def build_model(profile: Profile, sources: SourcePolicy | None = None, texts: SourceTexts | None = None) -> ReportModel:
    """The report's data; ``sources`` decides which files are embedded (default: the profile's policy), ``texts``
    holds the program and dumps already parsed (what is not there is parsed here)."""
    profile = advised(profile)  # next steps name what tune measured to help
    graph = profile.graph
    summary = profile.summary
    sources = sources or SourcePolicy.for_profile(summary)
    program = str(summary.get("program", ""))
    texts = texts if texts is not None else SourceTexts()
    context = functools.cache(new_context)  # made for the first dump not parsed beside the compiler, if any
    by_frames = member_keys(graph)
    readable = bool(program) and Path(program).exists() and sources.refusal(Path(program), MAX_PROGRAM_BYTES) is None
    program_ops, enclosing = texts.program(Path(program)) if readable else (None, frozenset())

    ops = op_table(profile, graph)
    files, lines = map_lines(profile.line_shares, ops, program, program_ops, by_frames, sources)
    add_line_utilization(profile.source_lines, files, program, profile)
    call_sites = call_site_rows(profile, graph, lines, ops)
    executables = read_executables(profile, graph, enclosing, by_frames, texts, context, sources.allows_dumps())
    durations, per_iteration = event_series(profile.events)
    counters = counter_columns(profile.call_sites)
    model = ReportModel(
        profile=profile, summary=summary, files=files, lines=lines, ops=ops, call_sites=call_sites,
        executables=executables, durations=durations, per_iteration=per_iteration,
        audit=summary.get("audit") or (audit_of(graph) if "audit" in graph.graph else {}),
        iteration_strip=iteration_strip(profile.events), counters=counters,
        workgroups=workgroup_data(profile), zones=zone_data(profile), skipped_sources=dict(sources.skipped),
    )
    model.gains = gain_data(model)  # matched through the model's ops and lines
    return model


"""Report stage: the self-contained HTML provenance report and the Perfetto / Chrome trace of a profile.

``build_report(profile_or_dir, output=None)`` writes ``<dir>/report.html``; ``write_trace(profile, path)``
writes the dispatch events as Chrome trace JSON (``ui.perfetto.dev``, ``chrome://tracing``).
"""

from tracelink.report.html import build_report, render_report, viewer_dir
from tracelink.report.trace import trace_events, write_trace

__all__ = ["build_report", "render_report", "trace_events", "viewer_dir", "write_trace"]

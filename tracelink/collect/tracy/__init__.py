"""The Tracy collector: capture a run with IREE's tracy-enabled tools and decode the .tracy file.

``capture_tracy`` records a trace, ``read_capture`` decodes it (Tracy 0.11.x, pure Python), and
``rebuild_executions`` turns its dispatch zones into events of the shared schema.
"""

from tracelink.collect.tracy.capture import capture_tracy, tracy_tools
from tracelink.collect.tracy.container import TracyFormatError
from tracelink.collect.tracy.decoder import TracyCapture, TracyHeader, read_capture
from tracelink.collect.tracy.views import Rebuilt, dispatch_zones, rebuild_executions, source_location_summary

__all__ = [
    "TracyCapture",
    "TracyFormatError",
    "Rebuilt",
    "TracyHeader",
    "capture_tracy",
    "dispatch_zones",
    "read_capture",
    "rebuild_executions",
    "source_location_summary",
    "tracy_tools",
]

"""tracelink: a traceability-first profiler for IREE.

The package follows the data flow: compile → provenance → collect → aggregate → report / tune.
"""

__version__ = "0.1.0"


class TracelinkError(Exception):
    """A problem with the user's input or environment, reported as one clear line."""

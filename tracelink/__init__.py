"""tracelink: a traceability-first profiler for IREE.

The package follows the data flow: compile → provenance → collect → aggregate → report / tune.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from tracelink.profile_dir.profile import Profile

from tracelink.errors import TracelinkError  # the package's error, for users: `except tracelink.TracelinkError`
from tracelink.version import __version__

__all__ = ["TracelinkError", "__version__", "profile"]


def profile(fn_or_module: Any, *example_args: Any, out: str | Path = "out", console: Console | None = None, **options: Any) -> Profile:
    """Profile a JAX-traceable function or a ``torch.nn.Module`` called with ``example_args``; return the Profile.

    Like ``tracelink profile model.py:make``: the model is exported with its Python call stacks and
    name scopes or module paths as locations, compiled and run under the profiler into ``out``, with
    ``example_args`` as the inputs. ``options`` are :class:`tracelink.pipeline.options.ProfileOptions` fields
    (``repetitions=20``, ``collector="tracy"``, ...). The result holds the tables (pandas DataFrames:
    ``source_lines``, ``source_ops``, ``call_sites``, ...) and the provenance graph (``graph``).
    """
    # Imported here so that `import tracelink` stays cheap (the pipeline loads pandas, networkx, IREE).
    from tracelink.pipeline.options import ProfileOptions
    from tracelink.pipeline import profile_python

    return profile_python(fn_or_module, example_args, Path(out), ProfileOptions(**options), console)

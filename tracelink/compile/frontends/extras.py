"""The frameworks are optional extras: which extra installs which, and one clear line when one is missing."""

from __future__ import annotations

import importlib.util

from tracelink.errors import TracelinkError

# A framework a model may import -> the extra that installs it (`pip install 'tracelink[jax]'`).
EXTRAS = {"jax": "jax", "jaxlib": "jax", "flax": "jax", "torch": "torch"}


def require(framework: str) -> None:
    """Check that ``framework`` is installed, else one line naming the extra to install."""
    if importlib.util.find_spec(framework) is None:
        raise TracelinkError(f"profiling this model needs {framework}: pip install 'tracelink[{EXTRAS[framework]}]'")

"""Export a JAX-traceable function to StableHLO with its Python call stacks and name scopes as locations.

``jax.jit(fn).lower(*args)`` records, for every op, the Python stack that produced it (full tracebacks
in locations, JAX's default, set here in case the user turned it off) under the op's name stack:
``loc("jit(f)/MLP/Dense_0/dot_general"(callsite("Dense.__call__"(linear.py:287:8) at callsite(
"MLP.__call__"(model.py:8:12) at ...))))``. So two calls of one helper are two call stacks, and the name
stack (Flax module names, ``jax.named_scope``) is the op's component, kept as JAX writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tracelink.errors import TracelinkError, first_line
from tracelink.atomic import write_text_atomic
from tracelink.compile.frontends.extras import require


def export_jax(fn: Callable, args: tuple, output: Path, origin: str) -> list[np.ndarray]:
    """Write ``fn`` lowered at ``args`` to ``output`` (StableHLO text with debug info); return the flat arguments.

    The program's arguments are the leaves of ``args`` in JAX's flattening order, unused ones kept
    (``keep_unused``), so the saved inputs match its signature one to one.
    """
    require("jax")
    import jax

    jitted = jax.jit(fn, keep_unused=True)
    full_tracebacks = jax.config.jax_include_full_tracebacks_in_locations
    jax.config.update("jax_include_full_tracebacks_in_locations", True)
    try:
        # Lowered on a thread of its own: JAX records each op's stack up to the thread's first frame, and
        # the frames that called tracelink (its command, the user's script or notebook) would otherwise be
        # every op's outermost callers. A worker thread starts in the standard library, whose frames and
        # JAX's own JAX leaves out, so each stack starts at ``fn``.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tracelink-jax-export") as pool:
            lowered = pool.submit(jitted.lower, *args).result()
        text = lowered.as_text(debug_info=True)
    except Exception as error:  # the user's code failed to trace: any exception type
        raise TracelinkError(f"{origin}: JAX could not trace it ({type(error).__name__}: {first_line(error)})") from None
    finally:
        jax.config.update("jax_include_full_tracebacks_in_locations", full_tracebacks)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output, text)
    # Through jnp.asarray: the types JAX lowered them as (a Python float is f32, a float64 array f32 without x64).
    return [np.asarray(jax.numpy.asarray(leaf)) for leaf in jax.tree_util.tree_leaves(args)]

"""A JAX function as its user runs it: ``jax.jit`` on XLA's CPU backend, the whole call timed.

Per line: none yet. XLA's CPU profile names its fused kernels, not the source lines of the ops in them,
so the reference is compared with IREE's build for the whole call only (the profile says so).
"""

from __future__ import annotations

import jax
import numpy as np


class JaxRunner:
    """``jax.jit(fn)`` on the example arguments, placed on the CPU once."""

    def __init__(self, function: object, args: tuple) -> None:
        cpu = jax.devices("cpu")[0]
        self.function = jax.jit(function)
        self.args = jax.device_put(args, cpu)

    def call(self) -> object:
        return jax.block_until_ready(self.function(*self.args))

    def outputs(self) -> list[np.ndarray]:
        return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(self.call())]

    def profile(self, calls: int) -> None:
        return None

    def close(self) -> None:
        pass

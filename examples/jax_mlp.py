"""A Flax MLP to profile from its Python source: `tracelink profile examples/jax_mlp.py:make -o out/jax_mlp`.

`make()` returns the function to profile and its example arguments (they become the run's inputs).
The two calls of `residual_block` show up as two callers of its lines, and the Flax module names
(`Dense_0`, `block_0`) group the time by component.
"""

import jax
import jax.numpy as jnp
import flax.linen as nn


def residual_block(x, kernel):
    return x + jnp.tanh(x @ kernel)


class MLP(nn.Module):
    hidden: int = 512
    classes: int = 10

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(self.hidden)(x))
        x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.classes)(x)


def forward(params, kernel, x):
    h = MLP().apply(params, x)
    h = residual_block(h, kernel)
    return residual_block(h, kernel)


def make():
    x = jax.random.normal(jax.random.PRNGKey(0), (64, 256))
    params = MLP().init(jax.random.PRNGKey(1), x)
    kernel = jax.random.normal(jax.random.PRNGKey(2), (10, 10)) * 0.1
    return forward, (params, kernel, x)

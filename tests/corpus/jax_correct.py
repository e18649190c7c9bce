"""Corpus: correct JAX-native rules (`jax.custom_vjp` checked with `jax_rule`). Every check must pass.

They cover what the buggy twins in ``jax_bugs.py`` get wrong: non-unit
cotangents, two arguments, a ``nondiff_argnums`` constant, float32, complex
inputs (JAX's convention), tuple outputs, and fwd/bwd written so that JAX can
differentiate them again (second order) and run them under jit and vmap.
"""

from functools import partial

import jax
import jax.numpy as jnp

from gradguard import arrays, constant, jax_rule


@jax.custom_vjp
def softplus(x):
    return jnp.logaddexp(0.0, x)


softplus.defvjp(lambda x: (jnp.logaddexp(0.0, x), jax.nn.sigmoid(x)), lambda sig, g: (g * sig,))
softplus_jax = jax_rule(softplus, arrays(shape=(5,), min_value=-30.0, max_value=30.0), name="softplus_jax")


@jax.custom_vjp
def logsumexp_rows(x):
    m = jnp.max(x, axis=1, keepdims=True)
    return jnp.log(jnp.sum(jnp.exp(x - m), axis=1)) + m[:, 0]


def _lse_fwd(x):
    y = logsumexp_rows.fun(x)
    return y, (x, y)


logsumexp_rows.defvjp(_lse_fwd, lambda res, g: (g[:, None] * jnp.exp(res[0] - res[1][:, None]),))
logsumexp_rows_jax = jax_rule(logsumexp_rows, arrays(shape=(2, 3)), name="logsumexp_rows_jax")


@jax.custom_vjp
def mul(a, b):
    return a * b


mul.defvjp(lambda a, b: (a * b, (a, b)), lambda res, g: (g * res[1], g * res[0]))
mul_jax = jax_rule(mul, arrays(shape=(2, 3)), arrays(shape=(2, 3)), name="mul_jax")


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def power(x, n):
    return x**n


power.defvjp(lambda x, n: (x**n, x), lambda n, x, g: (n * x ** (n - 1) * g,))
power_jax = jax_rule(power, arrays(shape=(3,)), constant(3), name="power_jax")


@jax.custom_vjp
def sin32(x):
    return jnp.sin(x)


sin32.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda c, g: (c * g,))
sin_f32_jax = jax_rule(sin32, arrays(shape=(4,), dtype="float32"), name="sin_f32_jax")


@jax.custom_vjp
def csquare(z):
    return z * z


csquare.defvjp(lambda z: (z * z, z), lambda z, g: (2 * z * g,))  # JAX's convention: f'(z) * g, no conj
csquare_jax = jax_rule(csquare, arrays(shape=(3,), dtype="complex128"), name="csquare_jax")


@jax.custom_vjp
def sincos(x):
    return jnp.sin(x), jnp.cos(x)


sincos.defvjp(lambda x: ((jnp.sin(x), jnp.cos(x)), x), lambda x, g: (g[0] * jnp.cos(x) - g[1] * jnp.sin(x),))
sincos_jax = jax_rule(sincos, arrays(shape=(3,)), name="sincos_jax")


LABELS = {
    name: {"bug": "correct", "expect": []}
    for name in [
        "softplus_jax",
        "logsumexp_rows_jax",
        "mul_jax",
        "power_jax",
        "sin_f32_jax",
        "csquare_jax",
        "sincos_jax",
    ]
}

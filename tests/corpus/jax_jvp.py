"""Corpus: `jax.custom_jvp` rules, correct and buggy (checked with `jax_rule`).

A custom_jvp's reverse mode is the transpose JAX derives from its jvp, so a wrong jvp shows in the
reverse-mode checks too, except where the transpose hides it (an offset in the tangent: GG207, GG208
only). The correct rules cover ``defjvps``, ``nondiff_argnums``, a default argument, keyword arguments,
``symbolic_zeros`` and a tuple output.
"""

from functools import partial

import jax
import jax.numpy as jnp

from gradguard import arrays, constant, jax_rule


def _softplus(x):
    return jnp.logaddexp(0.0, x)


# -- correct ------------------------------------------------------------------------------------------
@jax.custom_jvp
def softplus(x):
    return _softplus(x)


@softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus(x), t * jax.nn.sigmoid(x)


softplus_jvp = jax_rule(softplus, arrays(shape=(4,), min_value=-20.0, max_value=20.0), name="softplus_jvp")


@jax.custom_jvp
def logistic(x):
    return 1.0 / (1.0 + jnp.exp(-x))


logistic.defjvps(lambda t, ans, x: t * ans * (1.0 - ans))
logistic_defjvps_jvp = jax_rule(logistic, arrays(shape=(3,), min_value=-20.0, max_value=20.0), name="logistic_defjvps_jvp")


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def power(x, n):
    return x**n


@power.defjvp
def _power_jvp(n, primals, tangents):
    (x,), (t,) = primals, tangents
    return x**n, n * x ** (n - 1) * t


power_nondiff_jvp = jax_rule(power, arrays(shape=(3,)), constant(3), name="power_nondiff_jvp")


@jax.custom_jvp
def scaled_tanh(x, scale=2.0):
    return scale * jnp.tanh(x / scale)


@scaled_tanh.defjvp
def _scaled_tanh_jvp(primals, tangents):
    (x, scale), (tx, ts) = primals, tangents
    th = jnp.tanh(x / scale)
    dx = 1.0 - th * th
    return scale * th, dx * tx + (th - x / scale * dx) * ts


scaled_tanh_default_jvp = jax_rule(scaled_tanh, arrays(shape=(3,)), name="scaled_tanh_default_jvp")
scaled_tanh_kwargs_jvp = jax_rule(scaled_tanh, arrays(shape=(3,)), kwargs={"scale": 0.5}, name="scaled_tanh_kwargs_jvp")


@jax.custom_jvp
def mul(x, y):
    return x * y


def _mul_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    from jax.custom_derivatives import SymbolicZero

    out = jnp.zeros_like(x * y)
    if not isinstance(tx, SymbolicZero):
        out = out + tx * y
    if not isinstance(ty, SymbolicZero):
        out = out + x * ty
    return x * y, out


mul.defjvp(_mul_jvp, symbolic_zeros=True)
mul_symbolic_zeros_jvp = jax_rule(mul, arrays(shape=(3,)), arrays(shape=(3,)), name="mul_symbolic_zeros_jvp")


@jax.custom_jvp
def sincos(x):
    return jnp.sin(x), jnp.cos(x)


@sincos.defjvp
def _sincos_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    s, c = jnp.sin(x), jnp.cos(x)
    return (s, c), (c * t, -s * t)


sincos_tuple_jvp = jax_rule(sincos, arrays(shape=(3,)), name="sincos_tuple_jvp")


# -- buggy --------------------------------------------------------------------------------------------
@jax.custom_jvp
def softplus_slip(x):
    return _softplus(x)


@softplus_slip.defjvp
def _softplus_slip_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus_slip(x), t * jax.nn.sigmoid(-x)  # sign slip: the derivative of softplus(-x)


softplus_sign_slip_jvp = jax_rule(softplus_slip, arrays(shape=(4,), min_value=-20.0, max_value=20.0), name="softplus_sign_slip_jvp")


@jax.custom_jvp
def softplus_offset(x):
    return _softplus(x)


@softplus_offset.defjvp
def _softplus_offset_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus_offset(x), t * jax.nn.sigmoid(x) + 1e-3  # affine in t: the transpose drops the offset


softplus_offset_jvp = jax_rule(softplus_offset, arrays(shape=(4,), min_value=-20.0, max_value=20.0), name="softplus_offset_jvp")


@jax.custom_jvp
def mul_drop(x, y):
    return x * y


@mul_drop.defjvp
def _mul_drop_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    return x * y, tx * y  # forgets x * ty


mul_drops_tangent_jvp = jax_rule(mul_drop, arrays(shape=(3,)), arrays(shape=(3,)), name="mul_drops_tangent_jvp")


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def power_off(x, n):
    return x**n


@power_off.defjvp
def _power_off_jvp(n, primals, tangents):
    (x,), (t,) = primals, tangents
    return x**n, (n - 1) * x ** (n - 1) * t  # off by one in the exponent's factor


power_off_by_one_jvp = jax_rule(power_off, arrays(shape=(3,)), constant(3), name="power_off_by_one_jvp")


@jax.custom_jvp
def sincos_swap(x):
    return jnp.sin(x), jnp.cos(x)


@sincos_swap.defjvp
def _sincos_swap_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    s, c = jnp.sin(x), jnp.cos(x)
    return (s, c), (-s * t, c * t)  # the two output tangents swapped


sincos_swapped_jvp = jax_rule(sincos_swap, arrays(shape=(3,)), name="sincos_swapped_jvp")


LABELS = {
    "softplus_jvp": {"bug": "correct", "expect": []},
    "logistic_defjvps_jvp": {"bug": "correct", "expect": []},
    "power_nondiff_jvp": {"bug": "correct", "expect": []},
    "scaled_tanh_default_jvp": {"bug": "correct", "expect": []},
    "scaled_tanh_kwargs_jvp": {"bug": "correct", "expect": []},
    "mul_symbolic_zeros_jvp": {"bug": "correct", "expect": []},
    "sincos_tuple_jvp": {"bug": "correct", "expect": []},
    "softplus_sign_slip_jvp": {"bug": "numeric", "expect": ["GG201", "GG203", "GG207", "GG501"]},
    "softplus_offset_jvp": {"bug": "numeric", "expect": ["GG207", "GG208"],
                            "what": "an offset in the jvp's tangent: forward mode is wrong, the transpose drops it"},
    "mul_drops_tangent_jvp": {"bug": "numeric", "expect": ["GG201", "GG203", "GG207", "GG501"]},
    "power_off_by_one_jvp": {"bug": "numeric", "expect": ["GG201", "GG203", "GG207", "GG501"]},
    "sincos_swapped_jvp": {"bug": "numeric", "expect": ["GG201", "GG203", "GG207", "GG501"]},
}

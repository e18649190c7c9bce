"""Real-world corpus: correct `jax.custom_vjp` functions from public JAX code, checked with `jax_rule`.

Sources (the comment above each rule names its file and lines):

- https://github.com/jax-ml/jax at commit cec06d116c05f0d52adfceee3d3b730fdbcb0ce5:
  docs/notebooks/Custom_derivative_rules_for_Python_code.md (the custom_vjp examples that compute a true
  derivative).
- https://github.com/jax-ml/jax/issues/6811#issuecomment-986265534: a ``logsumexp`` with
  ``nondiff_argnums=(1,)`` and ``axis=None`` as a default, copied into several public repositories.

The functions are copied as their sources have them. Left out on purpose: custom_vjps whose backward pass is
deliberately not the derivative (the notebook's ``clip_gradient`` and ``app``, optax's ``_scale_gradient``,
flax's fp8 ``in_qdq``/``out_qdq``): they are gradient transformations, not rules for their primal.
"""

from collections import namedtuple
from functools import partial

import jax
import jax.numpy as jnp
from hypothesis import strategies as st
from jax import custom_vjp, vjp
from jax.lax import while_loop

from gradguard import arrays, constant, floats, jax_rule

JAX = "jax-ml/jax@cec06d116c05f0d52adfceee3d3b730fdbcb0ce5"
NOTEBOOK = "docs/notebooks/Custom_derivative_rules_for_Python_code.md"


# ----- the notebook's TL;DR example (lines 103-116) ---------------------------------------------------------


@custom_vjp
def f(x, y):
    return jnp.sin(x) * y


def f_fwd(x, y):
    # Returns primal output and residuals to be used in backward pass by f_bwd.
    return f(x, y), (jnp.cos(x), jnp.sin(x), y)


def f_bwd(res, g):
    cos_x, sin_x, y = res  # Gets residuals computed in f_fwd
    return (cos_x * g * y, sin_x * g)


f.defvjp(f_fwd, f_bwd)
sin_times_rule = jax_rule(f, arrays(shape=(3,)), arrays(shape=(3,)), name="sin_times_rule")


# ----- the notebook's "f :: a -> b" example (lines 856-869) ------------------------------------------------


@custom_vjp
def sin_f(x):
    return jnp.sin(x)


def sin_f_fwd(x):
    return sin_f(x), jnp.cos(x)


def sin_f_bwd(cos_x, y_bar):
    return (cos_x * y_bar,)


sin_f.defvjp(sin_f_fwd, sin_f_bwd)
sin_rule = jax_rule(sin_f, arrays(shape=(2, 3)), name="sin_rule")


# ----- the notebook's fixed_point with nondiff_argnums=(0,) (lines 499-530), as newton_sqrt uses it ---------


@partial(custom_vjp, nondiff_argnums=(0,))
def fixed_point(f, a, x_guess):
    def cond_fun(carry):
        x_prev, x = carry
        return jnp.abs(x_prev - x) > 1e-6

    def body_fun(carry):
        _, x = carry
        return x, f(a, x)

    _, x_star = while_loop(cond_fun, body_fun, (x_guess, f(a, x_guess)))
    return x_star


def fixed_point_fwd(f, a, x_init):
    x_star = fixed_point(f, a, x_init)
    return x_star, (a, x_star)


def fixed_point_rev(f, res, x_star_bar):
    a, x_star = res
    _, vjp_a = vjp(lambda a: f(a, x_star), a)
    (a_bar,) = vjp_a(fixed_point(partial(rev_iter, f), (a, x_star, x_star_bar), x_star_bar))
    return a_bar, jnp.zeros_like(x_star)


def rev_iter(f, packed, u):
    a, x_star, x_star_bar = packed
    _, vjp_x = vjp(lambda x: f(a, x), x_star)
    return x_star_bar + vjp_x(u)[0]


fixed_point.defvjp(fixed_point_fwd, fixed_point_rev)


def newton_update(a, x):  # the notebook's newton_sqrt: fixed_point(update, a, a)
    return 0.5 * (x + a / x)


# a scalar (the loop's stopping test needs one), positive; the guess near the root so Newton converges
fixed_point_sqrt_rule = jax_rule(
    fixed_point, constant(newton_update), floats(0.5, 10.0), floats(0.5, 10.0),
    name="fixed_point_sqrt_rule",
)


# ----- the notebook's pytree example (lines 1103-1120): a namedtuple in, a dict with a tuple out -----------

Point = namedtuple("Point", ["x", "y"])


@custom_vjp
def pt_f(pt):
    x, y = pt.x, pt.y
    return {"a": x**2, "b": (jnp.sin(x), jnp.cos(y))}


def pt_f_fwd(pt):
    return pt_f(pt), pt


def pt_f_bwd(pt, g):
    a_bar, (b0_bar, b1_bar) = g["a"], g["b"]
    x_bar = 2 * pt.x * a_bar + jnp.cos(pt.x) * b0_bar
    y_bar = -jnp.sin(pt.y) * b1_bar
    return (Point(x_bar, y_bar),)


pt_f.defvjp(pt_f_fwd, pt_f_bwd)
pytree_point_rule = jax_rule(pt_f, st.builds(Point, arrays(shape=(2,)), arrays(shape=(2,))), name="pytree_point_rule")


# ----- logsumexp with nondiff_argnums=(1,) and a default axis (jax issue #6811) -----------------------------


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def logsumexp(a, axis=None):
    return _logsumexp_fwd(a, axis)[0]


def _logsumexp_fwd(a, axis):
    c = jnp.max(a, axis=axis, keepdims=True)
    safe = jnp.isfinite(c)
    c = jnp.where(safe, c, 0)
    e = jnp.exp(a - c)
    z = jnp.sum(e, axis=axis, keepdims=True)
    r = jnp.squeeze(c, axis=axis) + jnp.log(jnp.squeeze(z, axis=axis))
    return r, (e, z)


def _logsumexp_bwd(axis, res, g):
    e = jnp.asarray(res[0])
    z = jnp.asarray(res[1])
    g = jnp.asarray(g)
    safe = z != 0
    z = jnp.where(safe, z, 1)
    if axis is not None:
        g = jnp.expand_dims(g, axis=axis)
    return (g / z * e,)


logsumexp.defvjp(_logsumexp_fwd, _logsumexp_bwd)
# axis left to its default (None): one spec
logsumexp_default_axis_rule = jax_rule(logsumexp, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0),
                                       name="logsumexp_default_axis_rule")
# axis given as the nondiff argument
logsumexp_axis1_rule = jax_rule(logsumexp, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0), constant(1),
                                name="logsumexp_axis1_rule")


LABELS = {
    "sin_times_rule": {"source": f"{JAX} {NOTEBOOK}"},
    "sin_rule": {"source": f"{JAX} {NOTEBOOK}"},
    "fixed_point_sqrt_rule": {"source": f"{JAX} {NOTEBOOK}"},
    "pytree_point_rule": {"source": f"{JAX} {NOTEBOOK}"},
    "logsumexp_default_axis_rule": {"source": "https://github.com/jax-ml/jax/issues/6811#issuecomment-986265534"},
    "logsumexp_axis1_rule": {"source": "https://github.com/jax-ml/jax/issues/6811#issuecomment-986265534"},
}

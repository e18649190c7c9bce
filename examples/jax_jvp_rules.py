"""JAX forward-mode rules: `jax.custom_jvp` functions checked with `jax_rule`.

    gradguard check examples/jax_jvp_rules.py

A custom_jvp has no pullback of its own: reverse mode is the transpose JAX derives from the jvp, and
gradguard checks both (the jvp against forward finite differences, the transpose like any pullback):

    softplus_rule          correct: passes every check
    power_rule             correct, with nondiff_argnums and a constant argument
    sign_slip_rule         the jvp's derivative is wrong: forward and reverse mode   GG201, GG203, GG207
    tangent_offset_rule    an offset in the tangent: forward mode only               GG207, GG208
    stopped_slope_rule     first order right, second order wrong                     GG204
"""

from functools import partial

import jax
import jax.numpy as jnp

from gradguard import arrays, constant, jax_rule

SPEC = arrays(shape=(4,), min_value=-20.0, max_value=20.0)


# -- correct: softplus -----------------------------------------------------------------------------
@jax.custom_jvp
def softplus(x):
    return jnp.logaddexp(0.0, x)


@softplus.defjvp
def softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus(x), t * jax.nn.sigmoid(x)


softplus_rule = jax_rule(softplus, SPEC)


# -- correct: a constant exponent (nondiff_argnums) ------------------------------------------------
@partial(jax.custom_jvp, nondiff_argnums=(1,))
def power(x, n):
    return x**n


@power.defjvp
def power_jvp(n, primals, tangents):
    (x,), (t,) = primals, tangents
    return x**n, n * x ** (n - 1) * t


power_rule = jax_rule(power, arrays(shape=(3,)), constant(3))


# -- buggy: the derivative of softplus(-x) ---------------------------------------------------------
@jax.custom_jvp
def softplus_slip(x):
    return jnp.logaddexp(0.0, x)


@softplus_slip.defjvp
def softplus_slip_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus_slip(x), t * jax.nn.sigmoid(-x)


sign_slip_rule = jax_rule(softplus_slip, SPEC)


# -- buggy: affine in the tangent; jax.grad never sees the offset, jax.jvp does --------------------
@jax.custom_jvp
def softplus_offset(x):
    return jnp.logaddexp(0.0, x)


@softplus_offset.defjvp
def softplus_offset_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus_offset(x), t * jax.nn.sigmoid(x) + 1e-3


tangent_offset_rule = jax_rule(softplus_offset, SPEC)


# -- buggy: the slope is cut off from x, so Hessians are zero --------------------------------------
@jax.custom_jvp
def softplus_stopped(x):
    return jnp.logaddexp(0.0, x)


@softplus_stopped.defjvp
def softplus_stopped_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus_stopped(x), t * jax.nn.sigmoid(jax.lax.stop_gradient(x))


stopped_slope_rule = jax_rule(softplus_stopped, SPEC)

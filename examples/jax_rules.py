"""JAX-native rules: `jax.custom_vjp` functions checked with `jax_rule`.

    gradguard check examples/jax_rules.py

One correct rule and one rule per JAX-specific way of being wrong:

    softplus_rule            correct: passes every check
    logsumexp_rule           correct, and more stable than JAX's own derivative of its primal
    ignores_cotangent_rule   bwd ignores the cotangent's value       GG201, GG202, GG203
    traced_fast_path_rule    bwd right only without jit              GG601
    python_branch_rule       bwd raises under jit and vmap           GG601, GG602
    stopped_residual_rule    first order right, second order wrong   GG204
    host_norm_rule           bwd breaks under vmap only              GG602
"""

import jax
import jax.numpy as jnp
import numpy as np

from gradguard import arrays, jax_rule

# -- correct: softplus -----------------------------------------------------------------------------


@jax.custom_vjp
def softplus(x):
    return jnp.logaddexp(0.0, x)


def softplus_fwd(x):
    # jnp code, not softplus(x): JAX differentiates fwd for second order, and forward mode refuses a custom_vjp
    return jnp.logaddexp(0.0, x), jax.nn.sigmoid(x)


def softplus_bwd(sig, g):
    return (g * sig,)


softplus.defvjp(softplus_fwd, softplus_bwd)
softplus_rule = jax_rule(softplus, arrays(shape=(5,), min_value=-30.0, max_value=30.0))


# -- correct: logsumexp over the last axis ----------------------------------------------------------


@jax.custom_vjp
def logsumexp(x):
    m = jnp.max(x, axis=-1, keepdims=True)
    return jnp.log(jnp.sum(jnp.exp(x - m), axis=-1)) + m[..., 0]


def logsumexp_fwd(x):
    y = logsumexp.fun(x)  # the undecorated primal: second order stays available
    return y, (x, y)


def logsumexp_bwd(res, g):
    x, y = res
    return (g[..., None] * jnp.exp(x - y[..., None]),)


logsumexp.defvjp(logsumexp_fwd, logsumexp_bwd)
logsumexp_rule = jax_rule(logsumexp, arrays(shape=(2, 4)))


# -- bwd ignores the cotangent's value (right only for g == 1) ---------------------------------------


@jax.custom_vjp
def ignores_cotangent(x):
    return jnp.logaddexp(0.0, x)


ignores_cotangent.defvjp(lambda x: (ignores_cotangent(x), x), lambda x, g: (jax.nn.sigmoid(x),))
ignores_cotangent_rule = jax_rule(ignores_cotangent, arrays(shape=(3,)))


# -- right only without jit: a "fast path" for traced values drops a factor --------------------------


@jax.custom_vjp
def traced_fast_path(x):
    return x**3


def traced_fast_path_bwd(x, g):
    if isinstance(x, jax.core.Tracer):  # the path jit takes
        return (3 * x * g,)  # should be 3 * x**2 * g
    return (3 * x**2 * g,)


traced_fast_path.defvjp(lambda x: (traced_fast_path(x), x), traced_fast_path_bwd)
traced_fast_path_rule = jax_rule(traced_fast_path, arrays(shape=(3,)))


# -- a Python branch on a traced value: raises under jit and vmap ----------------------------------


@jax.custom_vjp
def python_branch(x):
    return jnp.tanh(x)


def python_branch_bwd(t, g):
    if jnp.all(g == 0):  # a shortcut that needs a concrete g
        return (g,)
    return ((1 - t**2) * g,)


python_branch.defvjp(lambda x: (jnp.tanh(x), jnp.tanh(x)), python_branch_bwd)
python_branch_rule = jax_rule(python_branch, arrays(shape=(3,)))


# -- second order wrong: the residual is cut off from x ----------------------------------------------


@jax.custom_vjp
def stopped_residual(x):
    return jnp.logaddexp(0.0, x)


def stopped_residual_fwd(x):
    return jnp.logaddexp(0.0, x), jax.nn.sigmoid(jax.lax.stop_gradient(x))  # JAX sees a constant


stopped_residual.defvjp(stopped_residual_fwd, lambda sig, g: (g * sig,))
stopped_residual_rule = jax_rule(stopped_residual, arrays(shape=(3,)))


# -- breaks under vmap only: a host function declared batch-aware, but it is not ---------------------


def _host_scaled(x, g):
    return (g * x / np.linalg.norm(x)).astype(x.dtype)  # the norm of everything it is given


@jax.custom_vjp
def host_norm(x):
    return jnp.linalg.norm(x)


def host_norm_bwd(x, g):
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return (jax.pure_callback(_host_scaled, out, x, g, vmap_method="expand_dims"),)


host_norm.defvjp(lambda x: (host_norm(x), x), host_norm_bwd)
host_norm_rule = jax_rule(host_norm, arrays(shape=(3,), min_value=0.5, max_value=4.0))

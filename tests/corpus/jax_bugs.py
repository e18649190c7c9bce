"""Corpus: buggy JAX-native rules (`jax.custom_vjp` checked with `jax_rule`), one bug each.

``expect`` lists every id each rule must fail, the safety matrix's (GG5xx)
included: a wrong first derivative is wrong in the programs that embed the
rule too. Several rules are wrong only under a transform (jit, vmap, second
order), where testers that call the rule eagerly see nothing.
"""

import jax
import jax.numpy as jnp
import numpy as np

from gradguard import arrays, floats, jax_rule


# A sign slip: sigmoid(-x) instead of sigmoid(x).
@jax.custom_vjp
def softplus_sign(x):
    return jnp.logaddexp(0.0, x)


softplus_sign.defvjp(lambda x: (jnp.logaddexp(0.0, x), x), lambda x, g: (g * jax.nn.sigmoid(-x),))
softplus_sign_slip_jax = jax_rule(softplus_sign, arrays(shape=(3,)), name="softplus_sign_slip_jax")


# bwd ignores the cotangent's value: right only for g == 1.
@jax.custom_vjp
def softplus_no_g(x):
    return jnp.logaddexp(0.0, x)


softplus_no_g.defvjp(lambda x: (jnp.logaddexp(0.0, x), x), lambda x, g: (jax.nn.sigmoid(x),))
ignores_cotangent_jax = jax_rule(softplus_no_g, arrays(shape=(3,)), name="ignores_cotangent_jax")


# A "fast path" for traced values that drops a factor: right only without jit.
@jax.custom_vjp
def cube_fast(x):
    return x**3


def _cube_fast_bwd(x, g):
    if isinstance(x, jax.core.Tracer):
        return (3 * x * g,)
    return (3 * x**2 * g,)


cube_fast.defvjp(lambda x: (x**3, x), _cube_fast_bwd)
traced_fast_path_jax = jax_rule(cube_fast, arrays(shape=(3,)), name="traced_fast_path_jax")


# A Python branch on a traced value: raises under jit and vmap.
@jax.custom_vjp
def tanh_branch(x):
    return jnp.tanh(x)


def _tanh_branch_bwd(t, g):
    if jnp.all(g == 0):
        return (g,)
    return ((1 - t**2) * g,)


tanh_branch.defvjp(lambda x: (jnp.tanh(x), jnp.tanh(x)), _tanh_branch_bwd)
python_branch_jax = jax_rule(tanh_branch, arrays(shape=(3,)), name="python_branch_jax")


# float() on a traced value: fine eagerly, raises under jit and vmap.
@jax.custom_vjp
def scale_by(x, s):
    return x * s


def _scale_by_bwd(res, g):
    x, s = res
    return (g * float(s), jnp.sum(g * x))


scale_by.defvjp(lambda x, s: (x * s, (x, s)), _scale_by_bwd)
float_of_tracer_jax = jax_rule(scale_by, arrays(shape=(3,)), floats(), name="float_of_tracer_jax")


# Second order wrong: the residual is wrapped in stop_gradient; first order right.
@jax.custom_vjp
def softplus_stopped(x):
    return jnp.logaddexp(0.0, x)


softplus_stopped.defvjp(
    lambda x: (jnp.logaddexp(0.0, x), jax.nn.sigmoid(jax.lax.stop_gradient(x))), lambda sig, g: (g * sig,)
)
stopped_residual_jax = jax_rule(softplus_stopped, arrays(shape=(3,)), name="stopped_residual_jax")


# Second order wrong: the residual comes from an inner custom_jvp whose derivative is wrong.
@jax.custom_jvp
def _tanh_inner(x):
    return jnp.tanh(x)


_tanh_inner.defjvp(lambda primals, tangents: (jnp.tanh(primals[0]), tangents[0]))  # should be (1 - tanh**2) * dx


@jax.custom_vjp
def tanh_res(x):
    return jnp.tanh(x)


tanh_res.defvjp(lambda x: (jnp.tanh(x), _tanh_inner(x)), lambda t, g: ((1 - t**2) * g,))
inner_jvp_wrong_jax = jax_rule(tanh_res, arrays(shape=(3,)), name="inner_jvp_wrong_jax")


# Breaks under vmap only: a host function declared batch-aware that normalises over everything it gets.
def _host_scaled(x, g):
    return (g * x / np.linalg.norm(x)).astype(x.dtype)


@jax.custom_vjp
def norm_host(x):
    return jnp.linalg.norm(x)


def _norm_host_bwd(x, g):
    return (jax.pure_callback(_host_scaled, jax.ShapeDtypeStruct(x.shape, x.dtype), x, g, vmap_method="expand_dims"),)


norm_host.defvjp(lambda x: (jnp.linalg.norm(x), x), _norm_host_bwd)
host_callback_vmap_jax = jax_rule(norm_host, arrays(shape=(3,), min_value=0.5, max_value=4.0), name="host_callback_vmap_jax")


# Not traceable: NumPy on traced values in the primal, fwd and bwd (works only eagerly).
@jax.custom_vjp
def sin_numpy(x):
    return np.sin(x)


sin_numpy.defvjp(lambda x: (np.sin(x), x), lambda x, g: (np.cos(x) * g,))
numpy_inside_jax = jax_rule(sin_numpy, arrays(shape=(3,)), name="numpy_inside_jax")


# bwd returns one tangent too many (the wrong pytree).
@jax.custom_vjp
def sin_extra(x):
    return jnp.sin(x)


sin_extra.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (jnp.cos(x) * g, g))
extra_tangent_jax = jax_rule(sin_extra, arrays(shape=(3,)), name="extra_tangent_jax")


# bwd returns a tangent of the wrong shape (summed over the array).
@jax.custom_vjp
def scale2(x):
    return 2 * x


scale2.defvjp(lambda x: (2 * x, None), lambda _, g: (jnp.sum(2 * g, keepdims=True),))
summed_tangent_jax = jax_rule(scale2, arrays(shape=(3,)), name="summed_tangent_jax")


# Complex: ChainRules' convention (conj) in a custom_vjp, which must follow JAX's.
@jax.custom_vjp
def csquare_conj(z):
    return z * z


csquare_conj.defvjp(lambda z: (z * z, z), lambda z, g: (2 * jnp.conj(z) * g,))
chainrules_convention_jax = jax_rule(csquare_conj, arrays(shape=(3,), dtype="complex128"), name="chainrules_convention_jax")


LABELS = {
    "softplus_sign_slip_jax": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "ignores_cotangent_jax": {"bug": "numeric", "expect": ["GG201", "GG202", "GG203", "GG301", "GG501"]},
    "traced_fast_path_jax": {"bug": "jax-composition", "expect": ["GG201", "GG203", "GG501", "GG601"]},
    "python_branch_jax": {"bug": "jax-composition", "expect": ["GG601", "GG602"]},
    "float_of_tracer_jax": {"bug": "jax-composition", "expect": ["GG601", "GG602"]},
    "stopped_residual_jax": {"bug": "numeric", "expect": ["GG204"]},
    "inner_jvp_wrong_jax": {"bug": "numeric", "expect": ["GG204"]},
    "host_callback_vmap_jax": {"bug": "jax-composition", "expect": ["GG602"]},
    "numpy_inside_jax": {"bug": "jax-composition", "expect": ["GG601", "GG602"]},
    "extra_tangent_jax": {"bug": "contract", "expect": ["GG103"]},
    "summed_tangent_jax": {"bug": "contract", "expect": ["GG104"]},
    "chainrules_convention_jax": {"bug": "numeric", "expect": ["GG201", "GG205", "GG501"]},
}

"""Real-world corpus: JAX's own `custom_jvp` rules (jax.nn, jax.numpy, jax.numpy.linalg, jax.scipy.special).

Copied from JAX 0.10.2 (the release on PyPI; paths under ``jax/_src/``, lines in ``LABELS``). Each jvp rule is
copied exactly as JAX has it, with JAX's internal helpers spelled through the public API (``lax._const(x, c)`` as
a constant of x's dtype, ``lax.full_like``, ``jnp.trace``); a primal whose implementation is short is copied too,
and one that is a long rational or series approximation (Dawson's integral, Owen's T, the exponential integral)
is JAX's public function, its value only, said in the rule's comment. ``_cofactor_solve`` (det's jvp helper, 60
lines of LU pivoting) is imported from JAX. Specs are each function's real domain; ``xlogx_rule`` includes 0,
where ``x * log(x)`` has no finite derivative (its NaN for a zero cotangent there is a warning, not an error),
and ``slogdet_rule`` draws singular matrices, where ``log|det|`` is -inf.

The probe that brought these here (every check, seeds 0 and 1, 27 rules) found two false errors of gradguard,
fixed with it (a logarithmic vertical tangent at the edge of a domain; a zero cotangent where the primal itself is
not finite), and two real flaws of JAX's rules, listed in ``UPSTREAM_FLAWS`` with evidence in INDEX.md.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_jvp, lax
from jax._src.numpy.linalg import _cofactor_solve

from gradguard import arrays, constant, jax_rule

JAX = "jax 0.10.2 (PyPI)"


def _const(x, c):  # lax._const: a constant of x's dtype
    return jnp.asarray(c, dtype=jnp.result_type(x))


# =====================================================================================================
# jax/_src/nn/functions.py:71-106  relu.defjvps(lambda g, ans, x: lax.select(x > 0, g, lax.full_like(g, 0)))
# =====================================================================================================
@custom_jvp
@jax.jit
def relu(x):
    return jnp.maximum(x, 0)


relu.defjvps(lambda g, ans, x: lax.select(x > 0, g, lax.full_like(g, 0)))

relu_rule = jax_rule(relu, arrays(shape=(4,)), name="jax_relu_rule")


# =====================================================================================================
# jax/_src/nn/functions.py:614-631  _softmax, nondiff axis:  y * (x_dot - (y * x_dot).sum(axis, keepdims=True))
# =====================================================================================================
@partial(custom_jvp, nondiff_argnums=(1,))
def _softmax(x, axis=-1, where=None, initial=-np.inf):
    x_max = jnp.max(x, axis, where=where, initial=initial, keepdims=True)
    x_safe = x if where is None else jnp.where(where, x, initial)
    unnormalized = jnp.exp(x_safe - x_max)
    result = unnormalized / jnp.sum(unnormalized, axis, where=where, keepdims=True)
    if where is not None:
        result = jnp.where(where, result, 0)
    return result


@_softmax.defjvp
def _softmax_jvp(axis, primals, tangents):
    (x, where, initial), (x_dot, _, _) = primals, tangents
    y = _softmax(x, axis, where, initial)
    return y, y * (x_dot - (y * x_dot).sum(axis, where=where, keepdims=True))


softmax_rule = jax_rule(_softmax, arrays(shape=(2, 3)), constant(-1), name="jax_softmax_rule")


# =====================================================================================================
# jax/_src/nn/functions.py:1492-1513  log1mexp.defjvps(lambda g, ans, x: g / jnp.expm1(x)); undefined for x < 0
# =====================================================================================================
@custom_jvp
@jax.jit
def log1mexp(x):
    c = jnp.log(2.0)
    return jnp.where(
        x < c,
        jnp.log(-jnp.expm1(-x)),
        jnp.log1p(-jnp.exp(-x)),
    )


log1mexp.defjvps(lambda g, ans, x: g / jnp.expm1(x))

log1mexp_rule = jax_rule(log1mexp, arrays(shape=(4,), min_value=1e-6, max_value=50.0), name="jax_log1mexp_rule")


# =====================================================================================================
# jax/_src/numpy/lax_numpy.py:6129-6138  _i0_jvp: where(primals[0] == 0, 0.0, tangent_out)
# =====================================================================================================
@custom_jvp
def _i0(x):
    abs_x = lax.abs(x)
    return lax.mul(lax.exp(abs_x), lax.bessel_i0e(abs_x))


@_i0.defjvp
def _i0_jvp(primals, tangents):
    primal_out, tangent_out = jax.jvp(_i0.fun, primals, tangents)
    return primal_out, jnp.where(primals[0] == 0, 0.0, tangent_out)


i0_rule = jax_rule(_i0, arrays(shape=(4,), min_value=-20.0, max_value=20.0), name="jax_i0_rule")


# =====================================================================================================
# jax/_src/numpy/linalg.py:553, 625-639  _slogdet_jvp: ans_dot = trace(solve(x, g)); sign_dot = 0 (real)
# The primal is jnp.linalg.slogdet's value (LU; _slogdet_lu's body uses lax.linalg internals).
# =====================================================================================================
@custom_jvp
def _slogdet(a):
    return tuple(jnp.linalg.slogdet(a))


def _slogdet_jvp(primals, tangents):
    x, = primals
    g, = tangents
    sign, ans = jnp.linalg.slogdet(x)
    ans_dot = jnp.trace(jnp.linalg.solve(x, g), axis1=-1, axis2=-2)
    if jnp.issubdtype(jnp.result_type(x), np.complexfloating):
        sign_dot = (ans_dot - jnp.real(ans_dot).astype(ans_dot.dtype)) * sign
        ans_dot = jnp.real(ans_dot)
    else:
        sign_dot = jnp.zeros_like(sign)
    return (sign, ans), (sign_dot, ans_dot)


_slogdet.defjvp(_slogdet_jvp)

slogdet_rule = jax_rule(_slogdet, arrays(shape=(3, 3)), name="jax_slogdet_rule")


# =====================================================================================================
# jax/_src/numpy/linalg.py:747-757  _det_jvp: y, z = _cofactor_solve(x, g); return y, trace(z)
# =====================================================================================================
@custom_jvp
def _det(a):
    sign, logdet = jnp.linalg.slogdet(a)
    return sign * jnp.exp(logdet).astype(sign.dtype)


@_det.defjvp
def _det_jvp(primals, tangents):
    x, = primals
    g, = tangents
    y, z = _cofactor_solve(x, g)
    return y, jnp.trace(z, axis1=-1, axis2=-2)


det_rule = jax_rule(_det, arrays(shape=(3, 3)), name="jax_det_rule")


# =====================================================================================================
# jax/_src/lax/other.py:255-291  _logaddexp_jvp: t1 * exp(_replace_inf(x1) - _replace_inf(out)) + (same for x2)
# =====================================================================================================
def _replace_inf(x):
    inf = _const(x, float("inf"))
    return lax.select(lax.eq(x, inf), jnp.zeros_like(x), x)


@custom_jvp
def logaddexp(x1, x2):
    amax = lax.max(x1, x2)
    delta = lax.sub(x1, x2)
    return lax.select(jnp.isnan(delta),
                      lax.add(x1, x2),  # NaNs or infinities of the same sign.
                      lax.add(amax, lax.log1p(lax.exp(lax.neg(lax.abs(delta))))))


@logaddexp.defjvp
def _logaddexp_jvp(primals, tangents):
    x1, x2 = primals
    t1, t2 = tangents
    primal_out = logaddexp(x1, x2)
    tangent_out = lax.add(
        lax.mul(t1, lax.exp(lax.sub(_replace_inf(x1), _replace_inf(primal_out)))),
        lax.mul(t2, lax.exp(lax.sub(_replace_inf(x2), _replace_inf(primal_out)))))
    return primal_out, tangent_out


logaddexp_rule = jax_rule(logaddexp, arrays(shape=(3,)), arrays(shape=(3,)), name="jax_logaddexp_rule")


# =====================================================================================================
# jax/_src/scipy/special.py:893-913  logit.defjvps(lambda g, ans, x: lax.div(g, lax.mul(x, lax.sub(1, x))))
# =====================================================================================================
@custom_jvp
def logit(x):
    return lax.log(lax.div(x, lax.sub(_const(x, 1), x)))


logit.defjvps(lambda g, ans, x: lax.div(g, lax.mul(x, lax.sub(_const(x, 1), x))))

logit_rule = jax_rule(logit, arrays(shape=(4,), min_value=1e-6, max_value=1 - 1e-6), name="jax_logit_rule")


# =====================================================================================================
# jax/_src/scipy/special.py:937-1011  xlogy, xlog1py and _xlogx (entr's): x_dot * log(y) + y_dot * x / y;
# x_dot * log1p(y) + y_dot * x / (1 + y); x_dot * (log(x) + 1)
# =====================================================================================================
@custom_jvp
def xlogy(x, y):
    x_ok = x != 0.
    return jnp.where(x_ok | jnp.isnan(y), lax.mul(x, lax.log(y)), jnp.zeros_like(x))


def _xlogy_jvp(primals, tangents):
    (x, y) = primals
    (x_dot, y_dot) = tangents
    result = xlogy(x, y)
    return result, (x_dot * lax.log(y) + y_dot * x / y).astype(result.dtype)


xlogy.defjvp(_xlogy_jvp)


@custom_jvp
def xlog1py(x, y):
    x_ok = x != 0.
    return jnp.where(x_ok | jnp.isnan(y), lax.mul(x, lax.log1p(y)), jnp.zeros_like(x))


def _xlog1py_jvp(primals, tangents):
    (x, y) = primals
    (x_dot, y_dot) = tangents
    result = xlog1py(x, y)
    return result, (x_dot * lax.log1p(y) + y_dot * x / (1 + y)).astype(result.dtype)


xlog1py.defjvp(_xlog1py_jvp)


@custom_jvp
def _xlogx(x):
    return xlogy(x, x)


def _xlogx_jvp(primals, tangents):
    x, = primals
    x_dot, = tangents
    return _xlogx(x), x_dot * (lax.log(x) + 1)


_xlogx.defjvp(_xlogx_jvp)

xlogy_rule = jax_rule(xlogy, arrays(shape=(3,)), arrays(shape=(3,), min_value=1e-6, max_value=100.0),
                      name="jax_xlogy_rule")
xlog1py_rule = jax_rule(xlog1py, arrays(shape=(3,)), arrays(shape=(3,), min_value=-1 + 1e-6, max_value=100.0),
                        name="jax_xlog1py_rule")
xlogx_rule = jax_rule(_xlogx, arrays(shape=(4,), min_value=0.0, max_value=100.0), name="jax_xlogx_rule")


# =====================================================================================================
# jax/_src/scipy/special.py:834-841  _dawsn.defjvps(lambda g, ans, x: g * (1 - 2 * x * ans))
# The primal is jax.scipy.special.dawsn's value (Cody, Paciorek and Thacher's rational approximations).
# =====================================================================================================
@custom_jvp
def dawsn(x):
    return jax.scipy.special.dawsn(x)


dawsn.defjvps(lambda g, ans, x: g * (_const(x, 1.) - _const(x, 2.) * x * ans))

dawsn_rule = jax_rule(dawsn, arrays(shape=(4,), min_value=-50.0, max_value=50.0), name="jax_dawsn_rule")


# =====================================================================================================
# jax/_src/scipy/special.py:2583-2609  expi_jvp: exp(x) / x * x_dot  (x != 0)
# The primal is jax.scipy.special.expi's value (piecewise series and rational approximations).
# =====================================================================================================
@custom_jvp
@jax.jit
def expi(x):
    return jax.scipy.special.expi(x)


@expi.defjvp
@jax.jit
def expi_jvp(primals, tangents):
    (x,) = primals
    (x_dot,) = tangents
    return expi(x), jnp.exp(x) / x * x_dot


expi_rule = jax_rule(expi, arrays(shape=(4,), min_value=0.01, max_value=50.0), name="jax_expi_rule")


# =====================================================================================================
# jax/_src/scipy/special.py:3775-3823  _owens_t_jvp: dT/dh = -exp(-h**2/2) erf(a h / sqrt 2) / (2 sqrt(2 pi)),
# dT/da = exp(-(a**2 + 1) h**2 / 2) / (2 pi (a**2 + 1)). The primal is jax.scipy.special.owens_t's value.
# =====================================================================================================
@custom_jvp
def owens_t(h, a):
    return jax.scipy.special.owens_t(h, a)


def _owens_t_jvp(primals, tangents):
    (h, a) = primals
    (dh, da) = tangents
    result = owens_t(h, a)
    root_2 = _const(h, np.sqrt(2))
    dout_dh = (-lax.exp(-0.5 * lax.square(h)) * lax.erf(a * h / root_2)
               / (2. * _const(h, np.sqrt(2. * np.pi))))
    dout_da = (lax.exp(-0.5 * (lax.square(a) + 1.) * lax.square(h))
               / (2. * np.pi * (lax.square(a) + 1.)))
    return result, (dout_dh * dh + dout_da * da).astype(result.dtype)


owens_t.defjvp(_owens_t_jvp)

owens_t_rule = jax_rule(owens_t, arrays(shape=(3,), min_value=-5.0, max_value=5.0),
                        arrays(shape=(3,), min_value=-5.0, max_value=5.0), name="jax_owens_t_rule")


LABELS = {
    "jax_relu_rule": {"source": f"{JAX} jax/_src/nn/functions.py:71-106"},
    "jax_softmax_rule": {"source": f"{JAX} jax/_src/nn/functions.py:614-631"},
    "jax_log1mexp_rule": {"source": f"{JAX} jax/_src/nn/functions.py:1492-1513"},
    "jax_i0_rule": {"source": f"{JAX} jax/_src/numpy/lax_numpy.py:6129-6138"},
    "jax_slogdet_rule": {"source": f"{JAX} jax/_src/numpy/linalg.py:553, 625-639"},
    "jax_det_rule": {"source": f"{JAX} jax/_src/numpy/linalg.py:747-757"},
    "jax_logaddexp_rule": {"source": f"{JAX} jax/_src/lax/other.py:255-291"},
    "jax_logit_rule": {"source": f"{JAX} jax/_src/scipy/special.py:893-913"},
    "jax_xlogy_rule": {"source": f"{JAX} jax/_src/scipy/special.py:937-967"},
    "jax_xlog1py_rule": {"source": f"{JAX} jax/_src/scipy/special.py:970-1000"},
    "jax_xlogx_rule": {"source": f"{JAX} jax/_src/scipy/special.py:1002-1011"},
    "jax_dawsn_rule": {"source": f"{JAX} jax/_src/scipy/special.py:834-841"},
    "jax_expi_rule": {"source": f"{JAX} jax/_src/scipy/special.py:2583-2609"},
    "jax_owens_t_rule": {"source": f"{JAX} jax/_src/scipy/special.py:3775-3823"},
}

UPSTREAM_FLAWS = {
    "jax_i0_rule": (
        {"GG204"},
        "JAX's _i0_jvp zeroes the tangent where x == 0 (jnp.where(x == 0, 0.0, tangent)) to keep abs's kink out, "
        "which also zeroes the second derivative there: jax.grad(jax.grad(jnp.i0))(0.0) is 0.0, where i0''(0) = 1/2 "
        "(and JAX gives 0.5000002 at x = 1e-3)",
    ),
    "jax_det_rule": (
        {"GG204"},
        "JAX's _det_jvp differentiates _cofactor_solve, whose second derivative is not det's at a nearly singular "
        "matrix: at [[0, 5.5e-28, 0], [0, 0, 0.5356], [-9.467, 0, 0]] along u = ones, w = ones, "
        "d/dt <w, grad det(x + t u)> is 0 exactly (mpmath, det's cofactors are polynomials) and 8.1e-15 by finite "
        "differences; JAX's jvp of its grad gives 8.93, its jvp of vjp 6.46e+11; and at an exactly singular matrix "
        "(row 1 zero) JAX's jvp of vjp is NaN where the exact cofactors (sympy) give -21.126074 along the drawn u, "
        "finite differences -21.1261",
    ),
}

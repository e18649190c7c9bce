"""Real-world corpus: correct `jax.custom_jvp` and `jax.custom_vjp` rules from public JAX libraries.

Copied from jax-md, numpyro, optax, jaxopt, ott-jax, distrax, brax, e3nn-jax, camp_zipnerf and efax (the commit of each is in the
constants below; the comment above each rule names its file and lines and quotes the upstream derivative). The
math is kept exactly as the source has it; helpers a rule needs are copied next to it, and a substitution, where
one was unavoidable, is said in the comment. Specs are each rule's real domain (jax-md's quaternion rotation returns the gradient projected on the unit
sphere's tangent space: its quaternion is declared structure="unit"). Left out on purpose: rules whose
derivative is deliberately another one (ott-jax's softmin returns no gradient for gamma, so gamma is a constant here), a rule
this JAX cannot run (distrax's multiply_no_nan calls jax.core.get_aval, removed from JAX), and TFP's log_cosh,
whose primal returns |x| instead of x**2 / 2 below 2.4e-50 (its derivative is right for the true function; the
primal is not). ``LABELS`` maps each rule to its source; ``UPSTREAM_FLAWS`` lists the error findings that are real
flaws of the upstream rule, with evidence in INDEX.md.
"""

import functools
import math
import warnings
from collections import namedtuple
from functools import partial
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
import numpy as onp
from hypothesis import strategies as st
from jax import custom_jvp

from gradguard import arrays, constant, jax_rule

JAXMD = "jax-md/jax-md@a41c7d19f6468f4e5263c32c12c9ed6cba26ebff"
NUMPYRO = "pyro-ppl/numpyro@0b935d488056ae1775b4ab05cbe2812f51f21a4f"
OPTAX = "google-deepmind/optax@2edbcbe2390da13983b92cbef94ac0460ecde1c5"
JAXOPT = "google/jaxopt@2de13bf01fd29e22862236a0d869f2b14e1629d4"
OTT = "ott-jax/ott@6aace50f673b877cc3394d0b53a24da0bbf11308"
DISTRAX = "google-deepmind/distrax@f51bffcf9094d269a0be8678762dd2849833c8b7"
BRAX = "google/brax@0b96d056328d15ea7ebfd3ce07f42be72ec76e40"
E3NNJAX = "e3nn/e3nn-jax@04e761c8e9a42c339cc712fb8b9af85ddd618eab"
ZIPNERF = "jonbarron/camp_zipnerf@8e6d57e3aee34235faf3ef99decca0994efe66c9"
EFAX = "NeilGirdhar/efax@b5de6514b1c18a2783690c8b362a5dc317f988b9"


# =====================================================================================================
# jax-md  jax_md/mm_forcefields/reaxff/reaxff_helper.py:18-28
#   tangent_out = 0.5 * x_dot / jnp.where(x > 0, primal_out, jnp.inf)
# "Safe sqrt function (no nan gradients)": sqrt on x >= 0, zero tangent at x == 0.
# =====================================================================================================
@custom_jvp
def safe_sqrt(x):
  """Safe sqrt function (no nan gradients)."""
  return jnp.sqrt(x)


@safe_sqrt.defjvp
def safe_sqrt_jvp(primals, tangents):
  x = primals[0]
  x_dot = tangents[0]
  # print(x[0])
  primal_out = safe_sqrt(x)
  tangent_out = 0.5 * x_dot / jnp.where(x > 0, primal_out, jnp.inf)
  return primal_out, tangent_out


jaxmd_safe_sqrt_rule = jax_rule(safe_sqrt, arrays(shape=(4,), min_value=0.0, max_value=100.0),
                                name="jaxmd_safe_sqrt_rule")


# =====================================================================================================
# jax-md  jax_md/_nn/uma/common/rotation.py:21 (EPS), 29-47
#   x_clamped = jnp.clip(x, -1 + EPS, 1 - EPS); denom = jnp.maximum(jnp.sqrt(1 - x_clamped**2), EPS)
#   tangent_out = -x_dot / denom
# "Forward pass: exact arccos(x). Backward pass: gradient uses clamped x to avoid NaN near +-1."
# Domain: the interval on which the clamp is inactive, |x| <= 1 - EPS.
# =====================================================================================================
EPS = 1e-7


@jax.custom_jvp
def safe_acos(x: jnp.ndarray) -> jnp.ndarray:
  """Numerically stable arccos matching PyTorch's Safeacos."""
  return jnp.arccos(x)


@safe_acos.defjvp
def _safe_acos_jvp(primals, tangents):
  (x,) = primals
  (x_dot,) = tangents
  primal_out = safe_acos(x)
  x_clamped = jnp.clip(x, -1 + EPS, 1 - EPS)
  denom = jnp.sqrt(1 - x_clamped**2)
  denom = jnp.maximum(denom, EPS)
  tangent_out = -x_dot / denom
  return primal_out, tangent_out


jaxmd_safe_acos_rule = jax_rule(safe_acos, arrays(shape=(4,), min_value=-1 + EPS, max_value=1 - EPS),
                                name="jaxmd_safe_acos_rule")


# =====================================================================================================
# jax-md  jax_md/_nn/uma/common/rotation.py:51-66
#   denom = jnp.maximum(x**2 + y**2, EPS**2); tangent_out = (x * y_dot - y * x_dot) / denom
# "Backward: clamps denominator x^2+y^2 to avoid NaN at the origin."  Domain: away from the origin
# (each coordinate drawn with |.| >= 1e-3, both signs, so x^2 + y^2 >= 2e-6 >> EPS**2).
# =====================================================================================================
@jax.custom_jvp
def safe_atan2(y: jnp.ndarray, x: jnp.ndarray) -> jnp.ndarray:
  """Numerically stable atan2 with safe backward pass."""
  return jnp.arctan2(y, x)


@safe_atan2.defjvp
def _safe_atan2_jvp(primals, tangents):
  y, x = primals
  y_dot, x_dot = tangents
  primal_out = safe_atan2(y, x)
  denom = jnp.maximum(x**2 + y**2, EPS**2)
  tangent_out = (x * y_dot - y * x_dot) / denom
  return primal_out, tangent_out


_AWAY_FROM_0 = st.one_of(st.floats(-10.0, -1e-3), st.floats(1e-3, 10.0))
jaxmd_safe_atan2_rule = jax_rule(safe_atan2, arrays(shape=(3,), elements=_AWAY_FROM_0),
                                 arrays(shape=(3,), elements=_AWAY_FROM_0), name="jaxmd_safe_atan2_rule")


# =====================================================================================================
# jax-md  jax_md/rigid_body.py:74-75 (f64, f32: util.f64 and util.f32, jnp.float64 and jnp.float32), 100-101
# (_is_float64), 104-164 (the quaternion rotation)
#   bwd: dq, dv = vjp(_quaternion_rotate_raw)(g); return dq - (q @ dq) * q, dv
# The gradient in q is projected on the tangent space of the unit sphere: jax-md's quaternions are unit
# quaternions (rigid_body.py's Quaternion "expect[s] the quaternion to be normalized"), so q is declared
# structure="unit" (w first, as jax-md stores it). The shape checks of _quaternion_rotate_raw are kept.
# =====================================================================================================
f32 = jnp.float32
f64 = jnp.float64


def _is_float64(x) -> bool:
  return x.dtype in [jnp.float64, onp.float64]


@partial(jnp.vectorize, signature='(q),(q)->(q)')
def _quaternion_multiply(lhs, rhs):
  wl, xl, yl, zl = lhs
  wr, xr, yr, zr = rhs

  dtype = f64 if _is_float64(lhs) or _is_float64(rhs) else f32

  return jnp.array(
    [
      -xl * xr - yl * yr - zl * zr + wl * wr,
      xl * wr + yl * zr - zl * yr + wl * xr,
      -xl * zr + yl * wr + zl * xr + wl * yr,
      xl * yr - yl * xr + zl * wr + wl * zr,
    ],
    dtype=dtype,
  )


@partial(jnp.vectorize, signature='(q)->(q)')
def _quaternion_conjugate(q):
  w, x, y, z = q
  return jnp.array([w, -x, -y, -z], dtype=q.dtype)


def _quaternion_rotate_raw(q, v):
  """Rotates a vector by a given quaternion."""
  if q.shape != (4,):
    raise ValueError(
      'quaternion_rotate expects quaternion to have '
      f'4-dimensions. Found {q.shape}.'
    )
  if v.shape != (3,):
    raise ValueError(
      'quaternion_rotate expects vector to have '
      f'three-dimensions. Found {v.shape}.'
    )

  v = jnp.concatenate([jnp.zeros((1,), v.dtype), v])
  q = _quaternion_multiply(q, _quaternion_multiply(v, _quaternion_conjugate(q)))
  return q[1:]


@jax.custom_vjp
def _quaternion_rotate(q, v):
  return _quaternion_rotate_raw(q, v)


def _quaternion_rotate_fwd(q, v):
  return _quaternion_rotate(q, v), (q, v)


def _quaternion_rotate_bwd(res, g):
  q, v = res
  _, vjp_fn = jax.vjp(_quaternion_rotate_raw, q, v)
  dq, dv = vjp_fn(g)
  return dq - (q @ dq) * q, dv


_quaternion_rotate.defvjp(_quaternion_rotate_fwd, _quaternion_rotate_bwd)

jaxmd_quaternion_rotate_rule = jax_rule(_quaternion_rotate, arrays(shape=(4,), structure="unit"), arrays(shape=(3,)),
                                        name="jaxmd_quaternion_rotate_rule")

# =====================================================================================================
# numpyro  numpyro/distributions/util.py:457-485
#   log1mexp.defjvps(lambda t, ans, x: -t / jnp.expm1(-x))
# log(1 - exp(x)); "Returns -inf when x == 0 and nan when x > 0".  Domain: x < 0.
# =====================================================================================================
@jax.custom_jvp
def log1mexp(x):
    """Numerically stable calculation of the quantity log(1 - exp(x)) (Maechler 2012)."""
    return jnp.where(
        x > -0.6931472,  # approx -log(2)
        jnp.log(-jnp.expm1(x)),
        jnp.log1p(-jnp.exp(x)),
    )


log1mexp.defjvps(lambda t, ans, x: -t / jnp.expm1(-x))

numpyro_log1mexp_rule = jax_rule(log1mexp, arrays(shape=(4,), min_value=-50.0, max_value=-1e-6),
                                 name="numpyro_log1mexp_rule")


# =====================================================================================================
# optax  optax/losses/_classification.py:166-210
#   out_tangents = weights * x_dot - weights * jnp.sum(x_dot * softmax(x), -1, keepdims=True)
#                  + weights_dot * logsoftmax_x
# Domain: finite logits x; weights (label probabilities) in [0, 1].
# =====================================================================================================
@jax.custom_jvp
def weighted_logsoftmax(x, weights):
  r"""Weighted logsoftmax."""
  logsoftmax_x = jax.nn.log_softmax(x, axis=-1)
  return jnp.where(
      weights != 0.0, weights * logsoftmax_x, jnp.zeros_like(logsoftmax_x)
  )


def _weighted_logsoftmax_jvp(primals, tangents):
  """Custom JVP of weighted logsoftmax."""
  (x, weights) = primals
  (x_dot, weights_dot) = tangents
  logsoftmax_x = jax.nn.log_softmax(x, axis=-1)
  result = jnp.where(
      weights != 0.0, weights * logsoftmax_x, jnp.zeros_like(logsoftmax_x)
  )
  out_tangents = (
      weights * x_dot
      - weights
      * jnp.sum(x_dot * jax.nn.softmax(x, axis=-1), axis=-1, keepdims=True)
      + weights_dot * logsoftmax_x
  )
  return result, out_tangents


weighted_logsoftmax.defjvp(_weighted_logsoftmax_jvp)

optax_weighted_logsoftmax_rule = jax_rule(weighted_logsoftmax, arrays(shape=(2, 4)),
                                          arrays(shape=(2, 4), min_value=0.0, max_value=1.0),
                                          name="optax_weighted_logsoftmax_rule")


# =====================================================================================================
# optax  optax/projections/_projections.py:93-117
#   tangent_out = supp * values_dot - (jnp.dot(supp, values_dot) / card) * supp
# Euclidean projection onto the unit simplex; piecewise linear.  Domain: any real vector.
# =====================================================================================================
@jax.custom_jvp
def _projection_unit_simplex(values):
  """Projection onto the unit simplex."""
  s = 1
  n_features = values.shape[0]
  u = jnp.sort(values)[::-1]
  cumsum_u = jnp.cumsum(u)
  ind = jnp.arange(n_features) + 1
  cond = s / ind + (u - cumsum_u / ind) > 0
  idx = jnp.count_nonzero(cond)
  return jax.nn.relu(s / idx + (values - cumsum_u[idx - 1] / idx))


@_projection_unit_simplex.defjvp
def _projection_unit_simplex_jvp(primals, tangents):
  (values,) = primals
  (values_dot,) = tangents
  primal_out = _projection_unit_simplex(values)
  supp = primal_out > 0
  card = jnp.count_nonzero(supp)
  tangent_out = supp * values_dot - (jnp.dot(supp, values_dot) / card) * supp
  return primal_out, tangent_out


optax_projection_unit_simplex_rule = jax_rule(_projection_unit_simplex, arrays(shape=(5,), min_value=-3.0, max_value=3.0),
                                              name="optax_projection_unit_simplex_rule")


# =====================================================================================================
# jaxopt  jaxopt/_src/projection.py:140-177  (nondiff_argnums=(1, 2): max_nz, use_approx_max_nz)
#   tangent_out = supp * x_dot - (jnp.dot(supp, x_dot) / card) * supp
# Projection onto the simplex with at most max_nz non-zeros.  Domain: any real vector, max_nz = 2.
# =====================================================================================================
@partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _projection_unit_sparse_simplex(
    x: jnp.ndarray, max_nz: int,
    use_approx_max_nz: bool = False) -> jnp.ndarray:
  """Projection onto the unit simplex with cardinality constraint."""
  if use_approx_max_nz:
    max_nz_values, max_nz_indices = jax.lax.approx_max_k(x, max_nz)
  else:
    max_nz_values, max_nz_indices = jax.lax.top_k(x, max_nz)

  cumsum_max_nz_values = jnp.cumsum(max_nz_values)
  ind = jnp.arange(max_nz) + 1
  cond = 1 / ind + (max_nz_values - cumsum_max_nz_values / ind) > 0
  idx = jnp.count_nonzero(cond)
  max_nz_simplex_projection = jax.nn.relu(
      1 / idx + (max_nz_values - cumsum_max_nz_values[idx - 1] / idx))

  sparse_simplex_projection = jnp.sum(
      max_nz_simplex_projection[ :, jnp.newaxis] * jax.nn.one_hot(
          max_nz_indices, len(x), dtype=x.dtype), axis=0)

  return  sparse_simplex_projection


@_projection_unit_sparse_simplex.defjvp
def _projection_unit_sparse_simplex_jvp(
    max_nz, use_approx_max_nz, primals, tangents):
  x, = primals
  x_dot, = tangents
  primal_out = _projection_unit_sparse_simplex(x, max_nz, use_approx_max_nz)
  supp = primal_out > 0
  card = jnp.count_nonzero(supp)
  tangent_out = supp * x_dot - (jnp.dot(supp, x_dot) / card) * supp
  return primal_out, tangent_out


jaxopt_projection_sparse_simplex_rule = jax_rule(
    _projection_unit_sparse_simplex, arrays(shape=(5,), min_value=-3.0, max_value=3.0), constant(2),
    name="jaxopt_projection_sparse_simplex_rule")


# =====================================================================================================
# jaxopt  jaxopt/_src/isotonic.py:36-151  (numba is not installed here: the source's own fallback, a
# no-op `njit`, runs the PAV loop in Python, with the source's warning)
#   _jvp_isotonic_l2_jax_pav(solution, vector, eps=1e-8): block-wise mean of the tangent
# Solves argmin_{v_1 >= ... >= v_n} ||v - y||^2 (isotonic_l2_pav passes y * -1 for increasing).
# Domain: any real vector.
# =====================================================================================================
try:
  from numba import njit

  NUMBA_AVAILABLE = True
except ImportError:
  NUMBA_AVAILABLE = False

  def njit(func):
    return func


@njit
def _isotonic_l2_pav_numba(y):
  n = y.shape[0]
  target = onp.arange(n)
  c = onp.ones(n)
  sums = onp.zeros(n)
  sol = onp.zeros(n)

  for i in range(n):
    sol[i] = y[i]
    sums[i] = y[i]

  i = 0
  while i < n:
    k = target[i] + 1
    if k == n:
      break
    if sol[i] > sol[k]:
      i = k
      continue
    sum_y = sums[i]
    sum_c = c[i]
    while True:
      prev_y = sol[k]
      sum_y += sums[k]
      sum_c += c[k]
      k = target[k] + 1
      if k == n or prev_y > sol[k]:
        sol[i] = sum_y / sum_c
        sums[i] = sum_y
        c[i] = sum_c
        target[i] = k - 1
        target[k - 1] = i
        if i > 0:
          i = target[i - 1]
        break

  i = 0
  while i < n:
    k = target[i] + 1
    sol[i + 1 : k] = sol[i]
    i = k
  return sol.astype(y.dtype)


@jax.custom_jvp
def _isotonic_l2_pav(y):
  if not NUMBA_AVAILABLE:
    warnings.warn(
        "Numba could not be imported. Code will run much more slowly."
        " To install, run 'pip install numba'."
    )
  shape_dtype = jax.ShapeDtypeStruct(shape=y.shape, dtype=y.dtype)
  sol = jax.pure_callback(
      _isotonic_l2_pav_numba, shape_dtype, y, vmap_method="sequential"
  )
  return sol


def _jvp_isotonic_l2_jax_pav(solution, vector, eps=1e-8):
  x = solution
  mask = jnp.pad(jnp.absolute(jnp.diff(x)) <= eps, (1, 0))
  ar = jnp.arange(x.size)
  inds_start = jnp.where(mask == 0, ar, +jnp.inf).sort()
  one_hot_start = jax.nn.one_hot(inds_start, len(vector))
  A = jnp.cumsum(one_hot_start, axis=-1)
  A = jnp.append(jnp.diff(A[::-1], axis=0)[::-1], A[-1].reshape(1, -1), axis=0)
  B = A.copy()
  return (((B.T * (B @ vector)).T) / (A.sum(1, keepdims=True) + 1e-8)).sum(0)


@_isotonic_l2_pav.defjvp
def _isotonic_l2_pav_jvp(primals, tangents):
  """Jacobian-vector product of isotonic_l2_pav (Blondel et al. 2020, Sec. 5)."""
  (y, ) = primals
  (vector, ) = tangents
  primal_out = _isotonic_l2_pav(y)
  tangent_out = _jvp_isotonic_l2_jax_pav(primal_out, vector)
  return primal_out, tangent_out


jaxopt_isotonic_l2_pav_rule = jax_rule(_isotonic_l2_pav, arrays(shape=(5,), min_value=-3.0, max_value=3.0),
                                       name="jaxopt_isotonic_l2_pav_rule")


# =====================================================================================================
# ott-jax  src/ott/math/utils.py:49-106  (nondiff_argnums=[1, 2, 3]; primal under jax.jit with static args)
#   clean_x = jnp.where(x_is_zero, 1, x); jvp of jnp.linalg.norm at clean_x; where(x_is_zero, 0, tangents)
# Domain: any real matrix, row norms (axis=1).
# =====================================================================================================
@functools.partial(jax.custom_jvp, nondiff_argnums=[1, 2, 3])
@functools.partial(jax.jit, static_argnames=("ord", "axis", "keepdims"))
def norm(x, ord=None, axis=None, keepdims=False):
  """Computes order ord norm of vector, using `jnp.linalg` in forward pass."""
  return jnp.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)


@norm.defjvp
def norm_jvp(ord, axis, keepdims, primals, tangents):
  """Custom_jvp for norm, that returns 0.0 when evaluated at 0."""
  x, = primals
  x_is_zero = jnp.all(jnp.logical_not(x))
  clean_x = jnp.where(x_is_zero, jnp.ones_like(x), x)
  primals, tangents = jax.jvp(
      functools.partial(jnp.linalg.norm, ord=ord, axis=axis, keepdims=keepdims),
      (clean_x,), tangents
  )
  return primals, jnp.where(x_is_zero, 0.0, tangents)


ott_norm_axis1_rule = jax_rule(norm, arrays(shape=(2, 3)), constant(None), constant(1), constant(False),
                               name="ott_norm_axis1_rule")


# =====================================================================================================
# ott-jax  src/ott/math/utils.py:132-186  (nondiff_argnums=(1, 2, 4): axis, keepdims, return_sign)
#   res = sum(b * centered_exp * tan_mat) + sum(tan_b * centered_exp), centered_exp = exp(mat - lse)
# Domain: finite mat, positive weights b (return_sign=False needs sum b e^mat > 0).
# =====================================================================================================
@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 4))
def ott_logsumexp(  # noqa: D103
    mat, axis=None, keepdims=False, b=None, return_sign=False
):
  return jax.scipy.special.logsumexp(
      mat, axis=axis, keepdims=keepdims, b=b, return_sign=return_sign
  )


@ott_logsumexp.defjvp
def logsumexp_jvp(axis, keepdims, return_sign, primals, tangents):
  """Custom derivative rule for lse that does not blow up with -inf."""
  mat, b = primals
  tan_mat, tan_b = tangents
  lse = ott_logsumexp(mat, axis, keepdims, b, return_sign)
  if return_sign:
    lse, sign = lse
  lse = jnp.where(jnp.isfinite(lse), lse, 0.0)

  if axis is not None:
    centered_exp = jnp.exp(mat - jnp.expand_dims(lse, axis=axis))
  else:
    centered_exp = jnp.exp(mat - lse)

  if b is None:
    res = jnp.sum(centered_exp * tan_mat, axis=axis, keepdims=keepdims)
  else:
    res = jnp.sum(b * centered_exp * tan_mat, axis=axis, keepdims=keepdims)
    res += jnp.sum(tan_b * centered_exp, axis=axis, keepdims=keepdims)
  if return_sign:
    return (lse, sign), (sign * res, jnp.zeros_like(sign))
  return lse, res


ott_logsumexp_b_rule = jax_rule(ott_logsumexp, arrays(shape=(2, 3)), constant(1), constant(False),
                                arrays(shape=(2, 3), min_value=0.01, max_value=5.0), constant(False),
                                name="ott_logsumexp_b_rule")


# =====================================================================================================
# ott-jax  src/ott/math/utils.py:189-218  (custom_vjp, nondiff_argnums=(2,): axis)
#   bwd: (where(isinf(x / -gamma), 0, softmax(x / -gamma, axis) * g), None)
# "gamma: Smoothing parameter > 0" -- the bwd returns None (a zero cotangent) for gamma.
# Two declarations: gamma fixed (constant), and gamma differentiable (it is a positional array argument
# of the custom_vjp; JAX differentiates it if asked).
# =====================================================================================================
@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def softmin(x, gamma, axis=None):
  r"""Soft-min operator."""
  return -gamma * jax.scipy.special.logsumexp(x / -gamma, axis=axis)


softmin.defvjp(
    lambda x, gamma, axis: (softmin(x, gamma, axis), (x / -gamma, axis)),
    lambda axis, res, g: (
        jnp.where(
            jnp.isinf(res[0]), 0.0,
            jax.nn.softmax(res[0], axis=axis) *
            (g if axis is None else jnp.expand_dims(g, axis=axis))
        ), None
    )
)

ott_softmin_rule = jax_rule(softmin, arrays(shape=(2, 3)), constant(0.5), constant(1), name="ott_softmin_rule")


# =====================================================================================================
# ott-jax  src/ott/math/utils.py:251-310  (nondiff_argnums=(1, 2): tol, max_iter)
#   pz = jnp.where(z == 0.0, 1.0, w / ((1.0 + w) * z)); return w, pz * dz
# Principal branch of Lambert W (Halley iteration).  Domain: z > -1/e (= -0.3679).
# =====================================================================================================
@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def lambertw(z, tol=1e-8, max_iter=100):
  """Principal branch of the Lambert W function."""

  def initial_iacono(x):
    y = jnp.sqrt(1.0 + jnp.e * x)
    num = 1.0 + 1.14956131 * y
    denom = 1.0 + 0.45495740 * jnp.log1p(y)
    return -1.0 + 2.036 * jnp.log(num / denom)

  def cond_fun(container):
    it, converged, _ = container
    return jnp.logical_and(jnp.any(~converged), it < max_iter)

  def halley_iteration(container):
    it, _, w = container

    # modified from `tensorflow_probability`
    f = w - z * jnp.exp(-w)
    delta = f / (w + 1.0 - 0.5 * (w + 2.0) * f / (w + 1.0))

    w_next = w - delta

    not_converged = jnp.abs(delta) <= tol * jnp.abs(w_next)
    return it + 1, not_converged, w_next

  w0 = initial_iacono(z)
  converged = jnp.zeros_like(w0, dtype=bool)

  _, _, w = jax.lax.while_loop(
      cond_fun=cond_fun, body_fun=halley_iteration, init_val=(0, converged, w0)
  )
  return w


@lambertw.defjvp
def _lambertw_jvp(tol, max_iter, primals, tangents):
  z, = primals
  dz, = tangents
  w = lambertw(z, tol=tol, max_iter=max_iter)
  pz = jnp.where(z == 0.0, 1.0, w / ((1.0 + w) * z))
  return w, pz * dz


ott_lambertw_rule = jax_rule(lambertw, arrays(shape=(4,), min_value=-0.36, max_value=100.0),
                             name="ott_lambertw_rule")


# =====================================================================================================
# distrax  distrax/_src/utils/math.py:82-109
#   tangent_out = y * power_no_nan(x, y - 1) * x_dot + primal_out * jnp.log(x) * y_dot
# "x ** y ... 1.0 when y is zero".  Domain: x > 0 (log(x) in the y-tangent), any y.
# =====================================================================================================
@jax.custom_jvp
def power_no_nan(x, y):
  """Computes `x ** y` and ensure that the result is 1.0 when `y` is zero."""
  dtype = jnp.result_type(x, y)
  return jnp.where(y == 0, jnp.ones((), dtype=dtype), jnp.power(x, y))


@power_no_nan.defjvp
def power_no_nan_jvp(primals, tangents):
  """Custom gradient computation for `power_no_nan`."""
  x, y = primals
  x_dot, y_dot = tangents
  primal_out = power_no_nan(x, y)
  tangent_out = (y * power_no_nan(x, y - 1) * x_dot
                 + primal_out * jnp.log(x) * y_dot)
  return primal_out, tangent_out


distrax_power_no_nan_rule = jax_rule(power_no_nan, arrays(shape=(4,), min_value=0.1, max_value=5.0),
                                     arrays(shape=(4,), min_value=-3.0, max_value=3.0),
                                     name="distrax_power_no_nan_rule")


# =====================================================================================================
# distrax  distrax/_src/distributions/von_mises.py:310-460  (nondiff_argnums=(2,): dtype)
#   return cdf, dconcentration * dcdf_dconcentration + dx * prob
#   prob = exp(k (cos x - 1)) / (2 pi i0e(k))
# von Mises CDF: 20-term series for k < 10.5, a corrected Normal approximation above.
# Substitution: distrax's normal.Normal(0, 1).cdf(xi) is jax.scipy.special.ndtr((xi - 0) / 1) (its code).
# Domain: x in [-pi, pi], concentration k > 0 (drawn in [0.05, 50]).
# =====================================================================================================
@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _von_mises_cdf(value, concentration, dtype):
  """Returns the cumulative density function (CDF) of von Mises distribution."""
  primals = (value, concentration)
  tangents = (jnp.zeros_like(value), jnp.zeros_like(concentration))
  primal_out, _ = _von_mises_cdf_jvp(dtype, primals, tangents)
  return primal_out


@_von_mises_cdf.defjvp
def _von_mises_cdf_jvp(dtype, primals, tangents):
  """Returns the jvp CDF of a von Mises."""
  x, concentration = primals
  dx, dconcentration = tangents
  num_periods = jnp.round(x / (2 * math.pi))
  x = x - (2 * math.pi) * num_periods

  concentration_cutoff = 10.5

  cdf_series, dcdf_dconcentration_series = _von_mises_cdf_series(
      x, concentration, dtype
  )
  cdf_normal, dcdf_dconcentration_normal = _von_mises_cdf_normal(
      x, concentration, dtype
  )
  use_series = concentration < concentration_cutoff
  cdf = jnp.where(use_series, cdf_series, cdf_normal)
  cdf = cdf + num_periods
  dcdf_dconcentration = jnp.where(
      use_series,
      dcdf_dconcentration_series,
      dcdf_dconcentration_normal,
  )

  prob = jnp.exp(concentration * (jnp.cos(x) - 1.)) / (
      (2. * math.pi) * jax.scipy.special.i0e(concentration)
  )

  return cdf, dconcentration * dcdf_dconcentration + dx * prob


def _von_mises_cdf_series(value, concentration, dtype, num_terms=20):
  """Computes the CDF based on a series of `num_terms` terms."""
  rn = jnp.zeros_like(value, dtype=dtype)
  drn_dconcentration = jnp.zeros_like(value, dtype=dtype)
  vn = jnp.zeros_like(value, dtype=dtype)
  dvn_dconcentration = jnp.zeros_like(value, dtype=dtype)

  for n in range(num_terms, 0, -1):
    denominator = 2. * n / concentration + rn
    ddenominator_dk = -2. * n / jnp.square(concentration) + drn_dconcentration
    rn = 1. / denominator
    drn_dconcentration = -ddenominator_dk / jnp.square(denominator)
    multiplier = jnp.sin(n * value) / n + vn
    vn = rn * multiplier
    dvn_dconcentration = (
        drn_dconcentration * multiplier + rn * dvn_dconcentration
    )
  cdf = .5 + value / (2. * math.pi) + vn / math.pi
  dcdf_dconcentration = dvn_dconcentration / math.pi
  cdf_clipped = jnp.clip(cdf, 0., 1.)
  dcdf_dconcentration = (
      dcdf_dconcentration * jnp.logical_and(cdf >= 0., cdf <= 1.)
  )
  return cdf_clipped, dcdf_dconcentration


def _von_mises_cdf_normal(value, concentration, dtype):
  """Computes the CDF, based on a Normal approximation to the von Mises."""
  def cdf_func(value, concentration):
    """A helper function that is passed to value_and_gradient."""
    z = (
        jnp.sqrt(2. / math.pi) /
        jax.scipy.special.i0e(concentration) * jnp.sin(.5 * value)
    )
    z2 = jnp.square(z)
    z3 = z2 * z
    z4 = jnp.square(z2)
    c = 24. * concentration
    c1 = 56.

    xi = z - z3 / jnp.square(
        (c - 2. * z2 - 16.) / 3. -
        (z4 + (7. / 4.) * z2 + 167. / 2.) / (c - c1 - z2 + 3.)
    )
    # distrax: normal.Normal(loc=0., scale=1.).cdf(xi) == jax.scipy.special.ndtr(xi)
    return jax.scipy.special.ndtr(xi)

  vectorized_cdf_with_grad = jnp.vectorize(
      jax.value_and_grad(cdf_func, argnums=1),
      signature='(),()->(),()',
  )
  return vectorized_cdf_with_grad(value, concentration)


distrax_von_mises_cdf_rule = jax_rule(_von_mises_cdf, arrays(shape=(3,), min_value=-math.pi, max_value=math.pi),
                                      arrays(shape=(3,), min_value=0.05, max_value=50.0), constant(jnp.float64),
                                      name="distrax_von_mises_cdf_rule")


# =====================================================================================================
# brax  brax/math.py:209-220
#   tangent_out = x_dot / jp.sqrt(1.0 - jp.clip(x, -1 + 1e-7, 1 - 1e-7) ** 2.0)
# "inverse sine, element-wise with safety clipping in grad".  Domain: |x| <= 1 - 1e-7 (clip inactive).
# =====================================================================================================
jp = jnp


@custom_jvp
def safe_arcsin(x):
  """Trigonometric inverse sine, element-wise with safety clipping in grad."""
  return jp.arcsin(x)


@safe_arcsin.defjvp
def _safe_arcsin_jvp(primal, tangent):
  (x,) = primal
  (x_dot,) = tangent
  primal_out = safe_arcsin(x)
  tangent_out = x_dot / jp.sqrt(1.0 - jp.clip(x, -1 + 1e-7, 1 - 1e-7) ** 2.0)
  return primal_out, tangent_out


brax_safe_arcsin_rule = jax_rule(safe_arcsin, arrays(shape=(4,), min_value=-1 + 1e-7, max_value=1 - 1e-7),
                                 name="brax_safe_arcsin_rule")


# =====================================================================================================
# e3nn-jax  e3nn_jax/_src/utils/einsum.py:8-17  (nondiff_argnums=(0,): the equation; *xs varargs)
#   sum(einsum(eq, *(xs[:i] + (x_dot,) + xs[i + 1 :])) for i, x_dot in enumerate(x_dots))
# Domain: any real operands.
# =====================================================================================================
@partial(jax.custom_jvp, nondiff_argnums=(0,))
def einsum(eq, *xs):
    return jnp.einsum(eq, *xs, optimize="optimal")


@einsum.defjvp
def einsum_jvp(eq: str, xs: Tuple[jax.Array], x_dots: Tuple[jax.Array]) -> jax.Array:
    return einsum(eq, *xs), sum(
        einsum(eq, *(xs[:i] + (x_dot,) + xs[i + 1 :])) for i, x_dot in enumerate(x_dots)
    )


e3nnjax_einsum_rule = jax_rule(einsum, constant("ij,jk,k->i"), arrays(shape=(2, 3)), arrays(shape=(3, 4)),
                               arrays(shape=(4,)), name="e3nnjax_einsum_rule")


# =====================================================================================================
# camp_zipnerf  camp_zipnerf/internal/math.py:25-27, 183-200, 223-228
#   y_dot = grad_fn(jnp.clip(x, *x_range), y, x_dot), grad_fn = 0.5 * x_dot / jnp.sqrt(jnp.maximum(tiny_val, x))
# sqrt of x clipped to [0, float32 max]. Domain: x > 0 at every scale float64 holds (the check's false GG501 at
# seed 1 came from an input of 6.4e-16 beside 7.8e29, INDEX.md); at 0 the clip makes a kink.
# =====================================================================================================
zipnerf_tiny_val = np.float32(np.finfo(np.float32).tiny)
zipnerf_max_val = np.float32(np.finfo(np.float32).max)


def generate_safe_fn(fn, grad_fn, x_range):
  """Generate's a `safe` fn() where inputs are clipped in fwd and bwd passes."""

  @jax.custom_jvp
  def safe_fn(x):
    """fn() with clipped inputs."""
    return fn(jnp.clip(x, *x_range))

  @safe_fn.defjvp
  def safe_fn_jvp(primals, tangents):
    """Backpropagate using the gradient and clipped inputs."""
    (x,) = primals
    (x_dot,) = tangents
    y = safe_fn(x)
    y_dot = grad_fn(jnp.clip(x, *x_range), y, x_dot)
    return y, y_dot

  return safe_fn


# upstream's safe_sqrt(x) builds this custom_jvp and calls it on x (a wrapper gin needs); jax_rule takes it itself
zipnerf_safe_sqrt = generate_safe_fn(
    jnp.sqrt,
    lambda x, _, x_dot: 0.5 * x_dot / jnp.sqrt(jnp.maximum(zipnerf_tiny_val, x)),
    (0, zipnerf_max_val),
)


zipnerf_safe_sqrt_rule = jax_rule(zipnerf_safe_sqrt, arrays(shape=(4,), min_value=1e-30, max_value=1e30),
                                  name="zipnerf_safe_sqrt_rule")


# =====================================================================================================
# efax  efax/_src/natural_parametrization.py:37-57, 70  (every distribution's log-normalizer)
#   (q,) = primals; (q_dot,) = tangents
#   y = q.log_normalizer(); p = q.to_exp()
#   y_dot = parameter_dot_product(q_dot, p)
# "The log-normalizer's special JVP vastly improves numerical stability": its derivative is the expectation
# parameters. parameter_dot_product (efax/_src/tools.py) pairs the natural and expectation parameters that are not
# fixed, summed over each one's support axes (none for a scalar support). efax's dataclasses are written as
# NamedTuples with the same leaves; a fixed parameter (the negative binomial's failure count, an integer) rides
# along in the natural parameters and gets no tangent.
# =====================================================================================================
def _efax_log_normalizer(log_normalizer, to_exp, variable):
    @jax.custom_jvp
    def ln(q):
        return log_normalizer(q)

    @ln.defjvp
    def _log_normalizer_jvp(primals, tangents):
        (q,) = primals
        (q_dot,) = tangents
        y = ln(q)
        p = to_exp(q)
        y_dot = sum(getattr(q_dot, name) * getattr(p, name_p) for name, name_p in variable)
        return y, y_dot

    return ln


# negative_binomial.py, negative_binomial_common.py: log_not_p = log(1 - p), failures r (fixed, an integer)
#   log_normalizer: -failures * log1p(-exp(log_not_p)); mean: failures / expm1(-log_not_p)
EfaxNegativeBinomialNP = namedtuple("EfaxNegativeBinomialNP", ["log_not_p", "failures"])
EfaxNegativeBinomialEP = namedtuple("EfaxNegativeBinomialEP", ["mean", "failures"])
efax_negative_binomial_log_normalizer = _efax_log_normalizer(
    lambda q: -q.failures * jnp.log1p(-jnp.exp(q.log_not_p)),
    lambda q: EfaxNegativeBinomialEP(q.failures / jnp.expm1(-q.log_not_p), q.failures),
    [("log_not_p", "mean")])
efax_negative_binomial_rule = jax_rule(
    efax_negative_binomial_log_normalizer,
    st.builds(EfaxNegativeBinomialNP, arrays(shape=(3,), min_value=-20.0, max_value=-0.01), st.just(np.array([1, 3, 7]))),
    name="efax_negative_binomial_rule")

# poisson.py: log_normalizer exp(log_mean); mean exp(log_mean)
EfaxPoissonNP = namedtuple("EfaxPoissonNP", ["log_mean"])
EfaxPoissonEP = namedtuple("EfaxPoissonEP", ["mean"])
efax_poisson_log_normalizer = _efax_log_normalizer(lambda q: jnp.exp(q.log_mean),
                                                   lambda q: EfaxPoissonEP(jnp.exp(q.log_mean)), [("log_mean", "mean")])
efax_poisson_rule = jax_rule(efax_poisson_log_normalizer,
                             st.builds(EfaxPoissonNP, arrays(shape=(3,), min_value=-5.0, max_value=5.0)),
                             name="efax_poisson_rule")


LABELS = {
    "efax_negative_binomial_rule": {"source": f"{EFAX} efax/_src/natural_parametrization.py:37-57, 70, "
                                              "efax/_src/distributions/negative_binomial.py"},
    "efax_poisson_rule": {"source": f"{EFAX} efax/_src/natural_parametrization.py:37-57, 70, "
                                    "efax/_src/distributions/poisson.py:47-54"},
    "jaxmd_safe_sqrt_rule": {"source": f"{JAXMD} jax_md/mm_forcefields/reaxff/reaxff_helper.py:18-28"},
    "jaxmd_safe_acos_rule": {"source": f"{JAXMD} jax_md/_nn/uma/common/rotation.py:21, 29-47"},
    "jaxmd_safe_atan2_rule": {"source": f"{JAXMD} jax_md/_nn/uma/common/rotation.py:51-66"},
    "jaxmd_quaternion_rotate_rule": {"source": f"{JAXMD} jax_md/rigid_body.py:74-75, 100-101, 104-164"},
    "numpyro_log1mexp_rule": {"source": f"{NUMPYRO} numpyro/distributions/util.py:457-485"},
    "optax_weighted_logsoftmax_rule": {"source": f"{OPTAX} optax/losses/_classification.py:166-210"},
    "optax_projection_unit_simplex_rule": {"source": f"{OPTAX} optax/projections/_projections.py:93-117"},
    "jaxopt_projection_sparse_simplex_rule": {"source": f"{JAXOPT} jaxopt/_src/projection.py:140-177"},
    "jaxopt_isotonic_l2_pav_rule": {"source": f"{JAXOPT} jaxopt/_src/isotonic.py:36-151"},
    "ott_norm_axis1_rule": {"source": f"{OTT} src/ott/math/utils.py:49-106"},
    "zipnerf_safe_sqrt_rule": {"source": f"{ZIPNERF} camp_zipnerf/internal/math.py:25-27, 183-200, 223-228"},
    "ott_logsumexp_b_rule": {"source": f"{OTT} src/ott/math/utils.py:132-186"},
    "ott_softmin_rule": {"source": f"{OTT} src/ott/math/utils.py:189-218"},
    "ott_lambertw_rule": {"source": f"{OTT} src/ott/math/utils.py:251-310"},
    "distrax_power_no_nan_rule": {"source": f"{DISTRAX} distrax/_src/utils/math.py:82-109"},
    "distrax_von_mises_cdf_rule": {"source": f"{DISTRAX} distrax/_src/distributions/von_mises.py:310-460"},
    "brax_safe_arcsin_rule": {"source": f"{BRAX} brax/math.py:209-220"},
    "e3nnjax_einsum_rule": {"source": f"{E3NNJAX} e3nn_jax/_src/utils/einsum.py:8-17"},
}

UPSTREAM_FLAWS = {
    "ott_norm_axis1_rule": (
        {"GG102"},
        "ott-jax's norm_jvp returns norm(ones) as the primal output where a row is all zero (to keep its "
        "tangent finite): jax.vjp and jax.value_and_grad give 1.732 where norm(zeros(3)) is 0",
    ),
    "ott_lambertw_rule": (
        {"GG204", "GG501"},
        "ott-jax's lambertw jvp guards z == 0 with a where whose other branch is NaN there: its second derivative "
        "at 0 is 0 under JAX (grad(grad(lambertw))(0.) is NaN), where W''(0) = -2 (mpmath); at the subnormal "
        "z = 5e-324 the guard misses (XLA flushes z, the where does not) and a program's gradient is NaN",
    ),
    "jaxopt_isotonic_l2_pav_rule": (
        {"GG207"},
        "jaxopt's isotonic-regression jvp merges blocks whose values lie within eps = 1e-8 of each other: at "
        "y = [1.4e-306, -1.2e-38, -2.2e-309, -2.00001, -3] an exact rational PAV gives one-sided derivatives 1.19 "
        "and -0.274 along the check's direction, the jvp 1.51452; at y = [2e-9, 0, -1, -2, -3] (no tie) its jvp "
        "along e0 is [0.5, 0.5, 0, 0, 0] where the derivative is [1, 0, 0, 0, 0]",
    ),
    "distrax_von_mises_cdf_rule": (
        {"GG201", "GG203", "GG207", "GG501"},
        "distrax's von Mises CDF is an approximation (a 20-term series below concentration 10.5, a corrected "
        "normal above) while its jvp returns the exact density: at x = -1.466885, k = 11.913149 the jvp gives "
        "3.1404504e-05 (scipy's vonmises.pdf: the same), but the CDF's own derivative is 3.1398327e-05 (its "
        "values are off by 7e-4 relative: 2.64465e-06 against scipy's 2.64639e-06), so programs differentiate "
        "another function than the one they compute. GG204 (seeds 16, 17): at x = -pi the series' unclipped CDF "
        "rounds to 0 or below, and its clip and the mask `cdf >= 0` zero the derivative of dcdf/dk in x: JAX's "
        "second order there is 0.0 where the pullback's own derivative is -0.0669 from both sides (k = 0.99999)",
        {2, 3, 5, 8, 9, 16, 17},  # the seeds where it showed (none of the default two; 16 and 17 beyond the pin)
    ),
}

"""TensorFlow's registered gradient functions, translated to NumPy/SciPy rrules.

Source: TensorFlow 2.21.0 (tensorflow/tensorflow; the tensorflow_cpu-2.21.0 wheel, tf.version.GIT_VERSION
v2.21.0-rc1-5-ga481b10260d),
files tensorflow/python/ops/math_grad.py, nn_grad.py, linalg_grad.py. The comment above each rule names the
gradient function and its lines. Each pullback is the gradient function written line by line in NumPy
(``op.outputs[0]`` is the forward value captured at call time; ``gen_*_ops`` kernels written out as their C++
kernels compute them: sqrt_grad(y, g) = g * 0.5 / y, rsqrt_grad(y, g) = -0.5 * g * y**3,
reciprocal_grad(y, g) = -g * y * y, tanh_grad(y, g) = g * (1 - y * y), relu6_grad(g, f) = g * (f > 0) * (f < 6),
elu_grad(g, y) = y < 0 ? g * (y + 1) : g, selu_grad(g, y) = y < 0 ? g * (y + scale * alpha) : g * scale,
leaky_relu_grad(g, x) = x > 0 ? g : alpha * g, softsign_grad(g, x) = g / (1 + |x|)**2; the
broadcasting reduction of ``_ReduceGradientArgs``/``broadcast_gradient_args`` as ``_reduce_to``).
Everything is float64. Specs are each op's real domain; where the TF code has a special case (zeros, ties,
x == 1) the spec draws it on purpose.

Each translation was checked against TensorFlow 2.21.0's own ``GradientTape`` on 5 inputs per rule (3 random ones,
and draws with the zeros and ties the specs aim at): values and gradients equal to 1e-12 relative, but at subnormal
inputs, which TensorFlow flushes to zero. ``igamma``'s derivative in a is ``jax.lax.igamma_grad_a`` (equal to
TensorFlow's kernel to 3e-15). ``LABELS`` maps each rule to its source; ``UPSTREAM_FLAWS`` lists the error findings
that are real flaws, with evidence. ``tf_softmax_cross_entropy_rrule`` drew a false error (GG502) until gradguard was
fixed (INDEX.md).

"""

import jax
import numpy as np
import scipy.linalg
import scipy.special as sc
from hypothesis import strategies as st

from gradguard import arrays, constant, rrule

jax.config.update("jax_enable_x64", True)


# ----- helpers ---------------------------------------------------------------------------------------------


def _reduce_to(g, shape):
    """``reshape(reduce_sum(g, broadcast_gradient_args(shape, g.shape)), shape)``."""
    g = np.asarray(g)
    shape = tuple(shape)
    lead = g.ndim - len(shape)
    padded = (1,) * lead + shape
    axes = tuple(i for i in range(g.ndim) if padded[i] == 1 and g.shape[i] != 1 or i < lead)
    if axes:
        g = np.sum(g, axis=axes, keepdims=True)
    return np.reshape(g, shape)


def _div_no_nan(x, y):
    x, y = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    out = np.zeros(x.shape)
    nz = y != 0
    out[nz] = x[nz] / y[nz]
    return out


def _mul_no_nan(x, y):
    x, y = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    out = np.zeros(x.shape)
    nz = y != 0
    out[nz] = x[nz] * y[nz]
    return out


def _xlogy(x, y):  # TF xlogy: 0 where x == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x == 0, 0.0, x * np.log(np.where(x == 0, 1.0, y)))


def _xlog1py(x, y):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x == 0, 0.0, x * np.log1p(np.where(x == 0, 0.0, y)))


def _xdivy(x, y):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x == 0, 0.0, x / np.where(x == 0, 1.0, y))


def _nonzero(lo, hi):
    return st.one_of(st.floats(lo, hi), st.floats(-hi, -lo))


def _with(values, lo, hi):
    return st.one_of(st.sampled_from(values), st.floats(lo, hi))


S = (2, 3)

# ----- math_grad.py: unary ---------------------------------------------------------------------------------


def tf_sqrt(x):
    return np.sqrt(x)


# math_grad.py:707-710 _SqrtGrad ``gen_math_ops.sqrt_grad(y, grad)``
@rrule(tf_sqrt, arrays(shape=S, min_value=1e-6, max_value=1e6))
def tf_sqrt_rrule(x):
    y = np.sqrt(x)
    return y, lambda g: (g * 0.5 / y,)


def tf_rsqrt(x):
    return 1.0 / np.sqrt(x)


# math_grad.py:722-726 _RsqrtGrad ``gen_math_ops.rsqrt_grad(y, grad)`` = -0.5 * grad * y^3
@rrule(tf_rsqrt, arrays(shape=S, min_value=1e-6, max_value=1e6))
def tf_rsqrt_rrule(x):
    y = tf_rsqrt(x)
    return y, lambda g: (-0.5 * g * (y * y * y),)


def tf_reciprocal(x):
    return 1.0 / x


# math_grad.py:670-674 _ReciprocalGrad ``gen_math_ops.reciprocal_grad(y, grad)`` = -grad * y * y
@rrule(tf_reciprocal, arrays(shape=S, elements=_nonzero(1e-3, 1e3)))
def tf_reciprocal_rrule(x):
    y = 1.0 / x
    return y, lambda g: (-g * y * y,)


def tf_expm1(x):
    return np.expm1(x)


# math_grad.py:751-758 _Expm1Grad ``grad * exp(x)``
@rrule(tf_expm1, arrays(shape=S, min_value=-50.0, max_value=50.0))
def tf_expm1_rrule(x):
    return np.expm1(x), lambda g: (g * np.exp(x),)


def tf_log1p(x):
    return np.log1p(x)


# math_grad.py:770-776 _Log1pGrad ``grad * reciprocal(1 + x)``
@rrule(tf_log1p, arrays(shape=S, min_value=-0.999, max_value=1e6))
def tf_log1p_rrule(x):
    return np.log1p(x), lambda g: (g * (1.0 / (1 + x)),)


def tf_tanh(x):
    return np.tanh(x)


# math_grad.py:848-854 _TanhGrad ``gen_math_ops.tanh_grad(y, grad)`` = grad * (1 - y * y)
@rrule(tf_tanh, arrays(shape=S, min_value=-20.0, max_value=20.0))
def tf_tanh_rrule(x):
    y = np.tanh(x)
    return y, lambda g: (g * (1 - y * y),)


def tf_asinh(x):
    return np.arcsinh(x)


# math_grad.py:857-863 _AsinhGrad ``grad / cosh(y)``
@rrule(tf_asinh, arrays(shape=S, min_value=-1e3, max_value=1e3))
def tf_asinh_rrule(x):
    y = np.arcsinh(x)
    return y, lambda g: (g / np.cosh(y),)


def tf_acosh(x):
    return np.arccosh(x)


# math_grad.py:866-872 _AcoshGrad ``grad / sinh(y)``
@rrule(tf_acosh, arrays(shape=S, min_value=1.001, max_value=1e3))
def tf_acosh_rrule(x):
    y = np.arccosh(x)
    return y, lambda g: (g / np.sinh(y),)


def tf_atanh(x):
    return np.arctanh(x)


# math_grad.py:875-884 _AtanhGrad ``grad * reciprocal(1 - square(x))``
@rrule(tf_atanh, arrays(shape=S, min_value=-0.999, max_value=0.999))
def tf_atanh_rrule(x):
    return np.arctanh(x), lambda g: (g * (1.0 / (1.0 - np.square(x))),)


def tf_asin(x):
    return np.arcsin(x)


# math_grad.py:1288-1298 _AsinGrad ``grad * reciprocal(sqrt(1 - square(x)))``
@rrule(tf_asin, arrays(shape=S, min_value=-0.999, max_value=0.999))
def tf_asin_rrule(x):
    return np.arcsin(x), lambda g: (g * (1.0 / np.sqrt(1.0 - np.square(x))),)


def tf_acos(x):
    return np.arccos(x)


# math_grad.py:1301-1311 _AcosGrad ``-grad * reciprocal(sqrt(1 - square(x)))``
@rrule(tf_acos, arrays(shape=S, min_value=-0.999, max_value=0.999))
def tf_acos_rrule(x):
    return np.arccos(x), lambda g: (-g * (1.0 / np.sqrt(1.0 - np.square(x))),)


def tf_tan(x):
    return np.tan(x)


# math_grad.py:1277-1285 _TanGrad ``square(reciprocal(cos(x))) * grad``
@rrule(tf_tan, arrays(shape=S, min_value=-1.5, max_value=1.5))
def tf_tan_rrule(x):
    return np.tan(x), lambda g: (np.square(1.0 / np.cos(x)) * g,)


def tf_erf(x):
    return sc.erf(x)


# math_grad.py:895-902 _ErfGrad ``grad * two_over_root_pi * exp(-square(x))``
@rrule(tf_erf, arrays(shape=S, min_value=-6.0, max_value=6.0))
def tf_erf_rrule(x):
    return sc.erf(x), lambda g: (g * (2 / np.sqrt(np.pi)) * np.exp(-np.square(x)),)


def tf_erfc(x):
    return sc.erfc(x)


# math_grad.py:905-913 _ErfcGrad ``grad * minus_two_over_root_pi * exp(-square(x))``
@rrule(tf_erfc, arrays(shape=S, min_value=-6.0, max_value=20.0))
def tf_erfc_rrule(x):
    return sc.erfc(x), lambda g: (g * (-2 / np.sqrt(np.pi)) * np.exp(-np.square(x)),)


def tf_erfinv(x):
    return sc.erfinv(x)


# math_grad.py:916-922 _ErfinvGrad ``grad * root_pi_over_two * exp(square(op.outputs[0]))``
@rrule(tf_erfinv, arrays(shape=S, min_value=-0.999, max_value=0.999))
def tf_erfinv_rrule(x):
    y = sc.erfinv(x)
    return y, lambda g: (g * (np.sqrt(np.pi) / 2) * np.exp(np.square(y)),)


def tf_ndtri(x):
    return sc.ndtri(x)


# math_grad.py:925-931 _NdtriGrad ``grad * root_two_pi * exp(square(op.outputs[0]) / 2.)``
@rrule(tf_ndtri, arrays(shape=S, min_value=1e-6, max_value=1 - 1e-6))
def tf_ndtri_rrule(x):
    y = sc.ndtri(x)
    return y, lambda g: (g * np.sqrt(2 * np.pi) * np.exp(np.square(y) / 2.0),)


def tf_lgamma(x):
    return sc.gammaln(x)


# math_grad.py:934-940 _LgammaGrad ``grad * digamma(x)``
@rrule(tf_lgamma, arrays(shape=S, min_value=0.01, max_value=100.0))
def tf_lgamma_rrule(x):
    return sc.gammaln(x), lambda g: (g * sc.digamma(x),)


def tf_digamma(x):
    return sc.digamma(x)


# math_grad.py:943-950 _DigammaGrad ``grad * polygamma(1, x)``
@rrule(tf_digamma, arrays(shape=S, min_value=0.05, max_value=50.0))
def tf_digamma_rrule(x):
    return sc.digamma(x), lambda g: (g * sc.polygamma(1, x),)


def tf_dawsn(x):
    return sc.dawsn(x)


# math_grad.py:953-959 _DawsnGrad ``grad * (1. - 2 * x * y)``
@rrule(tf_dawsn, arrays(shape=S, min_value=-10.0, max_value=10.0))
def tf_dawsn_rrule(x):
    y = sc.dawsn(x)
    return y, lambda g: (g * (1.0 - 2 * x * y),)


def tf_expint(x):
    return sc.expi(x)


# math_grad.py:962-967 _ExpintGrad ``grad * exp(x) / x``
@rrule(tf_expint, arrays(shape=S, elements=_nonzero(0.01, 50.0)))
def tf_expint_rrule(x):
    return sc.expi(x), lambda g: (g * np.exp(x) / x,)


def tf_fresnel_cos(x):
    return sc.fresnel(x)[1]


# math_grad.py:970-975 _FresnelCosGrad ``grad * cos((np.pi / 2.) * square(x))``
@rrule(tf_fresnel_cos, arrays(shape=S, min_value=-5.0, max_value=5.0))
def tf_fresnel_cos_rrule(x):
    return tf_fresnel_cos(x), lambda g: (g * np.cos((np.pi / 2.0) * np.square(x)),)


def tf_fresnel_sin(x):
    return sc.fresnel(x)[0]


# math_grad.py:978-983 _FresnelSinGrad ``grad * sin((np.pi / 2.) * square(x))``
@rrule(tf_fresnel_sin, arrays(shape=S, min_value=-5.0, max_value=5.0))
def tf_fresnel_sin_rrule(x):
    return tf_fresnel_sin(x), lambda g: (g * np.sin((np.pi / 2.0) * np.square(x)),)


def tf_spence(x):
    return sc.spence(x)


# math_grad.py:986-994 _SpenceGrad ``partial_x = log(x) / (1 - x); where(equal(x, 1.), -ones_like(x), partial_x)``
@rrule(tf_spence, arrays(shape=S, elements=_with([1.0], 0.01, 10.0)))
def tf_spence_rrule(x):
    def pullback(g):
        with np.errstate(divide="ignore", invalid="ignore"):
            partial_x = np.log(x) / (1 - x)
        partial_x = np.where(np.equal(x, 1.0), -np.ones_like(x), partial_x)
        return (g * partial_x,)

    return sc.spence(x), pullback


def tf_bessel_i0e(x):
    return sc.i0e(x)


# math_grad.py:1006-1013 _BesselI0eGrad ``grad * (bessel_i1e(x) - sign(x) * y)``
@rrule(tf_bessel_i0e, arrays(shape=S, min_value=-50.0, max_value=50.0))
def tf_bessel_i0e_rrule(x):
    y = sc.i0e(x)
    return y, lambda g: (g * (sc.i1e(x) - np.sign(x) * y),)


def tf_bessel_i1e(x):
    return sc.i1e(x)


# math_grad.py:1033-1048 _BesselI1eGrad ``where_v2(equal(x, 0.), 0.5, bessel_i0e(x) - y * (sign(x) + reciprocal(x)))``
@rrule(tf_bessel_i1e, arrays(shape=S, elements=_with([0.0], -50.0, 50.0)))
def tf_bessel_i1e_rrule(x):
    y = sc.i1e(x)

    def pullback(g):
        with np.errstate(divide="ignore", invalid="ignore"):
            main = sc.i0e(x) - y * (np.sign(x) + 1.0 / x)
        return (g * np.where(np.equal(x, 0.0), 0.5, main),)

    return y, pullback


def tf_bessel_i1(x):
    return sc.i1(x)


# math_grad.py:1016-1030 _BesselI1Grad ``where_v2(equal(x, 0.), 1., bessel_i0(x) - div(y, x))``
@rrule(tf_bessel_i1, arrays(shape=S, elements=_with([0.0], -20.0, 20.0)))
def tf_bessel_i1_rrule(x):
    y = sc.i1(x)

    def pullback(g):
        with np.errstate(divide="ignore", invalid="ignore"):
            main = sc.i0(x) - y / x
        return (g * np.where(np.equal(x, 0.0), 1.0, main),)

    return y, pullback


def tf_bessel_k0e(x):
    return sc.k0e(x)


# math_grad.py:1060-1067 _BesselK0eGrad ``grad * (y - bessel_k1e(x))``
@rrule(tf_bessel_k0e, arrays(shape=S, min_value=0.01, max_value=50.0))
def tf_bessel_k0e_rrule(x):
    y = sc.k0e(x)
    return y, lambda g: (g * (y - sc.k1e(x)),)


def tf_bessel_k1e(x):
    return sc.k1e(x)


# math_grad.py:1082-1092 _BesselK1eGrad ``grad * (y * (1. - reciprocal(x)) - bessel_k0e(x))``
@rrule(tf_bessel_k1e, arrays(shape=S, min_value=0.01, max_value=50.0))
def tf_bessel_k1e_rrule(x):
    y = sc.k1e(x)
    return y, lambda g: (g * (y * (1.0 - 1.0 / x) - sc.k0e(x)),)


def tf_bessel_j1(x):
    return sc.j1(x)


# math_grad.py:1104-1118 _BesselJ1Grad ``where_v2(equal(x, 0.), 0.5, bessel_j0(x) - div(y, x))``
@rrule(tf_bessel_j1, arrays(shape=S, elements=_with([0.0], -30.0, 30.0)))
def tf_bessel_j1_rrule(x):
    y = sc.j1(x)

    def pullback(g):
        with np.errstate(divide="ignore", invalid="ignore"):
            main = sc.j0(x) - y / x
        return (g * np.where(np.equal(x, 0.0), 0.5, main),)

    return y, pullback


def tf_bessel_y1(x):
    return sc.y1(x)


# math_grad.py:1130-1139 _BesselY1Grad ``grad * (bessel_y0(x) - div(y, x))``
@rrule(tf_bessel_y1, arrays(shape=S, min_value=0.1, max_value=30.0))
def tf_bessel_y1_rrule(x):
    y = sc.y1(x)
    return y, lambda g: (g * (sc.y0(x) - y / x),)


# ----- math_grad.py: binary --------------------------------------------------------------------------------


def tf_atan2(y, x):
    return np.arctan2(y, x)


# math_grad.py:1326-1337 _Atan2Grad ``grad_inv = grad / (square(y) + square(x)); gy = x * grad_inv;
# gx = -y * grad_inv; _ReduceGradientArgs(y, x, gy, gx)``; y (2, 3) and x (3,) broadcast
@rrule(tf_atan2, arrays(shape=S, min_value=-10.0, max_value=10.0), arrays(shape=(3,), min_value=-10.0, max_value=10.0))
def tf_atan2_rrule(y, x):
    def pullback(g):
        grad_inv = g / (np.square(y) + np.square(x))
        gy = x * grad_inv
        gx = -y * grad_inv
        return _reduce_to(gy, y.shape), _reduce_to(gx, x.shape)

    return np.arctan2(y, x), pullback


def tf_xlogy(x, y):
    return _xlogy(x, y)


# math_grad.py:779-793 _XLogyGrad ``not_zero_x = cast(not_equal(x, 0.)); partial_x = xlogy(not_zero_x, y);
# partial_y = xdivy(x, y)``, reduced over broadcast axes; x (2, 3) with zeros, y (3,)
@rrule(tf_xlogy, arrays(shape=S, elements=_with([0.0], -5.0, 5.0)), arrays(shape=(3,), min_value=0.01, max_value=10.0))
def tf_xlogy_rrule(x, y):
    def pullback(g):
        not_zero_x = np.not_equal(x, 0.0).astype(x.dtype)
        partial_x = _xlogy(not_zero_x, y)
        partial_y = _xdivy(x, y)
        return _reduce_to(partial_x * g, x.shape), _reduce_to(partial_y * g, y.shape)

    return _xlogy(x, y), pullback


def tf_xlog1py(x, y):
    return _xlog1py(x, y)


# math_grad.py:796-810 _XLog1pyGrad ``partial_x = xlog1py(not_zero_x, y); partial_y = xdivy(x, y + 1.)``
@rrule(tf_xlog1py, arrays(shape=S, elements=_with([0.0], -5.0, 5.0)), arrays(shape=S, min_value=-0.99, max_value=10.0))
def tf_xlog1py_rrule(x, y):
    def pullback(g):
        not_zero_x = np.not_equal(x, 0.0).astype(x.dtype)
        partial_x = _xlog1py(not_zero_x, y)
        partial_y = _xdivy(x, y + 1.0)
        return _reduce_to(partial_x * g, x.shape), _reduce_to(partial_y * g, y.shape)

    return _xlog1py(x, y), pullback


def tf_xdivy(x, y):
    return _xdivy(x, y)


# math_grad.py:813-827 _XDivyGrad ``partial_x = xdivy(not_zero_x, y); partial_y = xdivy(negative(x), y**2)``
@rrule(tf_xdivy, arrays(shape=S, elements=_with([0.0], -5.0, 5.0)), arrays(shape=S, elements=_nonzero(0.1, 10.0)))
def tf_xdivy_rrule(x, y):
    def pullback(g):
        not_zero_x = np.not_equal(x, 0.0).astype(x.dtype)
        partial_x = _xdivy(not_zero_x, y)
        partial_y = _xdivy(np.negative(x), y**2)
        return _reduce_to(partial_x * g, x.shape), _reduce_to(partial_y * g, y.shape)

    return _xdivy(x, y), pullback


def _igamma_grad_a(a, x):  # gen_math_ops.igamma_grad_a: XLA's IgammaGradA, the same series/continued fraction
    return np.asarray(jax.lax.igamma_grad_a(np.asarray(a, dtype=np.float64), np.asarray(x, dtype=np.float64)))


def tf_igamma(a, x):
    return sc.gammainc(a, x)


# math_grad.py:1142-1158 _IgammaGrad ``partial_a = igamma_grad_a(a, x); partial_x = exp(-x + (a - 1) * log(x) - lgamma(a))``
@rrule(tf_igamma, arrays(shape=S, min_value=0.5, max_value=10.0), arrays(shape=S, min_value=0.1, max_value=20.0))
def tf_igamma_rrule(a, x):
    def pullback(g):
        partial_a = _igamma_grad_a(a, x)
        partial_x = np.exp(-x + (a - 1) * np.log(x) - sc.gammaln(a))
        return _reduce_to(partial_a * g, a.shape), _reduce_to(partial_x * g, x.shape)

    return sc.gammainc(a, x), pullback


def tf_igammac(a, x):
    return sc.gammaincc(a, x)


# math_grad.py:1161-1165 _IgammacGrad ``(-igamma_grad_a, -igamma_grad_x)`` of _IgammaGrad
@rrule(tf_igammac, arrays(shape=S, min_value=0.5, max_value=10.0), arrays(shape=S, min_value=0.1, max_value=20.0))
def tf_igammac_rrule(a, x):
    def pullback(g):
        partial_a = _igamma_grad_a(a, x)
        partial_x = np.exp(-x + (a - 1) * np.log(x) - sc.gammaln(a))
        return -_reduce_to(partial_a * g, a.shape), -_reduce_to(partial_x * g, x.shape)

    return sc.gammaincc(a, x), pullback


def tf_betainc(a, b, x):
    return sc.betainc(a, b, x)


# math_grad.py:1168-1193 _BetaincGrad ``log_beta = lgamma(a) + lgamma(b) - lgamma(a + b);
# partial_x = exp(xlog1py(b - 1, -x) + xlogy(a - 1, x) - log_beta)``; (None, None, dx)
@rrule(tf_betainc, arrays(shape=S, min_value=0.5, max_value=5.0), arrays(shape=S, min_value=0.5, max_value=5.0),
       arrays(shape=S, min_value=0.01, max_value=0.99), nondiff=(0, 1))
def tf_betainc_rrule(a, b, x):
    def pullback(g):
        log_beta = sc.gammaln(a) + sc.gammaln(b) - sc.gammaln(a + b)
        partial_x = np.exp(_xlog1py(b - 1, -x) + _xlogy(a - 1, x) - log_beta)
        return None, None, _reduce_to(partial_x * g, x.shape)

    return sc.betainc(a, b, x), pullback


def tf_zeta(x, q):
    return sc.zeta(x, q)


# math_grad.py:1196-1212 _ZetaGrad ``partial_q = -x * zeta(x + 1, q)``; (None, dq)
@rrule(tf_zeta, arrays(shape=S, min_value=1.5, max_value=6.0), arrays(shape=S, min_value=0.5, max_value=5.0), nondiff=(0,))
def tf_zeta_rrule(x, q):
    def pullback(g):
        partial_q = -x * sc.zeta(x + 1, q)
        return None, _reduce_to(partial_q * g, q.shape)

    return sc.zeta(x, q), pullback


def tf_polygamma(n, x):
    return sc.polygamma(n.astype(int), x)


# math_grad.py:1215-1231 _PolygammaGrad ``partial_x = polygamma(n + 1, x)``; (None, dx)
@rrule(tf_polygamma, constant(np.array([[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]])), arrays(shape=S, min_value=0.1, max_value=20.0))
def tf_polygamma_rrule(n, x):
    def pullback(g):
        partial_x = sc.polygamma((n + 1).astype(int), x)
        return None, _reduce_to(partial_x * g, x.shape)

    return tf_polygamma(n, x), pullback


def tf_div_no_nan(x, y):
    return _div_no_nan(x, y)


# math_grad.py:1500-1507 _DivNoNanGrad ``gx = div_no_nan(grad, y); gy = grad * div_no_nan(div_no_nan(-x, y), y)``
@rrule(tf_div_no_nan, arrays(shape=S, min_value=-5.0, max_value=5.0), arrays(shape=(3,), elements=_with([0.0], 0.1, 5.0)))
def tf_div_no_nan_rrule(x, y):
    def pullback(g):
        gx = _div_no_nan(g, y)
        gy = g * _div_no_nan(_div_no_nan(-x, y), y)
        return _reduce_to(gx, x.shape), _reduce_to(gy, y.shape)

    return _div_no_nan(x, y), pullback


def tf_mul_no_nan(x, y):
    return _mul_no_nan(x, y)


# math_grad.py:1438-1451 _MulNoNanGrad ``gx = mul_no_nan(grad, y); gy = mul_no_nan(x, grad)``
@rrule(tf_mul_no_nan, arrays(shape=S, min_value=-5.0, max_value=5.0), arrays(shape=(3,), elements=_with([0.0], -5.0, 5.0)))
def tf_mul_no_nan_rrule(x, y):
    def pullback(g):
        gx = _mul_no_nan(g, y)
        gy = _mul_no_nan(x, g)
        return _reduce_to(gx, x.shape), _reduce_to(gy, y.shape)

    return _mul_no_nan(x, y), pullback


def tf_realdiv(x, y):
    return x / y


# math_grad.py:1488-1497 _RealDivGrad ``gx = realdiv(grad, y); gy = grad * realdiv(realdiv(-x, y), y)``
@rrule(tf_realdiv, arrays(shape=S, min_value=-5.0, max_value=5.0), arrays(shape=(1, 3), elements=_nonzero(0.1, 5.0)))
def tf_realdiv_rrule(x, y):
    def pullback(g):
        gx = g / y
        gy = g * ((-x / y) / y)
        return _reduce_to(gx, x.shape), _reduce_to(gy, y.shape)

    return x / y, pullback


def tf_pow(x, y):
    return np.power(x, y)


def _pow_pullback(x, y, z):
    def pullback(g):
        gx = g * y * np.power(x, y - 1)
        mask = x > 0
        safe_x = np.where(mask, x, np.ones_like(x))
        log_x = np.where(mask, np.log(safe_x), np.zeros_like(x))
        gy = g * z * log_x
        return _reduce_to(gx, x.shape), _reduce_to(gy, y.shape)

    return pullback


# math_grad.py:1510-1544 _PowGrad ``gx = grad * y * pow(x, y - 1); mask = x > 0; safe_x = where(mask, x, 1);
# log_x = where(mask, log(safe_x), 0); gy = grad * z * log_x``; x > 0, y of any sign, y (3,) broadcast
@rrule(tf_pow, arrays(shape=S, min_value=0.01, max_value=10.0), arrays(shape=(3,), min_value=-3.0, max_value=3.0))
def tf_pow_rrule(x, y):
    z = np.power(x, y)
    return z, _pow_pullback(x, y, z)


# the same rule where x reaches 0 (the mask's case), y >= 1
@rrule(tf_pow, arrays(shape=S, elements=_with([0.0], 0.0, 10.0)), arrays(shape=S, min_value=1.0, max_value=3.0),
       name="tf_pow_zero_base_rrule")
def tf_pow_zero_base_rrule(x, y):
    z = np.power(x, y)
    return z, _pow_pullback(x, y, z)


def tf_maximum(x, y):
    return np.maximum(x, y)


# math_grad.py:1557-1586 _MaximumMinimumGrad with greater_equal: ``xmask = x >= y; gx = where(xmask, grad, 0);
# gy = where(xmask, 0, grad)``, reduced; ties drawn on purpose
_TIE = [-1.0, 0.0, 1.5, 3.0]


@rrule(tf_maximum, arrays(shape=(3, 4), elements=_with(_TIE, -3.0, 3.0)), arrays(shape=(4,), elements=_with(_TIE, -3.0, 3.0)))
def tf_maximum_rrule(x, y):
    def pullback(g):
        xmask = np.greater_equal(x, y)
        gx = np.where(xmask, g, 0.0)
        gy = np.where(xmask, 0.0, g)
        return _reduce_to(gx, x.shape), _reduce_to(gy, y.shape)

    return np.maximum(x, y), pullback


def tf_minimum(x, y):
    return np.minimum(x, y)


# math_grad.py:1589-1592 _MinimumGrad: _MaximumMinimumGrad with less_equal
@rrule(tf_minimum, arrays(shape=(3, 4), elements=_with(_TIE, -3.0, 3.0)), arrays(shape=(4,), elements=_with(_TIE, -3.0, 3.0)))
def tf_minimum_rrule(x, y):
    def pullback(g):
        xmask = np.less_equal(x, y)
        gx = np.where(xmask, g, 0.0)
        gy = np.where(xmask, 0.0, g)
        return _reduce_to(gx, x.shape), _reduce_to(gy, y.shape)

    return np.minimum(x, y), pullback


def tf_squared_difference(x, y):
    return np.square(x - y)


# math_grad.py:1595-1621 _SquaredDifferenceGrad ``x_grad = scalar_mul(2.0, grad) * (x - y); gx = x_grad; gy = -x_grad``, reduced
@rrule(tf_squared_difference, arrays(shape=S, min_value=-10.0, max_value=10.0), arrays(shape=(3,), min_value=-10.0, max_value=10.0))
def tf_squared_difference_rrule(x, y):
    def pullback(g):
        x_grad = (2.0 * g) * (x - y)
        return _reduce_to(x_grad, x.shape), _reduce_to(-x_grad, y.shape)

    return np.square(x - y), pullback


# ----- math_grad.py: reductions and scans ------------------------------------------------------------------


def tf_euclidean_norm(x, axis=1):
    return np.sqrt(np.sum(np.square(x), axis=axis))


# math_grad.py:45-57 _EuclideanNormGrad ``truediv(op.inputs[0], output / grad)`` (output, grad reshaped to kept dims)
@rrule(tf_euclidean_norm, arrays(shape=(3, 4), min_value=-5.0, max_value=5.0))
def tf_euclidean_norm_rrule(x, axis=1):
    out = tf_euclidean_norm(x, axis)

    def pullback(g):
        output = np.expand_dims(out, axis)
        grad = np.expand_dims(g, axis)
        return (x / (output / grad),)

    return out, pullback


def _min_or_max_pullback(x, y, axis):
    def pullback(g):
        yk = np.expand_dims(y, axis)
        gk = np.expand_dims(g, axis)
        indicators = np.equal(yk, x).astype(g.dtype)
        num_selected = np.sum(indicators, axis=axis, keepdims=True)
        return (indicators / num_selected * gk,)

    return pullback


def tf_reduce_max(x, axis=1):
    return np.max(x, axis=axis)


# math_grad.py:232-256 _MinOrMaxGrad ``indicators = cast(equal(y, x)); num_selected = reduce_sum(indicators, axes);
# divide(indicators, num_selected) * grad``; ties drawn on purpose
@rrule(tf_reduce_max, arrays(shape=(3, 4), elements=_with(_TIE, -3.0, 3.0)))
def tf_reduce_max_rrule(x, axis=1):
    y = np.max(x, axis=axis)
    return y, _min_or_max_pullback(x, y, axis)


def tf_reduce_min(x, axis=0):
    return np.min(x, axis=axis)


# math_grad.py:259-261 _MinGrad = _MinOrMaxGrad
@rrule(tf_reduce_min, arrays(shape=(3, 4), elements=_with(_TIE, -3.0, 3.0)))
def tf_reduce_min_rrule(x, axis=0):
    y = np.min(x, axis=axis)
    return y, _min_or_max_pullback(x, y, axis)


def tf_reduce_mean(x, axis=(0, 2)):
    return np.mean(x, axis=axis)


# math_grad.py:264-282 _MeanGrad ``sum_grad = _SumGrad(op, grad)[0]; factor = input_size // max(output_size, 1);
# truediv(sum_grad, factor)``; _SumGrad: reshape to kept dims, tile
@rrule(tf_reduce_mean, arrays(shape=(2, 3, 4), min_value=-10.0, max_value=10.0))
def tf_reduce_mean_rrule(x, axis=(0, 2)):
    y = np.mean(x, axis=axis)

    def pullback(g):
        kept = tuple(1 if i in axis else n for i, n in enumerate(x.shape))
        sum_grad = np.broadcast_to(np.reshape(g, kept), x.shape)
        factor = np.prod(x.shape) // max(np.prod(y.shape), 1)
        return (sum_grad / float(factor),)

    return y, pullback


def tf_reduce_prod(x, axis=1):
    return np.prod(x, axis=axis)


# math_grad.py:285-331 _ProdGrad ``left = cumprod(reshaped, 0, exclusive=True); right = cumprod(reshaped, 0,
# exclusive=True, reverse=True); y = left * right; out = grad * y`` (reduced axes permuted first); zeros drawn on purpose
@rrule(tf_reduce_prod, arrays(shape=(3, 4), elements=_with([0.0], -3.0, 3.0)))
def tf_reduce_prod_rrule(x, axis=1):
    def pullback(g):
        grad = np.broadcast_to(np.expand_dims(g, axis), x.shape)
        reduced = [axis]
        other = [i for i in range(x.ndim) if i not in reduced]
        perm = reduced + other
        permuted = np.transpose(x, perm)
        reduced_num = int(np.prod([x.shape[i] for i in reduced]))
        other_num = int(np.prod([x.shape[i] for i in other]))
        reshaped = np.reshape(permuted, (reduced_num, other_num))
        left = _cumprod(reshaped, 0, exclusive=True, reverse=False)
        right = _cumprod(reshaped, 0, exclusive=True, reverse=True)
        y = np.reshape(left * right, permuted.shape)
        out = grad * np.transpose(y, np.argsort(perm))
        return (np.reshape(out, x.shape),)

    return np.prod(x, axis=axis), pullback


def _cumsum(x, axis, exclusive, reverse):
    x = np.asarray(x)
    if reverse:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis)
    if exclusive:
        out = out - x
    if reverse:
        out = np.flip(out, axis)
    return out


def _cumprod(x, axis, exclusive, reverse):
    x = np.asarray(x)
    if reverse:
        x = np.flip(x, axis)
    out = np.cumprod(x, axis=axis)
    if exclusive:  # shift: [1, x0, x0 x1, ...]
        ones = np.ones_like(np.take(x, [0], axis=axis))
        out = np.concatenate([ones, np.take(out, range(x.shape[axis] - 1), axis=axis)], axis=axis)
    if reverse:
        out = np.flip(out, axis)
    return out


def tf_cumsum_excl_rev(x, axis=1):
    return _cumsum(x, axis, exclusive=True, reverse=True)


# math_grad.py:1972-1980 _CumsumGrad ``cumsum(grad, axis, exclusive=exclusive, reverse=not reverse)``
@rrule(tf_cumsum_excl_rev, arrays(shape=(3, 4), min_value=-10.0, max_value=10.0))
def tf_cumsum_excl_rev_rrule(x, axis=1):
    return _cumsum(x, axis, True, True), lambda g: (_cumsum(g, axis, exclusive=True, reverse=False),)


def _cumprod_rule(x, axis, exclusive, reverse):
    prod = _cumprod(x, axis, exclusive, reverse)

    def pullback(g):
        out = _cumsum(prod * g, axis, exclusive=exclusive, reverse=not reverse)
        return (_div_no_nan(out, x),)

    return prod, pullback


def tf_cumprod(x, axis=1):
    return _cumprod(x, axis, False, False)


# math_grad.py:1983-1995 _CumprodGrad ``prod = cumprod(x, axis, exclusive, reverse);
# out = cumsum(prod * grad, axis, exclusive=exclusive, reverse=not reverse); div_no_nan(out, x)``; x nonzero
@rrule(tf_cumprod, arrays(shape=(3, 4), elements=_nonzero(0.1, 3.0)))
def tf_cumprod_rrule(x, axis=1):
    return _cumprod_rule(x, axis, False, False)


def tf_cumprod_excl_rev(x, axis=1):
    return _cumprod(x, axis, True, True)


# the same, exclusive=True, reverse=True
@rrule(tf_cumprod_excl_rev, arrays(shape=(3, 4), elements=_nonzero(0.1, 3.0)))
def tf_cumprod_excl_rev_rrule(x, axis=1):
    return _cumprod_rule(x, axis, True, True)


# ----- math_grad.py: segment reductions --------------------------------------------------------------------

_SEG = np.array([0, 0, 1, 2, 2])


def tf_segment_sum(data, ids):
    out = np.zeros((int(ids.max()) + 1,) + data.shape[1:])
    np.add.at(out, ids, data)
    return out


# math_grad.py:334-337 _SegmentSumGrad ``gather(grad, op.inputs[1])``
@rrule(tf_segment_sum, arrays(shape=(5, 3), min_value=-10.0, max_value=10.0), constant(_SEG))
def tf_segment_sum_rrule(data, ids):
    return tf_segment_sum(data, ids), lambda g: (g[ids], None)


def tf_segment_mean(data, ids):
    counts = np.bincount(ids).astype(float)
    return tf_segment_sum(data, ids) / counts[:, None]


# math_grad.py:340-351 _SegmentMeanGrad ``ones = fill(...); scaled_grad = divide(grad, segment_sum(ones, ids));
# gather(scaled_grad, ids)``
@rrule(tf_segment_mean, arrays(shape=(5, 3), min_value=-10.0, max_value=10.0), constant(_SEG))
def tf_segment_mean_rrule(data, ids):
    def pullback(g):
        ones = np.ones((ids.shape[0], 1), dtype=g.dtype)
        scaled_grad = g / tf_segment_sum(ones, ids)
        return scaled_grad[ids], None

    return tf_segment_mean(data, ids), pullback


def tf_segment_max(data, ids):
    out = np.full((int(ids.max()) + 1,) + data.shape[1:], -np.inf)
    np.maximum.at(out, ids, data)
    return out


# math_grad.py:455-467 _SegmentMinOrMaxGrad ``is_selected = equal(x, gather(y, ids)); num_selected =
# segment_sum(cast(is_selected), ids); gathered_grads = gather(divide(grad, num_selected), ids);
# where_v2(is_selected, gathered_grads, zeros)``; ties drawn on purpose
@rrule(tf_segment_max, arrays(shape=(5, 3), elements=_with(_TIE, -3.0, 3.0)), constant(_SEG))
def tf_segment_max_rrule(data, ids):
    y = tf_segment_max(data, ids)

    def pullback(g):
        zeros = np.zeros_like(data)
        is_selected = np.equal(data, y[ids])
        num_selected = tf_segment_sum(is_selected.astype(g.dtype), ids)
        weighted_grads = g / num_selected
        gathered_grads = weighted_grads[ids]
        return np.where(is_selected, gathered_grads, zeros), None

    return y, pullback


_USEG = np.array([0, 1, 0, 2, 1, 0, -1])


def tf_unsorted_segment_prod(data, ids, num_segments=3):
    out = np.ones((num_segments,) + data.shape[1:])
    for i, s in enumerate(ids):
        if s >= 0:
            out[s] = out[s] * data[i]
    return out


# math_grad.py:603-648 _UnsortedSegmentProdGrad: ``is_zero = equal(x, 0); num_zeros = unsorted_segment_sum(is_zero);
# grad = where(num_zeros > 1, 0, grad); non_zero_prod = unsorted_segment_prod(where(is_zero, 1, x));
# prod_divided_by_el = gather(y) / x; partial = where(is_zero, gather(non_zero_prod), prod_divided_by_el);
# _GatherDropNegatives(grad, ids) * partial``; zeros and a negative id drawn on purpose
@rrule(tf_unsorted_segment_prod, arrays(shape=(7, 2), elements=_with([0.0], -3.0, 3.0)), constant(_USEG))
def tf_unsorted_segment_prod_rrule(data, ids, num_segments=3):
    y = tf_unsorted_segment_prod(data, ids, num_segments)

    def pullback(g):
        is_zero = np.equal(data, 0)
        num_zeros = np.zeros((num_segments,) + data.shape[1:], dtype=np.int32)
        for i, s in enumerate(ids):
            if s >= 0:
                num_zeros[s] += is_zero[i]
        grad = np.where(num_zeros > 1, np.zeros_like(g), g)
        non_zero_data = np.where(is_zero, np.ones_like(data), data)
        non_zero_prod = tf_unsorted_segment_prod(non_zero_data, ids, num_segments)
        zero_clipped = np.maximum(ids, 0)
        gathered_prod = y[zero_clipped]
        gathered_non_zero_prod = non_zero_prod[zero_clipped]
        with np.errstate(divide="ignore", invalid="ignore"):
            prod_divided_by_el = gathered_prod / data
        partial_derivative = np.where(is_zero, gathered_non_zero_prod, prod_divided_by_el)
        gathered_grad = np.where((ids >= 0)[:, None], grad[zero_clipped], 0.0)
        return gathered_grad * partial_derivative, None

    return y, pullback


# ----- nn_grad.py ------------------------------------------------------------------------------------------


def _softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def _log_softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def tf_softmax(x):
    return _softmax(x)


# nn_grad.py:281-303 _SoftmaxGrad ``sum_channels = reduce_sum(grad_softmax * softmax, -1, keepdims=True);
# (grad_softmax - sum_channels) * softmax``
@rrule(tf_softmax, arrays(shape=(2, 4), min_value=-20.0, max_value=20.0))
def tf_softmax_rrule(x):
    softmax = _softmax(x)

    def pullback(g):
        sum_channels = np.sum(g * softmax, -1, keepdims=True)
        return ((g - sum_channels) * softmax,)

    return softmax, pullback


def tf_log_softmax(x):
    return _log_softmax(x)


# nn_grad.py:306-321 _LogSoftmaxGrad ``softmax = exp(op.outputs[0]); grad - reduce_sum(grad, -1, keepdims=True) * softmax``
@rrule(tf_log_softmax, arrays(shape=(2, 4), min_value=-20.0, max_value=20.0))
def tf_log_softmax_rrule(x):
    y = _log_softmax(x)

    def pullback(g):
        softmax = np.exp(y)
        return (g - np.sum(g, -1, keepdims=True) * softmax,)

    return y, pullback


def tf_elu(x):  # the kernel: features < 0 ? exp(features) - 1 : features
    return np.where(x < 0, np.exp(np.minimum(x, 0.0)) - 1, x)


# nn_grad.py:459-461 _EluGrad ``elu_grad(grad, op.outputs[0])`` = where(y < 0, grad * (y + 1), grad)
@rrule(tf_elu, arrays(shape=S, elements=_with([0.0], -10.0, 10.0)))
def tf_elu_rrule(x):
    y = tf_elu(x)
    return y, lambda g: (np.where(y < 0, g * (y + 1), g),)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def tf_selu(x):  # the kernel: features < 0 ? scale_alpha * (exp(features) - 1) : scale * features
    return np.where(x < 0, _SELU_SCALE * _SELU_ALPHA * (np.exp(np.minimum(x, 0.0)) - 1), _SELU_SCALE * x)


# nn_grad.py:464-466 _SeluGrad ``selu_grad(grad, op.outputs[0])`` = where(y < 0, grad * (y + scale * alpha), grad * scale)
@rrule(tf_selu, arrays(shape=S, min_value=-10.0, max_value=10.0))
def tf_selu_rrule(x):
    y = tf_selu(x)
    return y, lambda g: (np.where(y < 0, g * (y + _SELU_SCALE * _SELU_ALPHA), g * _SELU_SCALE),)


def tf_relu6(x):
    return np.minimum(np.maximum(x, 0.0), 6.0)


# nn_grad.py:433-435 _Relu6Grad ``relu6_grad(grad, op.outputs[0])`` = grad * (y > 0) * (y < 6); kinks drawn on purpose
@rrule(tf_relu6, arrays(shape=S, elements=_with([0.0, 6.0], -3.0, 9.0)))
def tf_relu6_rrule(x):
    y = tf_relu6(x)
    return y, lambda g: (g * ((y > 0) & (y < 6)),)


_ALPHA = float(np.float32(0.2))  # the op's ``alpha`` attribute is a 32-bit float


def tf_leaky_relu(x, alpha=_ALPHA):
    return np.where(x > 0, x, alpha * x)


# nn_grad.py:444-448 _LeakyReluGrad ``leaky_relu_grad(grad, x, alpha)`` = where(x > 0, grad, alpha * grad)
@rrule(tf_leaky_relu, arrays(shape=S, elements=_with([0.0], -5.0, 5.0)))
def tf_leaky_relu_rrule(x, alpha=_ALPHA):
    return tf_leaky_relu(x, alpha), lambda g: (np.where(x > 0, g, alpha * g),)


def tf_softplus(x):
    return np.logaddexp(0.0, x)


# nn_grad.py:469-471 _SoftplusGrad ``grad * sigmoid(op.inputs[0])``
@rrule(tf_softplus, arrays(shape=S, min_value=-30.0, max_value=30.0))
def tf_softplus_rrule(x):
    return tf_softplus(x), lambda g: (g * sc.expit(x),)


def tf_softsign(x):
    return x / (1 + np.abs(x))


# nn_grad.py:487-489 _SoftsignGrad ``softsign_grad(grad, x)`` = grad / (1 + |x|)^2
@rrule(tf_softsign, arrays(shape=S, min_value=-100.0, max_value=100.0))
def tf_softsign_rrule(x):
    return tf_softsign(x), lambda g: (g / np.square(1 + np.abs(x)),)


def tf_softmax_cross_entropy(logits, labels):
    return np.sum(-labels * _log_softmax(logits), axis=-1)


# nn_grad.py:513-535 _SoftmaxCrossEntropyWithLogitsGrad for the public loss (grad_grad is absent):
# ``grad = _BroadcastMul(grad_loss, softmax_grad)`` with softmax_grad = op.outputs[1] = softmax(logits) - labels;
# ``_BroadcastMul(grad_loss, -log_softmax(logits))`` for labels
# labels: each row a probability distribution, as the op requires (its backprop output is softmax - labels)
_prob_rows = arrays(shape=(2, 4), min_value=0.01, max_value=1.0).map(lambda p: p / np.sum(p, axis=-1, keepdims=True))


@rrule(tf_softmax_cross_entropy, arrays(shape=(2, 4), min_value=-10.0, max_value=10.0), _prob_rows)
def tf_softmax_cross_entropy_rrule(logits, labels):
    softmax_grad = _softmax(logits) - labels

    def pullback(g):
        return np.expand_dims(g, -1) * softmax_grad, np.expand_dims(g, -1) * -_log_softmax(logits)

    return tf_softmax_cross_entropy(logits, labels), pullback


def tf_l2_loss(x):
    return np.sum(np.square(x)) / 2


# nn_grad.py:952-963 _L2LossGrad ``op.inputs[0] * grad``
@rrule(tf_l2_loss, arrays(shape=S, min_value=-10.0, max_value=10.0))
def tf_l2_loss_rrule(x):
    return tf_l2_loss(x), lambda g: (x * g,)


def _top_k(x, k):
    idx = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, idx, -1), idx


def tf_top_k(x, k=2):
    return _top_k(x, k)[0]


# nn_grad.py:966-1010 _TopKGrad: ``ind = ind_2d + range(0, outerdim * in_lastdim, in_lastdim)[:, None];
# scatter_nd(ind, reshape(grad, [-1]), [prod(in_shape)])`` reshaped to in_shape (values output)
@rrule(tf_top_k, arrays(shape=(3, 5), min_value=-10.0, max_value=10.0))
def tf_top_k_rrule(x, k=2):
    values, indices = _top_k(x, k)

    def pullback(g):
        in_lastdim = x.shape[-1]
        ind_2d = np.reshape(indices, (-1, indices.shape[-1]))
        outerdim = ind_2d.shape[0]
        ind = np.reshape(ind_2d + np.arange(0, outerdim * in_lastdim, in_lastdim)[:, None], [-1])
        flat = np.zeros(x.size)
        np.add.at(flat, ind, np.reshape(g, [-1]))
        return (np.reshape(flat, x.shape),)

    return values, pullback


def tf_nth_element(x, n=1):
    return np.sort(x, axis=-1)[..., n]


# nn_grad.py:1054-1078 _NthElementGrad ``indicators = cast(equal(expand_dims(output, -1), input));
# num_selected = expand_dims(reduce_sum(indicators, -1), -1); divide(indicators, num_selected) * expand_dims(grad, -1)``
@rrule(tf_nth_element, arrays(shape=(3, 5), elements=_with(_TIE, -3.0, 3.0)))
def tf_nth_element_rrule(x, n=1):
    out = tf_nth_element(x, n)

    def pullback(g):
        indicators = np.equal(np.expand_dims(out, -1), x).astype(g.dtype)
        grad = np.expand_dims(g, -1)
        num_selected = np.expand_dims(np.sum(indicators, -1), -1)
        return (indicators / num_selected * grad,)

    return out, pullback


# ----- linalg_grad.py --------------------------------------------------------------------------------------


def _adj(a):
    return np.swapaxes(a, -1, -2).conj()


_wellcond = arrays(shape=(2, 3, 3), min_value=-1.0, max_value=1.0).map(lambda a: a + 4.0 * np.eye(3))


def tf_matrix_inverse(a):
    return np.linalg.inv(a)


# linalg_grad.py:47-56 _MatrixInverseGrad (adjoint=False) ``-matmul(ainv, matmul(grad, ainv, adjoint_b=True), adjoint_a=True)``
@rrule(tf_matrix_inverse, _wellcond)
def tf_matrix_inverse_rrule(a):
    ainv = np.linalg.inv(a)
    return ainv, lambda g: (-(_adj(ainv) @ (g @ _adj(ainv))),)


def tf_matrix_determinant(a):
    return np.linalg.det(a)


# linalg_grad.py:375-384 _MatrixDeterminantGrad ``a_adj_inv = matrix_inverse(a, adjoint=True);
# multipliers = reshape(grad * c, shape(c) + [1, 1]); multipliers * a_adj_inv``
@rrule(tf_matrix_determinant, arrays(shape=(2, 3, 3), min_value=-2.0, max_value=2.0).map(lambda a: a + 2.0 * np.eye(3)))
def tf_matrix_determinant_rrule(a):
    c = np.linalg.det(a)

    def pullback(g):
        a_adj_inv = np.linalg.inv(_adj(a))
        multipliers = np.reshape(g * c, c.shape + (1, 1))
        return (multipliers * a_adj_inv,)

    return c, pullback


def tf_log_matrix_determinant(a):
    sign, logabs = np.linalg.slogdet(a)
    return (sign, logabs)


# linalg_grad.py:452-460 _LogMatrixDeterminantGrad(op, _, grad_b) ``multipliers = reshape(grad_b, shape(c) + [1, 1]);
# multipliers * matrix_inverse(a, adjoint=True)``; general (not only positive definite) matrices
@rrule(tf_log_matrix_determinant, arrays(shape=(2, 3, 3), min_value=-2.0, max_value=2.0).map(lambda a: a + 1.5 * np.eye(3)))
def tf_log_matrix_determinant_rrule(a):
    sign, logabs = np.linalg.slogdet(a)

    def pullback(dy):
        _, grad_b = dy
        a_adj_inv = np.linalg.inv(_adj(a))
        multipliers = np.reshape(grad_b, logabs.shape + (1, 1))
        return (multipliers * a_adj_inv,)

    return (sign, logabs), pullback


def tf_matrix_solve(a, b):
    return np.linalg.solve(a, b)


# linalg_grad.py:557-568 _MatrixSolveGrad (adjoint=False) ``grad_b = matrix_solve(a, grad, adjoint=True);
# grad_a = -matmul(grad_b, c, adjoint_b=True)``
@rrule(tf_matrix_solve, arrays(shape=(3, 3), min_value=-1.0, max_value=1.0).map(lambda a: a + 4.0 * np.eye(3)),
       arrays(shape=(3, 2), min_value=-5.0, max_value=5.0))
def tf_matrix_solve_rrule(a, b):
    c = np.linalg.solve(a, b)

    def pullback(g):
        grad_b = np.linalg.solve(_adj(a), g)
        grad_a = -(grad_b @ _adj(c))
        return grad_a, grad_b

    return c, pullback


def tf_matrix_triangular_solve(a, b):
    return scipy.linalg.solve_triangular(a, b, lower=True)


# linalg_grad.py:684-714 _MatrixTriangularSolveGrad (lower=True, adjoint=False) ``grad_b = matrix_triangular_solve(a, grad,
# lower=True, adjoint=True); grad_a = -matmul(grad_b, c, adjoint_b=True); grad_a = matrix_band_part(grad_a, -1, 0)``
@rrule(tf_matrix_triangular_solve, arrays(shape=(3, 3), min_value=1.0, max_value=2.0, structure="lower"),
       arrays(shape=(3, 2), min_value=-5.0, max_value=5.0))
def tf_matrix_triangular_solve_rrule(a, b):
    c = scipy.linalg.solve_triangular(a, b, lower=True)

    def pullback(g):
        grad_b = scipy.linalg.solve_triangular(a, g, lower=True, trans="C")
        grad_a = -(grad_b @ _adj(c))
        grad_a = np.tril(grad_a)
        return grad_a, grad_b

    return c, pullback


def tf_cholesky(a):
    return np.linalg.cholesky(a)


def _tri_inv_lower(l):
    return scipy.linalg.solve_triangular(l, np.eye(l.shape[-1]), lower=True)


# linalg_grad.py:463-486 _CholeskyGrad ``l_inverse = matrix_triangular_solve(l, eye); middle = matmul(l, grad, adjoint_a=True);
# middle = matrix_set_diag(middle, 0.5 * diag_part(middle)); middle = band_part(middle, -1, 0);
# grad_a = matmul(matmul(l_inverse, middle, adjoint_a=True), l_inverse); grad_a += adjoint(grad_a); grad_a * 0.5``
@rrule(tf_cholesky, arrays(shape=(3, 3), structure="psd"))
def tf_cholesky_rrule(a):
    l = np.linalg.cholesky(a)

    def pullback(g):
        l_inverse = _tri_inv_lower(l)
        middle = _adj(l) @ g
        middle = middle - np.diag(np.diag(middle)) + np.diag(0.5 * np.diag(middle))
        middle = np.tril(middle)
        grad_a = (_adj(l_inverse) @ middle) @ l_inverse
        grad_a = grad_a + _adj(grad_a)
        return (grad_a * 0.5,)

    return l, pullback


def _safe_reciprocal(x, epsilon=1e-20):
    return x * (1.0 / (x * x + epsilon))


def tf_self_adjoint_eig(a):
    e, v = np.linalg.eigh(a, UPLO="L")
    return (e, v)


def _eig_sym_lower(grad_a):
    grad_a = np.tril(grad_a + _adj(grad_a))
    return grad_a - np.diag(np.diag(grad_a)) + np.diag(0.5 * np.diag(grad_a))


# linalg_grad.py:776-815 _SelfAdjointEigV2Grad (compute_v=True) ``f = matrix_set_diag(_SafeReciprocal(e[None, :] - e[:, None]), 0);
# grad_a = v @ ((diag(grad_e) + f * (v^H @ grad_v)) @ v^H); grad_a = band_part(grad_a + adjoint(grad_a), -1, 0);
# matrix_set_diag(grad_a, 0.5 * diag_part(grad_a))``
@rrule(tf_self_adjoint_eig, arrays(shape=(3, 3), min_value=-3.0, max_value=3.0, structure="symmetric"))
def tf_self_adjoint_eig_rrule(a):
    e, v = np.linalg.eigh(a, UPLO="L")

    def pullback(dy):
        grad_e, grad_v = dy
        f = _safe_reciprocal(np.expand_dims(e, -2) - np.expand_dims(e, -1))
        np.fill_diagonal(f, 0.0)
        grad_a = v @ ((np.diag(grad_e) + f * (_adj(v) @ grad_v)) @ _adj(v))
        return (_eig_sym_lower(grad_a),)

    return (e, v), pullback


def tf_self_adjoint_eigvals(a):
    return np.linalg.eigvalsh(a, UPLO="L")


# linalg_grad.py:776-815 _SelfAdjointEigV2Grad (compute_v=False) ``_, v = self_adjoint_eig(a);
# grad_a = v @ (diag(grad_e) @ v^H)``, then the same lower-triangle form
@rrule(tf_self_adjoint_eigvals, arrays(shape=(3, 3), min_value=-3.0, max_value=3.0, structure="symmetric"))
def tf_self_adjoint_eigvals_rrule(a):
    e = np.linalg.eigvalsh(a, UPLO="L")

    def pullback(grad_e):
        _, v = np.linalg.eigh(a, UPLO="L")
        grad_a = v @ (np.diag(grad_e) @ _adj(v))
        return (_eig_sym_lower(grad_a),)

    return e, pullback


def tf_svd(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return (s, u, _adj(vh))  # tf.linalg.svd returns (s, u, v)


def _svd_grad(a, s, u, v, grad_s, grad_u, grad_v, full_matrices=False):
    m, n = a.shape[-2], a.shape[-1]
    grad_s_mat = np.diag(grad_s)
    use_adjoint = False
    if m > n:
        use_adjoint = True
        m, n = n, m
        u, v = v, u
        grad_u, grad_v = grad_v, grad_u
    s_mat = np.diag(s)
    s2 = np.square(s)
    f = _safe_reciprocal(np.expand_dims(s2, -2) - np.expand_dims(s2, -1))
    np.fill_diagonal(f, 0.0)
    s_inv_mat = np.diag(_safe_reciprocal(s))
    v1 = v[..., :, :m]
    grad_v1 = grad_v[..., :, :m]
    u_gu = _adj(u) @ grad_u
    v_gv = _adj(v1) @ grad_v1
    f_u = f * u_gu
    f_v = f * v_gv
    term1_nouv = grad_s_mat + (f_u + _adj(f_u)) @ s_mat + s_mat @ (f_v + _adj(f_v))
    term1 = u @ (term1_nouv @ _adj(v1))
    if m == n:
        grad_a_before_transpose = term1
    else:
        gv1t = _adj(grad_v1)
        gv1t_v1 = gv1t @ v1
        term2_nous = gv1t - gv1t_v1 @ _adj(v1)
        u_s_inv = u @ s_inv_mat
        term2 = u_s_inv @ term2_nous
        grad_a_before_transpose = term1 + term2
    if use_adjoint:
        return _adj(grad_a_before_transpose)
    return grad_a_before_transpose


def _svd_rule(a):
    s, u, v = tf_svd(a)

    def pullback(dy):
        grad_s, grad_u, grad_v = dy
        return (_svd_grad(a, s, u, v, grad_s, grad_u, grad_v),)

    return (s, u, v), pullback


# linalg_grad.py:818-947 _SvdGrad (compute_uv=True, full_matrices=False), 4x3 (m > n: the use_adjoint path):
# ``f = set_diag(_SafeReciprocal(s2[None, :] - s2[:, None]), 0); term1_nouv = grad_s_mat + (f_u + f_u^H) s_mat + s_mat (f_v + f_v^H);
# term1 = u term1_nouv v1^H; term2 = u s_inv (gv1t - gv1t v1 v1^H)``; distinct, nonzero singular values
_tall43 = arrays(shape=(4, 3), min_value=-1.0, max_value=1.0).map(lambda a: a + np.vstack([np.diag([6.0, 4.0, 2.0]), np.zeros((1, 3))]))
_wide34 = arrays(shape=(3, 4), min_value=-1.0, max_value=1.0).map(lambda a: a + np.hstack([np.diag([6.0, 4.0, 2.0]), np.zeros((3, 1))]))
_sq33 = arrays(shape=(3, 3), min_value=-1.0, max_value=1.0).map(lambda a: a + np.diag([6.0, 4.0, 2.0]))


@rrule(tf_svd, _tall43, name="tf_svd_tall_rrule")
def tf_svd_tall_rrule(a):
    return _svd_rule(a)


# the same, 3x4 (m < n: term2 without the adjoint)
@rrule(tf_svd, _wide34, name="tf_svd_wide_rrule")
def tf_svd_wide_rrule(a):
    return _svd_rule(a)


# the same, 3x3 (m == n: term1 only)
@rrule(tf_svd, _sq33, name="tf_svd_square_rrule")
def tf_svd_square_rrule(a):
    return _svd_rule(a)


def tf_svdvals(a):
    return np.linalg.svd(a, compute_uv=False)


# linalg_grad.py:818-840 _SvdGrad (compute_uv=False) ``s, u, v = svd(a, compute_uv=True); grad_a = u @ (grad_s_mat @ v^H)``
@rrule(tf_svdvals, _tall43)
def tf_svdvals_rrule(a):
    s = np.linalg.svd(a, compute_uv=False)

    def pullback(grad_s):
        u, _, vh = np.linalg.svd(a, full_matrices=False)
        return (u @ (np.diag(grad_s) @ vh),)

    return s, pullback


def tf_qr(a):
    q, r = np.linalg.qr(a, mode="reduced")
    return (q, r)


def _tri_solve_right(x, r):
    """``_TriangularSolve``: adjoint(matrix_triangular_solve(r, adjoint(x), lower=False, adjoint=False))."""
    return _adj(scipy.linalg.solve_triangular(r, _adj(x), lower=False))


def _qr_square_deep(q, r, dq, dr):
    qdq = _adj(q) @ dq
    qdq_ = qdq - _adj(qdq)
    rdr = r @ _adj(dr)
    rdr_ = rdr - _adj(rdr)
    tril = np.tril(qdq_ + rdr_)
    grad_a = q @ (dr + _tri_solve_right(tril, r))
    grad_b = _tri_solve_right(dq - q @ qdq, r)
    return grad_a + grad_b


# linalg_grad.py:489-554 _QrGrad (full_matrices=False), 4x3 (num_rows >= num_cols): ``qdq = q^H dq; qdq_ = qdq - qdq^H;
# rdr = r dr^H; rdr_ = rdr - rdr^H; tril = band_part(qdq_ + rdr_, -1, 0); grad_a = q (dr + _TriangularSolve(tril, r));
# grad_b = _TriangularSolve(dq - q qdq, r)``
@rrule(tf_qr, _tall43, name="tf_qr_deep_rrule")
def tf_qr_deep_rrule(a):
    q, r = tf_qr(a)

    def pullback(dy):
        dq, dr = dy
        return (_qr_square_deep(q, r, dq, dr),)

    return (q, r), pullback


# the same, 3x4 (num_rows < num_cols): ``y = a[:, m:]; u = r[:, :m]; dv = dr[:, m:]; du = dr[:, :m]; dy = q dv;
# dx = _QrGradSquareAndDeepMatrices(q, u, dq + y dv^H, du); concat([dx, dy], -1)``
@rrule(tf_qr, _wide34, name="tf_qr_wide_rrule")
def tf_qr_wide_rrule(a):
    q, r = tf_qr(a)

    def pullback(dyy):
        dq, dr = dyy
        num_rows = q.shape[-2]
        y = a[..., :, num_rows:]
        u = r[..., :, :num_rows]
        dv = dr[..., :, num_rows:]
        du = dr[..., :, :num_rows]
        dy = q @ dv
        dx = _qr_square_deep(q, u, dq + y @ _adj(dv), du)
        return (np.concatenate([dx, dy], axis=-1),)

    return (q, r), pullback


# ----- math_grad.py: cumulative logsumexp ------------------------------------------------------------------


def _cumulative_logsumexp(x, axis, exclusive, reverse):
    x = np.asarray(x, dtype=float)
    if reverse:
        x = np.flip(x, axis)
    out = np.logaddexp.accumulate(x, axis=axis)
    if exclusive:  # the kernel's identity: the dtype's lowest value
        first = np.full_like(np.take(x, [0], axis=axis), np.finfo(x.dtype).min)
        out = np.concatenate([first, np.take(out, range(x.shape[axis] - 1), axis=axis)], axis=axis)
    if reverse:
        out = np.flip(out, axis)
    return out


def tf_cumulative_logsumexp(x, axis=1):
    return _cumulative_logsumexp(x, axis, False, False)


def _cumlse_pullback(x, y, axis, exclusive, reverse):
    def pullback(g):
        lowest = np.finfo(g.dtype).min
        with np.errstate(divide="ignore", invalid="ignore"):
            log_grad_positive = np.where(np.greater(g, 0), np.log(g), lowest)
            log_grad_negative = np.where(np.less(g, 0), np.log(-g), lowest)
        output_pos = np.exp(_cumulative_logsumexp(log_grad_positive - y, axis, exclusive, not reverse) + x)
        output_neg = np.exp(_cumulative_logsumexp(log_grad_negative - y, axis, exclusive, not reverse) + x)
        return (output_pos - output_neg,)

    return pullback


# math_grad.py:1998-2029 _CumulativeLogsumexpGrad ``log_grad_positive = where(grad > 0, log(grad), dtype.min);
# log_grad_negative = where(grad < 0, log(-grad), dtype.min); output_pos = exp(cumulative_logsumexp(log_grad_positive -
# cumulative_logsumexp, reverse=not reverse, exclusive) + x); output_neg likewise; output_pos - output_neg``
@rrule(tf_cumulative_logsumexp, arrays(shape=(3, 4), min_value=-20.0, max_value=20.0))
def tf_cumulative_logsumexp_rrule(x, axis=1):
    y = tf_cumulative_logsumexp(x, axis)
    return y, _cumlse_pullback(x, y, axis, False, False)


def tf_cumulative_logsumexp_rev(x, axis=1):
    return _cumulative_logsumexp(x, axis, False, True)


# the same, reverse=True
@rrule(tf_cumulative_logsumexp_rev, arrays(shape=(3, 4), min_value=-20.0, max_value=20.0))
def tf_cumulative_logsumexp_rev_rrule(x, axis=1):
    y = tf_cumulative_logsumexp_rev(x, axis)
    return y, _cumlse_pullback(x, y, axis, False, True)


# ----- math_grad.py: complex inputs (TF's convention is the adjoint one: grad * conj(f'(z))) ------------------

C = dict(shape=S, dtype="complex128", min_value=-3.0, max_value=3.0)


def tf_complex_square(z):
    return np.square(z)


# math_grad.py:697-704 _SquareGrad ``multiply(grad, multiply(conj(x), 2.0))``
@rrule(tf_complex_square, arrays(**C))
def tf_complex_square_rrule(z):
    return np.square(z), lambda g: (g * (np.conj(z) * 2.0),)


def tf_complex_exp(z):
    return np.exp(z)


# math_grad.py:742-748 _ExpGrad ``grad * conj(y)``
@rrule(tf_complex_exp, arrays(**C))
def tf_complex_exp_rrule(z):
    y = np.exp(z)
    return y, lambda g: (g * np.conj(y),)


def tf_complex_log(z):
    return np.log(z)


# math_grad.py:761-767 _LogGrad ``grad * reciprocal(conj(x))``; away from the branch cut (Re z > 0)
@rrule(tf_complex_log, arrays(shape=S, dtype="complex128", min_value=0.1, max_value=3.0))
def tf_complex_log_rrule(z):
    return np.log(z), lambda g: (g * (1.0 / np.conj(z)),)


def tf_complex_sqrt(z):
    return np.sqrt(z)


# math_grad.py:707-710 _SqrtGrad ``sqrt_grad(y, grad)`` = grad * 0.5 / conj(y) for complex; Re z > 0
@rrule(tf_complex_sqrt, arrays(shape=S, dtype="complex128", min_value=0.1, max_value=3.0))
def tf_complex_sqrt_rrule(z):
    y = np.sqrt(z)
    return y, lambda g: (g * 0.5 / np.conj(y),)


def tf_complex_reciprocal(z):
    return 1.0 / z


# math_grad.py:670-674 _ReciprocalGrad ``reciprocal_grad(y, grad)`` = -grad * conj(y * y) for complex
@rrule(tf_complex_reciprocal, arrays(shape=S, dtype="complex128", min_value=0.1, max_value=3.0))
def tf_complex_reciprocal_rrule(z):
    y = 1.0 / z
    return y, lambda g: (-g * np.conj(y * y),)


def tf_complex_tanh(z):
    return np.tanh(z)


# math_grad.py:848-854 _TanhGrad ``tanh_grad(conj(y), grad)`` = grad * (1 - conj(y)^2)
@rrule(tf_complex_tanh, arrays(shape=S, dtype="complex128", min_value=-1.0, max_value=1.0))
def tf_complex_tanh_rrule(z):
    y = np.tanh(z)
    return y, lambda g: (g * (1 - np.conj(y) * np.conj(y)),)


def tf_complex_mul(x, y):
    return x * y


# math_grad.py:1404-1435 _MulGrad ``gx = mul(grad, conj(y)); gy = mul(conj(x), grad)``, reduced; y (3,) broadcast
@rrule(tf_complex_mul, arrays(**C), arrays(shape=(3,), dtype="complex128", min_value=-3.0, max_value=3.0))
def tf_complex_mul_rrule(x, y):
    def pullback(g):
        return _reduce_to(g * np.conj(y), x.shape), _reduce_to(np.conj(x) * g, y.shape)

    return x * y, pullback


def tf_complex_div(x, y):
    return x / y


# math_grad.py:1454-1463 _DivGrad ``gx = divide(grad, conj(y)); gy = grad * divide(divide(-conj(x), conj(y)), conj(y))``
@rrule(tf_complex_div, arrays(**C), arrays(shape=S, dtype="complex128", min_value=0.5, max_value=3.0))
def tf_complex_div_rrule(x, y):
    def pullback(g):
        cx, cy = np.conj(x), np.conj(y)
        return _reduce_to(g / cy, x.shape), _reduce_to(g * ((-cx / cy) / cy), y.shape)

    return x / y, pullback


def tf_complex_abs(z):
    return np.abs(z)


# math_grad.py:1941-1948 _ComplexAbsGrad ``div_no_nan(complex(grad, 0) * x, complex(y, 0))``
@rrule(tf_complex_abs, arrays(**C))
def tf_complex_abs_rrule(z):
    y = np.abs(z)

    def pullback(g):
        num = (g + 0j) * z
        den = y + 0j
        out = np.zeros_like(num)
        nz = den != 0
        out[nz] = num[nz] / den[nz]
        return (out,)

    return y, pullback


def tf_angle(z):
    return np.angle(z)


# math_grad.py:1922-1932 _AngleGrad ``z = reciprocal(complex(im, re)); -complex(grad, 0) * z``; away from the cut
@rrule(tf_angle, arrays(shape=S, dtype="complex128", min_value=0.1, max_value=3.0))
def tf_angle_rrule(z):
    def pullback(g):
        re, im = np.real(z), np.imag(z)
        w = 1.0 / (im + 1j * re)
        return (-(g + 0j) * w,)

    return np.angle(z), pullback


def tf_real(z):
    return np.real(z).copy()


# math_grad.py:1908-1912 _RealGrad ``complex(grad, 0)``
@rrule(tf_real, arrays(**C))
def tf_real_rrule(z):
    return np.real(z).copy(), lambda g: (g + 0j,)


def tf_imag(z):
    return np.imag(z).copy()


# math_grad.py:1915-1919 _ImagGrad ``complex(0, grad)``
@rrule(tf_imag, arrays(**C))
def tf_imag_rrule(z):
    return np.imag(z).copy(), lambda g: (1j * g,)


def tf_complex(x, y):
    return x + 1j * y


# math_grad.py:1898-1905 _ComplexGrad ``gx = real(grad); gy = imag(grad)``, reduced; y (3,) broadcast
@rrule(tf_complex, arrays(shape=S, min_value=-3.0, max_value=3.0), arrays(shape=(3,), min_value=-3.0, max_value=3.0))
def tf_complex_rrule(x, y):
    def pullback(g):
        return _reduce_to(np.real(g), x.shape), _reduce_to(np.imag(g), y.shape)

    return x + 1j * y, pullback


def tf_conj(z):
    return np.conj(z)


# math_grad.py:1935-1938 _ConjGrad ``conj(grad)``
@rrule(tf_conj, arrays(**C))
def tf_conj_rrule(z):
    return np.conj(z), lambda g: (np.conj(g),)


TENSORFLOW = "tensorflow/tensorflow@v2.21.0"

LABELS = {
    "tf_sqrt_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:707-710"},
    "tf_rsqrt_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:722-726"},
    "tf_reciprocal_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:670-674"},
    "tf_expm1_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:751-758"},
    "tf_log1p_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:770-776"},
    "tf_tanh_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:848-854"},
    "tf_asinh_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:857-863"},
    "tf_acosh_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:866-872"},
    "tf_atanh_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:875-884"},
    "tf_asin_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1288-1298"},
    "tf_acos_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1301-1311"},
    "tf_tan_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1277-1285"},
    "tf_erf_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:895-902"},
    "tf_erfc_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:905-913"},
    "tf_erfinv_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:916-922"},
    "tf_ndtri_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:925-931"},
    "tf_lgamma_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:934-940"},
    "tf_digamma_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:943-950"},
    "tf_dawsn_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:953-959"},
    "tf_expint_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:962-967"},
    "tf_fresnel_cos_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:970-975"},
    "tf_fresnel_sin_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:978-983"},
    "tf_spence_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:986-994"},
    "tf_bessel_i0e_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1006-1013"},
    "tf_bessel_i1e_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1033-1048"},
    "tf_bessel_i1_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1016-1030"},
    "tf_bessel_k0e_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1060-1067"},
    "tf_bessel_k1e_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1082-1092"},
    "tf_bessel_j1_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1104-1118"},
    "tf_bessel_y1_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1130-1139"},
    "tf_atan2_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1326-1337"},
    "tf_xlogy_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:779-793"},
    "tf_xlog1py_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:796-810"},
    "tf_xdivy_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:813-827"},
    "tf_igamma_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1142-1158"},
    "tf_igammac_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1161-1165"},
    "tf_betainc_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1168-1193"},
    "tf_zeta_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1196-1212"},
    "tf_polygamma_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1215-1231"},
    "tf_div_no_nan_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1500-1507"},
    "tf_mul_no_nan_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1438-1451"},
    "tf_realdiv_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1488-1497"},
    "tf_pow_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1510-1544"},
    "tf_pow_zero_base_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1510-1544"},
    "tf_maximum_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1557-1586"},
    "tf_minimum_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1589-1592"},
    "tf_squared_difference_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1595-1621"},
    "tf_euclidean_norm_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:45-57"},
    "tf_reduce_max_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:232-256"},
    "tf_reduce_min_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:259-261"},
    "tf_reduce_mean_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:264-282"},
    "tf_reduce_prod_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:285-331"},
    "tf_cumsum_excl_rev_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1972-1980"},
    "tf_cumprod_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1983-1995"},
    "tf_cumprod_excl_rev_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1983-1995"},
    "tf_segment_sum_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:334-337"},
    "tf_segment_mean_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:340-351"},
    "tf_segment_max_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:455-467"},
    "tf_unsorted_segment_prod_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:603-648"},
    "tf_softmax_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/nn_grad.py:281-303"},
    "tf_log_softmax_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/nn_grad.py:306-321"},
    "tf_elu_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/nn_grad.py:459-461"},
    "tf_selu_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/nn_grad.py:464-466"},
    "tf_relu6_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/nn_grad.py:433-435"},
    "tf_leaky_relu_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/nn_grad.py:444-448"},
    "tf_softplus_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/nn_grad.py:469-471"},
    "tf_softsign_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/nn_grad.py:487-489"},
    "tf_softmax_cross_entropy_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/nn_grad.py:513-535"},
    "tf_l2_loss_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/nn_grad.py:952-963"},
    "tf_top_k_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/nn_grad.py:966-1010"},
    "tf_nth_element_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/nn_grad.py:1054-1078"},
    "tf_matrix_inverse_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:47-56"},
    "tf_matrix_determinant_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:375-384"},
    "tf_log_matrix_determinant_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:452-460"},
    "tf_matrix_solve_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:557-568"},
    "tf_matrix_triangular_solve_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:684-714"},
    "tf_cholesky_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:463-486"},
    "tf_self_adjoint_eig_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:776-815"},
    "tf_self_adjoint_eigvals_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:776-815"},
    "tf_svd_tall_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:818-947"},
    "tf_svd_wide_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:818-947"},
    "tf_svd_square_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:818-947"},
    "tf_svdvals_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:818-840"},
    "tf_qr_deep_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:489-554"},
    "tf_qr_wide_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/linalg_grad.py:489-554"},
    "tf_cumulative_logsumexp_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1998-2029"},
    "tf_cumulative_logsumexp_rev_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1998-2029"},
    "tf_complex_square_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:697-704"},
    "tf_complex_exp_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:742-748"},
    "tf_complex_log_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:761-767"},
    "tf_complex_sqrt_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:707-710"},
    "tf_complex_reciprocal_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:670-674"},
    "tf_complex_tanh_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:848-854"},
    "tf_complex_mul_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1404-1435"},
    "tf_complex_div_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1454-1463"},
    "tf_complex_abs_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1941-1948"},
    "tf_angle_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1922-1932"},
    "tf_real_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1908-1912"},
    "tf_imag_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1915-1919"},
    "tf_complex_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1898-1905"},
    "tf_conj_rrule": {"source": f"{TENSORFLOW} tensorflow/python/ops/math_grad.py:1935-1938"},
}

_FLUSHED = ("TensorFlow flushes subnormal inputs to zero, and there takes its x == 0 branch; in IEEE float64 the "
            "formula meets the subnormal itself")
_AT_ZERO_X = ("the partial in x at x = 0 is forced to 0 by TensorFlow's where(x == 0, 0, ...), a deliberate "
              "convention; the derivative there is {what} (mpmath, and JAX's gradient: -0.693147 = log 0.5 for "
              "xlogy at y = 0.5); GG501 is the same zero inside programs. A variant without the forced zero passes "
              "every check at seeds 0 to 3")
UPSTREAM_FLAWS = {
    "tf_bessel_i1_rrule": (
        {"GG201", "GG203", "GG501", "GG502"},
        "_BesselI1Grad returns 1.0 at x = 0 (TensorFlow's GradientTape gives [1.] too), where I1'(0) = 0.5 (mpmath; "
        "JAX's i1 gradient gives 0.5; GG203 says so at seed 2); GG501 and GG502 are the same value inside programs. "
        "A variant returning 0.5 "
        "passes every check at seeds 0 to 3",
    ),
    "tf_bessel_i1e_rrule": (
        {"GG206", "GG301", "GG501"},
        "_BesselI1eGrad computes y * (sign(x) + reciprocal(x)) - ...: at a subnormal x, 1/x overflows to inf and the "
        "tangent is inf (NaN for a zero cotangent), where the derivative is 0.5 (mpmath, JAX); " + _FLUSHED + ". A "
        "variant using y / x passes. GG501 (seed 11, `called-twice`): the same inf in a program's gradient",
        (0, 2, 3, 5, 7, 8, 9, 11),
    ),
    "tf_bessel_j1_rrule": (
        {"GG201"},
        "_BesselJ1Grad computes j0(x) - y / x away from x == 0: at x = 5e-324, y = j1(x) rounds to 0 and the tangent "
        "is 1.0 per unit cotangent, where J1'(0) = 0.5; " + _FLUSHED,
        (7,),
    ),
    "tf_xlogy_rrule": ({"GG201", "GG501"}, "_XLogyGrad: " + _AT_ZERO_X.format(what="log(y)")),
    "tf_xlog1py_rrule": ({"GG201", "GG501"}, "_XLog1pyGrad: " + _AT_ZERO_X.format(what="log1p(y)")),
    "tf_xdivy_rrule": ({"GG201", "GG501"}, "_XDivyGrad: " + _AT_ZERO_X.format(what="1 / y")),
    "tf_unsorted_segment_prod_rrule": (
        {"GG201", "GG206", "GG301"},
        "_UnsortedSegmentProdGrad divides the gathered segment product by x: a row dropped by a negative segment id "
        "gets gathered_prod / x, which overflows to inf, times a zero gradient: NaN (TensorFlow itself gives [2, 1e10, "
        "nan] for data [1e10, 2, 1e-300] with ids [0, 0, -1]); where the segment product is subnormal, prod / x "
        "rounds and the tangent is off by O(1) (-7.4 against -8.2, 0 against -0.39). A variant multiplying the other "
        "entries passes",
    ),
}

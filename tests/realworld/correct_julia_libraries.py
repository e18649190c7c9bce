"""Real-world corpus: reverse rules of NNlib.jl, LogExpFunctions.jl and SpecialFunctions.jl, translated to NumPy rrules.

Sources (full commits):
  NNLIB  = FluxML/NNlib.jl@f71b71c7f497b849c6553e098ba1966d36418225       src/activations.jl, src/softmax.jl,
                                                                          ext/NNlibSpecialFunctionsExt.jl
  LEF    = JuliaStats/LogExpFunctions.jl@fa7d47b0fe58951fadef0f38bc12636486f3623a
                                                                          ext/LogExpFunctionsChainRulesCoreExt.jl,
                                                                          src/basicfuns.jl, src/logsumexp.jl
  SF     = JuliaMath/SpecialFunctions.jl@4f8be2a45e9bb6fa7c7dd7238f7a8c44125fcce0
                                                                          ext/SpecialFunctionsChainRulesCoreExt.jl

Scalar rules (``@scalar_rule``) are applied elementwise, as broadcasting does (NNlib defines the broadcasted rrule
explicitly: ``@.(dΩ * conj(dfdx))``); for real inputs the pullback is ``partial * dy``. The primals are Julia's
Float64 code paths written out in NumPy (branch thresholds, kernels, the @fastmath forms); SpecialFunctions'
special functions are evaluated with scipy.special (cephes/Faddeeva), which agree with the Julia ones to a few ulps.
Julia's ``dims=k`` on an (m, n) array is NumPy's ``axis=k-1`` with ``keepdims=True``.

Each pullback was compared with mpmath at 60 digits (the textbook derivative, not the upstream formula) on 4 random
inputs in its domain and at its edges (branch thresholds, 0, kinks): every rule agrees to 1e-12 relative or better,
the rest being the upstream formulas' own absolute rounding of 1e-16 or less. ``LABELS`` maps each rule to its source;
``UPSTREAM_FLAWS`` lists the error findings that are real flaws, with evidence. LogExpFunctions' xexpy drew a false
GG501 until the contexts fitted the loss's bend to the finite differences' steps (INDEX.md).
"""

import numpy as np
import scipy.special as sp
from hypothesis import strategies as st

from gradguard import arrays, rrule

NNLIB = "FluxML/NNlib.jl@f71b71c"
LEF = "JuliaStats/LogExpFunctions.jl@fa7d47b"
SF = "JuliaMath/SpecialFunctions.jl@4f8be2a"

_E = dict(all="ignore")
SQRTPI = np.sqrt(np.pi)


def _mix(samples, lo, hi):
    return st.one_of(st.sampled_from(samples), st.floats(lo, hi))


def _evalpoly(x, p):  # Base.evalpoly on a tuple (Horner, muladd)
    ex = p[-1]
    for c in p[-2::-1]:
        ex = x * ex + c
    return ex


# ===== LogExpFunctions.jl: primals (src/basicfuns.jl) ==============================================================


def _lef_log1pexp(x):  # basicfuns.jl:263-276, thresholds :308 (Float64)
    x1, x2, x3, x4 = (-745.1332191019412, -36.7368005696771, 18.021826694558577, 33.23111882352963)
    with np.errstate(**_E):
        return np.where(x < x1, 0.0, np.where(x < x2, np.exp(x), np.where(x < x3, np.log1p(np.exp(x)),
                        np.where(x < x4, x + np.exp(-x), x))))


def _lef_logistic(x):  # basicfuns.jl:106-110
    with np.errstate(**_E):
        e = np.exp(x)
        return np.where(x < -744.4400719213812, 0.0, np.where(x > 36.7368005696771, 1.0, e / (1.0 + e)))


_LOGCOSH_P = (5e-1, -0.08333333333332801, 0.02222222222164912, -0.0067460317245250445, 0.0021869484500251714,
              -0.0007385985435311435, 0.0002565500026777061, -9.084985367586575e-5, 3.2348259905568986e-5,
              -1.1058814347469105e-5, 3.16293199955507e-6, -5.312230207322749e-7)


def _lef_logcosh(x):  # basicfuns.jl:138-144, kernel :170-204
    ax = np.abs(x)
    x2 = x * x
    ker = _evalpoly(x2, _LOGCOSH_P) * x2
    return np.where(ax < 0.7373046875, ker, ax + _lef_log1pexp(-2 * ax) - np.log(2.0))


def _lef_log1mexp(x):  # basicfuns.jl:322-330
    with np.errstate(**_E):
        return np.where(x < np.log(0.5), np.log1p(-np.exp(x)), np.log(-np.expm1(x)))


def _lef_logexpm1(x):  # basicfuns.jl:345 (x::Real; Float64)
    with np.errstate(**_E):
        return np.where(x <= 18.0, np.log(np.expm1(x)), np.where(x <= 33.3, x - np.exp(-x), x))


_LOG1PMX_P = (0.6666666666666669, 0.3999999999997768, 0.2857142857784595, 0.2222222142048249, 0.18181870670924566,
              0.15382646727504887, 0.1337701340211177, 0.11201972567415432, 0.143418239946679)


def _lef_log1pmx(x):  # basicfuns.jl:380-386, kernel :427-446
    with np.errstate(**_E):
        r = x / (x + 2)
        t = r * r
        w = _evalpoly(t, _LOG1PMX_P)
        hxsq = x * x / 2
        ker = r * (w * t + hxsq) - hxsq
        return np.where((-0.425 < x) & (x < 0.4), ker, np.log1p(x) - x)


def _lef_logit(x):  # basicfuns.jl:123-129
    with np.errstate(**_E):
        return np.where(4 * x < 1, -np.log(1.0 / x - 1), 2 * np.arctanh(2 * x - 1))


# ----- xlogx: ext/LogExpFunctionsChainRulesCoreExt.jl:8-24 --------------------------------------------------------
def lef_xlogx(x):  # basicfuns.jl:12-15
    with np.errstate(**_E):
        r = x * np.log(x)
    return np.where(x == 0, 0.0, r)


# ext:8-24  ``logx = log(x); Ω = iszero(x) ? 0 : x*logx; ∂x = 1 + logx``
@rrule(lef_xlogx, arrays(shape=(2, 3), min_value=1e-300, max_value=1e300))
def lef_xlogx_rrule(x):
    with np.errstate(**_E):
        logx = np.log(x)
        y = x * logx
    omega = np.where(x == 0, 0.0, y)
    dx = 1 + logx
    return omega, lambda dy: (dx * dy,)


# ----- xlogy: ext:26-49 ---------------------------------------------------------------------------------------------
def lef_xlogy(x, y):  # basicfuns.jl:27-30
    with np.errstate(**_E):
        r = x * np.log(y)
    return np.where((x == 0) & ~np.isnan(y), 0.0, r)


# ext:26-49  ``∂x = log(y); ∂y = iszero(x) && !isnan(y) ? 0 : x / y``
@rrule(lef_xlogy, arrays(shape=(2, 3), elements=_mix([0.0], -10.0, 10.0)),
       arrays(shape=(2, 3), min_value=1e-3, max_value=100.0))
def lef_xlogy_rrule(x, y):
    with np.errstate(**_E):
        logy = np.log(y)
        z = x * logy
        w = x / y
    zero = (x == 0) & ~np.isnan(y)
    omega = np.where(zero, 0.0, z)
    dy_ = np.where(zero, 0.0, w)
    return omega, lambda d: (logy * d, dy_ * d)


# ----- xexpy: ext:98-115 --------------------------------------------------------------------------------------------
def lef_xexpy(x, y):  # basicfuns.jl:72-76
    with np.errstate(**_E):
        expy = np.exp(y)
        r = x * expy
    return np.where(((x == 0) & np.isfinite(y)) | ((expy == 0) & ~np.isnan(x)), 0.0, r)


# ext:98-115  ``expy = exp(y); Ω = iszero(expy) && !isnan(x) ? 0 : x*expy; ∂x = expy; ∂y = Ω``
@rrule(lef_xexpy, arrays(shape=(2, 3), elements=_mix([0.0], -10.0, 10.0)),
       arrays(shape=(2, 3), min_value=-50.0, max_value=50.0))
def lef_xexpy_rrule(x, y):
    with np.errstate(**_E):
        expy = np.exp(y)
        result = x * expy
    omega = np.where((expy == 0) & ~np.isnan(x), 0.0, result)
    return omega, lambda d: (expy * d, omega * d)


# ----- logit: ext:118  ``@scalar_rule(logit(x::Real), (inv(x * (1 - x)),))`` -------------------------------------
def lef_logit(x):
    return _lef_logit(x)


@rrule(lef_logit, arrays(shape=(2, 3), elements=_mix([0.25, 0.5], 1e-6, 1 - 1e-6)))
def lef_logit_rrule(x):
    d = 1.0 / (x * (1 - x))
    return _lef_logit(x), lambda dy: (d * dy,)


# ----- logcosh: ext:119  ``@scalar_rule(logcosh(x::Real), tanh(x))`` ----------------------------------------------
def lef_logcosh(x):
    return _lef_logcosh(x)


@rrule(lef_logcosh, arrays(shape=(2, 3), elements=_mix([0.0, 0.7373046875, -0.7373046875], -50.0, 50.0)))
def lef_logcosh_rrule(x):
    d = np.tanh(x)
    return _lef_logcosh(x), lambda dy: (d * dy,)


# ----- logabssinh: ext:120  ``@scalar_rule(logabssinh(x::Real), coth(x))`` ----------------------------------------
def lef_logabssinh(x):  # basicfuns.jl:213-216
    ax = np.abs(x)
    return ax + _lef_log1mexp(-2 * ax) - np.log(2.0)


@rrule(lef_logabssinh, arrays(shape=(2, 3), elements=st.one_of(st.floats(0.01, 30.0), st.floats(-30.0, -0.01))))
def lef_logabssinh_rrule(x):
    d = 1.0 / np.tanh(x)
    return lef_logabssinh(x), lambda dy: (d * dy,)


# ----- log1pexp: ext:123  ``@scalar_rule(log1pexp(x::Real), (logistic(x),))`` ------------------------------------
def lef_log1pexp(x):
    return _lef_log1pexp(x)


_LOG1PEXP_T = [-745.1332191019412, -36.7368005696771, 18.021826694558577, 33.23111882352963, 0.0]


@rrule(lef_log1pexp, arrays(shape=(2, 3), elements=_mix(_LOG1PEXP_T, -800.0, 800.0)))
def lef_log1pexp_rrule(x):
    d = _lef_logistic(x)
    return _lef_log1pexp(x), lambda dy: (d * dy,)


# ----- log1mexp: ext:124  ``@scalar_rule(log1mexp(x::Real), (-exp(x - Ω),))`` ------------------------------------
def lef_log1mexp(x):
    return _lef_log1mexp(x)


@rrule(lef_log1mexp, arrays(shape=(2, 3), elements=_mix([np.log(0.5)], -50.0, -1e-3)))
def lef_log1mexp_rrule(x):
    om = _lef_log1mexp(x)
    d = -np.exp(x - om)
    return om, lambda dy: (d * dy,)


# ----- logexpm1: ext:126  ``@scalar_rule(logexpm1(x::Real), (exp(x - Ω),))`` -------------------------------------
def lef_logexpm1(x):
    return _lef_logexpm1(x)


@rrule(lef_logexpm1, arrays(shape=(2, 3), elements=_mix([18.0, 33.3], 1e-3, 50.0)))
def lef_logexpm1_rrule(x):
    om = _lef_logexpm1(x)
    d = np.exp(x - om)
    return om, lambda dy: (d * dy,)


# ----- log1pmx: ext:127  ``@scalar_rule(log1pmx(x::Real), (-x / (x + 1),))`` -------------------------------------
def lef_log1pmx(x):
    return _lef_log1pmx(x)


@rrule(lef_log1pmx, arrays(shape=(2, 3), elements=_mix([-0.425, 0.4, 0.0], -0.99, 10.0)))
def lef_log1pmx_rrule(x):
    d = -x / (x + 1)
    return _lef_log1pmx(x), lambda dy: (d * dy,)


# ----- logaddexp: ext:130  ``@scalar_rule(logaddexp(x, y), (exp(x - Ω), exp(y - Ω)))`` ---------------------------
def lef_logaddexp(x, y):  # basicfuns.jl:455-468
    a, b = np.broadcast_arrays(np.asarray(x, float), np.asarray(y, float))
    diff = np.where(a < b, a - b, np.where(a == b, 0.0, b - a))
    mx = np.where(a < b, b, np.where(~np.isnan(b), a, b))
    return mx + _lef_log1pexp(diff)


@rrule(lef_logaddexp, arrays(shape=(2, 3), elements=_mix([0.0, 1.0], -50.0, 50.0)),
       arrays(shape=(2, 3), elements=_mix([0.0, 1.0], -50.0, 50.0)))
def lef_logaddexp_rrule(x, y):
    om = lef_logaddexp(x, y)
    dx, dy_ = np.exp(x - om), np.exp(y - om)
    return om, lambda d: (dx * d, dy_ * d)


# ----- logsubexp: ext:131-134 ---------------------------------------------------------------------------------------
def lef_logsubexp(x, y):  # basicfuns.jl:477-481
    delta = np.where((x == y) & (np.isfinite(x) | (x < 0)), 0.0, np.abs(x - y))
    return np.maximum(x, y) + _lef_log1mexp(-delta)


def _logsubexp_rule(x, y):
    om = lef_logsubexp(x, y)
    with np.errstate(**_E):
        dx = np.where(x > y, np.exp(x - om), -np.exp(x - om))
        dy_ = np.where(x > y, -np.exp(y - om), np.exp(y - om))
    return om, lambda d: (dx * d, dy_ * d)


# ``(x > y ? exp(x - Ω) : -exp(x - Ω), x > y ? -exp(y - Ω) : exp(y - Ω))``: x > y everywhere here
@rrule(lef_logsubexp, arrays(shape=(2, 3), min_value=0.5, max_value=30.0),
       arrays(shape=(2, 3), min_value=-30.0, max_value=0.0))
def lef_logsubexp_rrule(x, y):
    return _logsubexp_rule(x, y)


# the same rule where x < y everywhere (the other branch)
@rrule(lef_logsubexp, arrays(shape=(2, 3), min_value=-30.0, max_value=0.0),
       arrays(shape=(2, 3), min_value=0.5, max_value=30.0), name="lef_logsubexp_xlty_rrule")
def lef_logsubexp_xlty_rrule(x, y):
    return _logsubexp_rule(x, y)


# ----- logsumexp(x; dims=2): ext:141-152 (primal: src/logsumexp.jl:53-58, one-pass reduction) ---------------------
def _lef_logsumexp_dims(x, axis):  # xmax + log1p(sum of exp(x_i - xmax) over the other elements)
    xmax = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - xmax)
    first = np.argmax(x, axis=axis)
    mask = np.ones_like(x, dtype=bool)
    np.put_along_axis(mask, np.expand_dims(first, axis), False, axis=axis)
    r = np.sum(np.where(mask, e, 0.0), axis=axis, keepdims=True)
    return xmax + np.log1p(r)


def lef_logsumexp_dims2(x):
    return _lef_logsumexp_dims(x, 1)


# ``Ω = logsumexp(x; dims); x̄ = project_x(Ω̄ .* exp.(x .- Ω))``
@rrule(lef_logsumexp_dims2, arrays(shape=(3, 4), elements=_mix([0.0, 2.0], -50.0, 50.0)))
def lef_logsumexp_dims2_rrule(x):
    om = lef_logsumexp_dims2(x)
    return om, lambda db: (db * np.exp(x - om),)


# ----- softmax(x; dims=:): ext:166-186 (primal: basicfuns.jl:512-520) ----------------------------------------------
def lef_softmax(x):
    u = np.max(x)
    r = np.exp(x - u)
    return r * (1.0 / np.sum(r))  # lmul!(inv(sum(r)), r)


# ``x̄ = Ωcopy .* (Ω̄ .- dot(Ωcopy, Ω̄))``
@rrule(lef_softmax, arrays(shape=(2, 3), elements=_mix([0.0, 1.0], -50.0, 50.0)))
def lef_softmax_rrule(x):
    om = lef_softmax(x)
    omc = om.copy()
    return om, lambda ob: (omc * (ob - np.sum(omc * ob)),)


# ===== NNlib.jl (src/activations.jl, src/softmax.jl) ==============================================================


def _nn_sigmoid(x):  # activations.jl:54-57
    with np.errstate(**_E):
        t = np.exp(-np.abs(x))
        return np.where(x >= 0, 1.0 / (1 + t), t / (1 + t))


def _nn_sigmoid_fast(x):  # activations.jl:891-898 (Float64)
    with np.errstate(**_E):
        t = np.exp(-np.abs(x))
        y = np.where(x >= 0, 1.0 / (1 + t), t / (1 + t))
        return np.where(x > 40, 1.0, np.where(x < -80, 0.0, y))


def _nn_tanh_fast(x):  # activations.jl:858-866 (Float64)
    with np.errstate(**_E):
        exp2x = np.exp(x + x)
        y = (exp2x - 1) / (exp2x + 1)
        x2 = x * x
        ypoly = x * _evalpoly(x2, (1.0, -0.33333333333324583, 0.13333333325511604, -0.05396823125794372,
                                   0.02186660872609521, -0.008697141630499953))
        return np.where(x2 > 900.0, np.sign(x), np.where(x2 < 0.017, ypoly, y))


def _nn_softplus(x):  # activations.jl:696-701
    with np.errstate(**_E):
        return np.where(x < 0, np.log1p(np.exp(x)), x + np.log1p(np.exp(-x)))


# ----- σ: activations.jl:943  ``(:σ, :(Ω * (1 - Ω)))`` -----------------------------------------------------------
def nn_sigmoid(x):
    return _nn_sigmoid(x)


@rrule(nn_sigmoid, arrays(shape=(2, 3), min_value=-100.0, max_value=100.0))
def nnlib_sigmoid_rrule(x):
    om = _nn_sigmoid(x)
    return om, lambda dy: (dy * (om * (1 - om)),)


# ----- hardσ: activations.jl:102, 944  ``ifelse((Ω>0)&(Ω<1), 1/6, 0)`` -------------------------------------------
def nn_hardsigmoid(x):
    return np.clip((x + 3) / 6, 0.0, 1.0)


@rrule(nn_hardsigmoid, arrays(shape=(2, 3), elements=_mix([-3.0, 3.0, 0.0], -6.0, 6.0)))
def nnlib_hardsigmoid_rrule(x):
    om = nn_hardsigmoid(x)
    d = np.where((om > 0) & (om < 1), 1.0 / 6.0, 0.0)
    return om, lambda dy: (dy * d,)


# ----- logσ: activations.jl:128, 945  ``(:logσ, :(sigmoid_fast(-x)))`` ------------------------------------------
def nn_logsigmoid(x):
    return -_nn_softplus(-x)


@rrule(nn_logsigmoid, arrays(shape=(2, 3), min_value=-100.0, max_value=100.0))
def nnlib_logsigmoid_rrule(x):
    d = _nn_sigmoid_fast(-x)
    return nn_logsigmoid(x), lambda dy: (dy * d,)


# ----- elu: activations.jl:307-309, 951  ``deriv_elu(Ω, α=1) = ifelse(Ω ≥ 0, 1, Ω + α)`` -------------------------
def nn_elu(x):
    with np.errstate(**_E):
        return np.where(x >= 0, x, 1.0 * (np.exp(x) - 1))  # @fastmath α * (exp(x) - 1)


@rrule(nn_elu, arrays(shape=(2, 3), elements=_mix([0.0], -20.0, 20.0)))
def nnlib_elu_rrule(x):
    om = nn_elu(x)
    d = np.where(om >= 0, 1.0, om + 1.0)
    return om, lambda dy: (dy * d,)


# ----- gelu_tanh: activations.jl:350-369, 952 ---------------------------------------------------------------------
_GELU_A, _GELU_A2, _GELU_L, _GELU_2L = 0.044715, 0.08943, np.sqrt(2 / np.pi), np.sqrt(8 / np.pi)


def nn_gelu_tanh(x):
    return x / 2 * (1 + _nn_tanh_fast(_GELU_L * (x + _GELU_A * x ** 3)))


@rrule(nn_gelu_tanh, arrays(shape=(2, 3), elements=_mix([0.0], -10.0, 10.0)))
def nnlib_gelu_tanh_rrule(x):
    x2 = x * x
    t = x2 * _GELU_A + 1.0
    z = _GELU_L * x * t
    om_ = _nn_tanh_fast(z)
    sech2 = 1 - om_ ** 2
    d = (1 + om_) / 2 + x * _GELU_L * (x2 * _GELU_A2 + t) * sech2 / 2
    return nn_gelu_tanh(x), lambda dy: (dy * d,)


# ----- gelu_erf: ext/NNlibSpecialFunctionsExt.jl:7-13, activations.jl:954 -----------------------------------------
def nn_gelu_erf(x):
    return x / 2 * (1 + sp.erf(x / np.sqrt(2.0)))


@rrule(nn_gelu_erf, arrays(shape=(2, 3), elements=_mix([0.0], -10.0, 10.0)))
def nnlib_gelu_erf_rrule(x):
    s2 = np.sqrt(2.0)
    phi = (1 + sp.erf(x / s2)) / 2
    d = phi + x / s2 * np.exp(-(x ** 2) / 2) / np.sqrt(np.pi)
    return nn_gelu_erf(x), lambda dy: (dy * d,)


# ----- swish: activations.jl:441, 955  ``Ω + sigmoid_fast(x) * (1 - Ω)`` ----------------------------------------
def nn_swish(x):
    return x * _nn_sigmoid_fast(x)


@rrule(nn_swish, arrays(shape=(2, 3), elements=_mix([40.0, -80.0, 0.0], -100.0, 100.0)))
def nnlib_swish_rrule(x):
    om = nn_swish(x)
    d = om + _nn_sigmoid_fast(x) * (1 - om)
    return om, lambda dy: (dy * d,)


# ----- hardswish: activations.jl:483-485, 956 ---------------------------------------------------------------------
def nn_hardswish(x):
    return x * nn_hardsigmoid(x)


@rrule(nn_hardswish, arrays(shape=(2, 3), elements=_mix([-3.0, 3.0, 0.0], -6.0, 6.0)))
def nnlib_hardswish_rrule(x):
    d = np.where(x < -3, 0.0, np.where(x > 3, 1.0, x / 3 + 0.5))
    return nn_hardswish(x), lambda dy: (dy * d,)


# ----- selu: activations.jl:550-563, 958 --------------------------------------------------------------------------
_SELU_L, _SELU_A = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717


def nn_selu(x):
    with np.errstate(**_E):
        return _SELU_L * np.where(x > 0, x, _SELU_A * (np.exp(x) - 1))


@rrule(nn_selu, arrays(shape=(2, 3), elements=_mix([0.0], -20.0, 20.0)))
def nnlib_selu_rrule(x):
    om = nn_selu(x)
    d = np.where(om > 0, _SELU_L, om + _SELU_A * _SELU_L)
    return om, lambda dy: (dy * d,)


# ----- celu: activations.jl:588-590, 959 (α = 1) ------------------------------------------------------------------
def nn_celu(x):
    with np.errstate(**_E):
        return np.where(x >= 0, x, 1.0 * (np.exp(x / 1.0) - 1))


@rrule(nn_celu, arrays(shape=(2, 3), elements=_mix([0.0], -20.0, 20.0)))
def nnlib_celu_rrule(x):
    om = nn_celu(x)
    d = np.where(om > 0, 1.0, om / 1.0 + 1)
    return om, lambda dy: (dy * d,)


# ----- softplus: activations.jl:696-701, 962  ``(:softplus, :(sigmoid_fast(x)))`` -------------------------------
def nn_softplus(x):
    return _nn_softplus(x)


@rrule(nn_softplus, arrays(shape=(2, 3), elements=_mix([0.0, 40.0, -80.0], -100.0, 100.0)))
def nnlib_softplus_rrule(x):
    d = _nn_sigmoid_fast(x)
    return _nn_softplus(x), lambda dy: (dy * d,)


# ----- softshrink: activations.jl:811-815, 967  ``(:softshrink, :(Ω != 0))`` ------------------------------------
def nn_softshrink(x):
    lo, hi = x - 0.5, x + 0.5
    return np.where(hi > 0, np.where(lo < 0, 0.0, lo), hi)


@rrule(nn_softshrink, arrays(shape=(2, 3), elements=_mix([-0.5, 0.5, 0.0], -2.0, 2.0)))
def nnlib_softshrink_rrule(x):
    om = nn_softshrink(x)
    d = (om != 0).astype(float)
    return om, lambda dy: (dy * d,)


# ----- softmax(x; dims=1): softmax.jl:56-116 ------------------------------------------------------------------------
def nn_softmax(x):
    max_ = np.max(x, axis=0, keepdims=True)
    out = np.exp(x - max_)
    return out / np.sum(out, axis=0, keepdims=True)


# ``∇softmax: dx = dy .* y; dx .- y .* sum(dx; dims)``
@rrule(nn_softmax, arrays(shape=(3, 2), elements=_mix([0.0, 1.0], -50.0, 50.0)))
def nnlib_softmax_rrule(x):
    y = nn_softmax(x)

    def pb(dy):
        dx = dy * y
        return (dx - y * np.sum(dx, axis=0, keepdims=True),)
    return y, pb


# ----- logsoftmax(x; dims=1): softmax.jl:133-190 ----------------------------------------------------------------
def nn_logsoftmax(x):
    max_ = np.max(x, axis=0, keepdims=True)
    out = x - max_
    return out - np.log(np.sum(np.exp(out), axis=0, keepdims=True))


# ``∇logsoftmax: dx = dy .- sum(dy; dims) .* exp.(y)``
@rrule(nn_logsoftmax, arrays(shape=(3, 2), elements=_mix([0.0, 1.0], -50.0, 50.0)))
def nnlib_logsoftmax_rrule(x):
    y = nn_logsoftmax(x)
    return y, lambda dy: (dy - np.sum(dy, axis=0, keepdims=True) * np.exp(y),)


# ----- logsumexp(x; dims=:): softmax.jl:200-212 -------------------------------------------------------------------
def nn_logsumexp(x):
    max_ = np.max(x)
    return max_ + np.log(np.sum(np.exp(x - max_)))


# ``tmp = exp.(x .- max_); y = max_ .+ log.(sum(tmp)); pullback: dy .* tmp ./ sum(tmp)``
@rrule(nn_logsumexp, arrays(shape=(2, 3), elements=_mix([0.0, 1.0], -50.0, 50.0)))
def nnlib_logsumexp_rrule(x):
    max_ = np.max(x)
    tmp = np.exp(x - max_)
    y = max_ + np.log(np.sum(tmp))
    return y, lambda dy: (dy * tmp / np.sum(tmp),)


# ===== SpecialFunctions.jl (ext/SpecialFunctionsChainRulesCoreExt.jl) =============================================


def sf_erf(x):
    return sp.erf(x)


# ext:45  ``@scalar_rule(erf(x), (2 * exp(-x^2)) / sqrtπ)``
@rrule(sf_erf, arrays(shape=(2, 3), min_value=-6.0, max_value=6.0))
def sf_erf_rrule(x):
    d = (2 * np.exp(-x ** 2)) / SQRTPI
    return sp.erf(x), lambda dy: (d * dy,)


def sf_logerfc(x):  # src/erf.jl:726-732
    with np.errstate(**_E):
        return np.where(x > 0, np.log(sp.erfcx(x)) - x ** 2, np.log(sp.erfc(x)))


# ext:48  ``@scalar_rule(logerfc(x), - (2 * exp(-x^2 - Ω)) / sqrtπ)``
@rrule(sf_logerfc, arrays(shape=(2, 3), elements=_mix([0.0], -5.0, 100.0)))
def sf_logerfc_rrule(x):
    om = sf_logerfc(x)
    d = -(2 * np.exp(-x ** 2 - om)) / SQRTPI
    return om, lambda dy: (d * dy,)


def sf_erfinv(x):
    return sp.erfinv(x)


# ext:53  ``@scalar_rule(erfinv(x), sqrtπ * (exp(Ω^2) / 2))``
@rrule(sf_erfinv, arrays(shape=(2, 3), min_value=-0.999, max_value=0.999))
def sf_erfinv_rrule(x):
    om = sp.erfinv(x)
    d = SQRTPI * (np.exp(om ** 2) / 2)
    return om, lambda dy: (d * dy,)


def sf_gamma(x):
    return sp.gamma(x)


# ext:55  ``@scalar_rule(gamma(x), Ω * digamma(x))``
@rrule(sf_gamma, arrays(shape=(2, 3), min_value=0.05, max_value=30.0))
def sf_gamma_rrule(x):
    om = sp.gamma(x)
    d = om * sp.digamma(x)
    return om, lambda dy: (d * dy,)


def sf_loggamma(x):
    return sp.gammaln(x)


# ext:174  ``@scalar_rule(loggamma(x), digamma(x))``
@rrule(sf_loggamma, arrays(shape=(2, 3), min_value=1e-3, max_value=1e3))
def sf_loggamma_rrule(x):
    d = sp.digamma(x)
    return sp.gammaln(x), lambda dy: (d * dy,)


def sf_digamma(x):
    return sp.digamma(x)


# ext:42  ``@scalar_rule(digamma(x), trigamma(x))``
@rrule(sf_digamma, arrays(shape=(2, 3), min_value=0.05, max_value=100.0))
def sf_digamma_rrule(x):
    d = sp.polygamma(1, x)
    return sp.digamma(x), lambda dy: (d * dy,)


def sf_beta(a, b):
    return sp.beta(a, b)


# ext:156-160  ``(Ω*(digamma(a) - digamma(a + b)), Ω*(digamma(b) - digamma(a + b)))``
@rrule(sf_beta, arrays(shape=(2, 3), min_value=0.1, max_value=20.0), arrays(shape=(2, 3), min_value=0.1, max_value=20.0))
def sf_beta_rrule(a, b):
    om = sp.beta(a, b)
    dab = sp.digamma(a + b)
    da, db = om * (sp.digamma(a) - dab), om * (sp.digamma(b) - dab)
    return om, lambda d: (da * d, db * d)


def sf_logbeta(a, b):
    return sp.betaln(a, b)


# ext:161-165  ``(digamma(a) - digamma(a + b), digamma(b) - digamma(a + b))``
@rrule(sf_logbeta, arrays(shape=(2, 3), min_value=0.1, max_value=100.0),
       arrays(shape=(2, 3), min_value=0.1, max_value=100.0))
def sf_logbeta_rrule(a, b):
    dab = sp.digamma(a + b)
    da, db = sp.digamma(a) - dab, sp.digamma(b) - dab
    return sp.betaln(a, b), lambda d: (da * d, db * d)


def sf_besselj1(x):
    return sp.j1(x)


# ext:32-35  ``@scalar_rule(besselj1(x), (besselj0(x) - besselj(2, x)) / 2)``
@rrule(sf_besselj1, arrays(shape=(2, 3), elements=_mix([0.0], -50.0, 50.0)))
def sf_besselj1_rrule(x):
    d = (sp.j0(x) - sp.jv(2, x)) / 2
    return sp.j1(x), lambda dy: (d * dy,)


def sf_expint(x):
    return sp.exp1(x)


# ext:184  ``@scalar_rule(expint(z), - exp(-z) / z)``
@rrule(sf_expint, arrays(shape=(2, 3), min_value=0.01, max_value=50.0))
def sf_expint_rrule(x):
    d = -np.exp(-x) / x
    return sp.exp1(x), lambda dy: (d * dy,)


_F = "ext/LogExpFunctionsChainRulesCoreExt.jl"
LABELS = {
    "lef_xlogx_rrule": {"source": f"{LEF} {_F}:8-24; src/basicfuns.jl:12-15"},
    "lef_xlogy_rrule": {"source": f"{LEF} {_F}:26-49; src/basicfuns.jl:27-30"},
    "lef_xexpy_rrule": {"source": f"{LEF} {_F}:98-115; src/basicfuns.jl:72-76"},
    "lef_logit_rrule": {"source": f"{LEF} {_F}:118; src/basicfuns.jl:123-129"},
    "lef_logcosh_rrule": {"source": f"{LEF} {_F}:119; src/basicfuns.jl:138-204"},
    "lef_logabssinh_rrule": {"source": f"{LEF} {_F}:120; src/basicfuns.jl:213-216"},
    "lef_log1pexp_rrule": {"source": f"{LEF} {_F}:123; src/basicfuns.jl:104-110, 259-308"},
    "lef_log1mexp_rrule": {"source": f"{LEF} {_F}:124; src/basicfuns.jl:322-330"},
    "lef_logexpm1_rrule": {"source": f"{LEF} {_F}:126; src/basicfuns.jl:345"},
    "lef_log1pmx_rrule": {"source": f"{LEF} {_F}:127; src/basicfuns.jl:380-446"},
    "lef_logaddexp_rrule": {"source": f"{LEF} {_F}:130; src/basicfuns.jl:455-468"},
    "lef_logsubexp_rrule": {"source": f"{LEF} {_F}:131-134; src/basicfuns.jl:477-481"},
    "lef_logsubexp_xlty_rrule": {"source": f"{LEF} {_F}:131-134; src/basicfuns.jl:477-481"},
    "lef_logsumexp_dims2_rrule": {"source": f"{LEF} {_F}:141-152; src/logsumexp.jl:53-58, 116-137"},
    "lef_softmax_rrule": {"source": f"{LEF} {_F}:166-186; src/basicfuns.jl:509-520"},
    "nnlib_sigmoid_rrule": {"source": f"{NNLIB} src/activations.jl:54-57, 943, 973-989"},
    "nnlib_hardsigmoid_rrule": {"source": f"{NNLIB} src/activations.jl:102, 944"},
    "nnlib_logsigmoid_rrule": {"source": f"{NNLIB} src/activations.jl:128, 696-701, 891-898, 945"},
    "nnlib_elu_rrule": {"source": f"{NNLIB} src/activations.jl:307-309, 951"},
    "nnlib_gelu_tanh_rrule": {"source": f"{NNLIB} src/activations.jl:350-369, 858-866, 952"},
    "nnlib_gelu_erf_rrule": {"source": f"{NNLIB} ext/NNlibSpecialFunctionsExt.jl:7-13; src/activations.jl:954"},
    "nnlib_swish_rrule": {"source": f"{NNLIB} src/activations.jl:441, 891-898, 955"},
    "nnlib_hardswish_rrule": {"source": f"{NNLIB} src/activations.jl:483-485, 956"},
    "nnlib_selu_rrule": {"source": f"{NNLIB} src/activations.jl:550-563, 958"},
    "nnlib_celu_rrule": {"source": f"{NNLIB} src/activations.jl:588-590, 959"},
    "nnlib_softplus_rrule": {"source": f"{NNLIB} src/activations.jl:696-701, 891-898, 962"},
    "nnlib_softshrink_rrule": {"source": f"{NNLIB} src/activations.jl:811-815, 967"},
    "nnlib_softmax_rrule": {"source": f"{NNLIB} src/softmax.jl:56-116"},
    "nnlib_logsoftmax_rrule": {"source": f"{NNLIB} src/softmax.jl:133-190"},
    "nnlib_logsumexp_rrule": {"source": f"{NNLIB} src/softmax.jl:200-212"},
    "sf_erf_rrule": {"source": f"{SF} ext/SpecialFunctionsChainRulesCoreExt.jl:45"},
    "sf_logerfc_rrule": {"source": f"{SF} ext/SpecialFunctionsChainRulesCoreExt.jl:48; src/erf.jl:726-732"},
    "sf_erfinv_rrule": {"source": f"{SF} ext/SpecialFunctionsChainRulesCoreExt.jl:53"},
    "sf_gamma_rrule": {"source": f"{SF} ext/SpecialFunctionsChainRulesCoreExt.jl:55"},
    "sf_loggamma_rrule": {"source": f"{SF} ext/SpecialFunctionsChainRulesCoreExt.jl:174"},
    "sf_digamma_rrule": {"source": f"{SF} ext/SpecialFunctionsChainRulesCoreExt.jl:42"},
    "sf_beta_rrule": {"source": f"{SF} ext/SpecialFunctionsChainRulesCoreExt.jl:156-160"},
    "sf_logbeta_rrule": {"source": f"{SF} ext/SpecialFunctionsChainRulesCoreExt.jl:161-165"},
    "sf_besselj1_rrule": {"source": f"{SF} ext/SpecialFunctionsChainRulesCoreExt.jl:32-35"},
    "sf_expint_rrule": {"source": f"{SF} ext/SpecialFunctionsChainRulesCoreExt.jl:184"},
}

UPSTREAM_FLAWS = {
    "lef_xlogy_rrule": (
        {"GG204"},
        "_Ω_∂_xlogy sets ∂y = iszero(x) ? zero(w) : x / y (ext:30-36): right to first order (x / y = 0 at x = 0), "
        "but the branch makes the pullback's derivative in x vanish at x = 0, where d²(x log y)/dx dy = 1/y "
        "(mpmath: 1 at (0, 1)); JAX differentiating the same where-branch also gives 0 (evidence_gg204.py). "
        "Same class as JAX's i0 jvp (corpus INDEX: jax_i0_rule). GG204 at seeds 0-5, x = 0, y = 1",
    ),
    "nnlib_softplus_rrule": (
        {"GG204"},
        "the derivative sigmoid_fast(x) computes exp(-abs(x)) (activations.jl:895): AD through it with abs'(0) = "
        "sign(0) = 0 (ChainRules' abs rule, Zygote, PyTorch, gradguard's tape) gives d/dx pullback = 0 at x = 0 "
        "where softplus''(0) = 1/4 (mpmath); JAX (abs'(0) = +1) gives 0.25. Convention-dependent; GG204 at seeds 0-5",
    ),
    "nnlib_logsigmoid_rrule": (
        {"GG204"},
        "derivative sigmoid_fast(-x): as softplus, 0 at x = 0 under abs'(0) = 0 (torch: -0.0) where logσ''(0) = "
        "-1/4 (mpmath; JAX -0.25). GG204 at seeds 0-5",
    ),
    "nnlib_swish_rrule": (
        {"GG204"},
        "derivative Ω + sigmoid_fast(x)(1 - Ω): at x = 0 AD with abs'(0) = 0 gives 0.25 (torch 0.25) where "
        "swish''(0) = 1/2 (mpmath; JAX 0.5). GG204 at seeds 0-5",
    ),
}

"""Real-world corpus: ChainRules.jl's reverse rules (Julia), translated to NumPy rrules.

Source: https://github.com/JuliaDiff/ChainRules.jl at commit 28425ba7dd1e5443534e359411b18a2261ba8372 (paths under
``src/rulesets/``). Each primal is the NumPy function Julia computes (column-major where it matters: ``reshape``,
``repeat``'s pullback, the linear order ``findmin`` and ``prod`` walk; Julia's ``generic_norm2``/``generic_normp``,
``mod``, ``clamp``, ``sinc``/``cosc`` and ``normalize`` written out as Julia has them); each pullback is the rule's
pullback translated line by line, with the same formula, special cases (``ifelse(iszero(..))``, ``pinv`` of a number,
the ``iszero`` branches of ``prod`` and ``cumprod``, ``findlast`` in ``normInf``) and order of operations. Julia is
1-based and column-major; ``x'`` is the conjugate transpose, ``dot(x, y)`` conjugates ``x``, ``unthunk`` is the
identity, and ``NoTangent()`` for a non-differentiable argument is ``None``. A ``@scalar_rule`` pullback is
``conj(partial) * cotangent``; where ChainRules evaluates a scalar rule elementwise through broadcasting (``sin.(x)``,
``split_bc_derivatives`` in broadcast.jl) the primal is written on arrays and the pullback elementwise with the same
scalar formula. Rules with a tuple output (``logabsdet``, ``svd``, ``eigen``) are declared
``unused_cotangent="none"``: ChainRules passes ``ZeroTangent()`` for an unused output, and the pullback takes
``None`` as that zero. Specs are each function's real domain (well-conditioned matrices as in
correct_autograd_linalg.py; ties, zeros and integer quotients drawn on purpose where a rule has a special case there).
A comment above each rule names the file and lines and quotes the formula. Julia is not available here: the
translation was checked against JAX's vjp of the same primal in float64 on 3 random inputs per rule at smooth
points (values and gradients equal to 1e-10 relative, most to a few ulps).

``LABELS`` maps each rule to its source; ``UPSTREAM_FLAWS`` lists the error findings that are real flaws of
ChainRules' rules, with evidence (rem and mod give NaN at x = 0 and wherever |x / y| >= 2^53, det of a triangular
matrix and eigen at repeated eigenvalues 0/0, cumprod, det of a triangular matrix and hypot lose their answer to
subnormal rounding or overflow). Two rules drew false errors until gradguard was fixed (INDEX.md):
``chainrules_cbrt_rrule`` got GG201, GG501 and GG502 at inputs that mix small entries with much larger ones (6.1e-5
next to 7e16, 1.4e-186 next to 3e182), where finite differences stepped across cbrt's vertical tangent at 0 beside
the small entries while the rule agrees with the derivative to 3e-16 (mpmath); and ``chainrules_norminf_rrule`` got a
GG501 in ``called-twice`` at seed 2 (two calls at ties, whose tangents are each an active gradient: the constant
p = inf kept the safety matrix from taking the calls apart).
"""

import numpy as np
import scipy.linalg
from hypothesis import strategies as st

from gradguard import arrays, constant, rrule

CHAINRULES = "JuliaDiff/ChainRules.jl@28425ba"
JULIA = "JuliaLang/julia@0011a4f"


# ----- helpers: Julia's Base and LinearAlgebra written out ---------------------------------------------------


def _pinv_number(x):  # LinearAlgebra: pinv(x::Number) = (xi = inv(x); ifelse(isfinite(xi), xi, zero(xi)))
    with np.errstate(divide="ignore", over="ignore"):
        xi = 1.0 / x
    return xi if np.isfinite(xi) else 0.0


def _sign(x):  # Julia's sign of a real number (0 at 0)
    return np.sign(x)


def _linear_f(x):  # Julia's linear (column-major) order of an array's elements
    return np.ravel(x, order="F")


def _sinpi(x):  # Base.sinpi(::Float64): exact reduction to [-1/4, 1/4]; the kernels written as sin/cos of pi*r
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    n = np.round(2 * ax)
    rx = -0.5 * n + ax
    k = n.astype(np.int64) & 3
    s, c = np.sin(np.pi * rx), np.cos(np.pi * rx)
    res = np.where(k == 0, s, np.where(k == 1, c, np.where(k == 2, 0.0 - s, 0.0 - c)))
    res = np.where(ax >= 2.0 ** 53, 0.0, res)
    return np.where(np.signbit(x), -res, res)


def _cospi(x):  # Base.cospi(::Float64)
    ax = np.abs(np.asarray(x, dtype=np.float64))
    n = np.round(2 * ax)
    rx = -0.5 * n + ax
    k = n.astype(np.int64) & 3
    s, c = np.sin(np.pi * rx), np.cos(np.pi * rx)
    res = np.where(k == 0, c, np.where(k == 1, 0.0 - s, np.where(k == 2, 0.0 - c, s)))
    return np.where(ax >= 2.0 ** 53, 1.0, res)


def _evalpoly_t(x, coeffs):  # Base.evalpoly on a tuple: Horner, muladd written as x * ex + p
    ex = coeffs[-1]
    for c in coeffs[-2::-1]:
        ex = x * ex + c
    return ex


def _sinc(x):  # base/special/trig.jl: _sinc(x::Float64)
    x = np.asarray(x, dtype=np.float64)
    small = _evalpoly_t(x * x, (1.0, -np.pi ** 2 / 6, np.pi ** 4 / 120))
    with np.errstate(divide="ignore", invalid="ignore"):
        big = _sinpi(x) / (np.pi * x)
    return np.where(np.abs(x) < 0.001, small, np.where(np.isinf(x), 0.0, big))


_COSC_F64 = (  # base/special/trig.jl: _cosc_f64 (bounds Float64(Float16(b)))
    (float(np.float16(0.17)), (-3.289868133696453, 3.2469697011333203, -1.1445109446992934, 0.20918277797812262,
                               -0.023460519561502552, 0.001772485141534688)),
    (float(np.float16(0.27)), (-3.289868133695205, 3.246969700970421, -1.1445109360543062, 0.20918254132488637,
                               -0.023457115021035743, 0.0017515112964895303)),
    (float(np.float16(0.34)), (-3.289868133634355, 3.246969697075094, -1.1445108347839286, 0.209181201609773,
                               -0.023448079433318045, 0.001726628430505518)),
    (float(np.float16(0.4)), (-3.289868133074254, 3.2469696736659346, -1.1445104406286049, 0.20917785794416457,
                              -0.02343378376047161, 0.0017019796223768677)),
)


def _cosc_scalar(x):  # base/special/trig.jl: _CosCardinalEvaluationScheme(x) for Float64
    a = abs(x)
    if a <= _COSC_F64[-1][0]:
        for bound, p in _COSC_F64:
            if a <= bound:
                return x * _evalpoly_t(x * x, p)
    if np.isinf(x):
        return 0.0
    pi_x = np.pi * x  # _cosc_generic
    return float((pi_x * _cospi(x) - _sinpi(x)) / (pi_x * x))


def _cosc(x):
    return np.vectorize(_cosc_scalar, otypes=[np.float64])(x)


def _generic_norm2(x):  # LinearAlgebra generic_norm2 (norm2 of an Array shorter than NRM2_CUTOFF = 32)
    v = _linear_f(x)
    maxabs = np.max(np.abs(v))
    if maxabs == 0 or np.isinf(maxabs):
        return maxabs
    with np.errstate(over="ignore", under="ignore"):
        if np.isfinite(len(v) * maxabs * maxabs) and maxabs * maxabs != 0:
            return np.sqrt(np.sum(np.abs(v) ** 2))
        return maxabs * np.sqrt(np.sum((np.abs(v) / maxabs) ** 2))


def _generic_normp(x, p):  # LinearAlgebra generic_normp
    v = _linear_f(x)
    if p > 1 or p < -1:
        maxabs = np.max(np.abs(v)) if p > 1 else np.min(np.abs(v))
        if maxabs == 0 or np.isinf(maxabs):
            return maxabs
    with np.errstate(over="ignore", under="ignore"):
        if -1 <= p <= 1 or (np.isfinite(len(v) * maxabs ** p) and maxabs ** p != 0):
            return np.sum(np.abs(v) ** p) ** (1 / p)
        return maxabs * np.sum((np.abs(v) / maxabs) ** p) ** (1 / p)


def _norm(x, p=2.0):  # LinearAlgebra.norm(itr, p)
    p = float(p)
    if p == 2:
        return np.float64(_generic_norm2(x))
    if p == 1:
        return np.float64(np.sum(np.abs(_linear_f(x))))
    if p == np.inf:
        return np.float64(np.max(np.abs(x)))
    if p == 0:
        return np.float64(np.count_nonzero(x))
    if p == -np.inf:
        return np.float64(np.min(np.abs(x)))
    return np.float64(_generic_normp(x, p))


def _prod_f(v):  # prod over a sequence in order (Base's prod of a short array)
    y = np.float64(1.0)
    for vi in v:
        y = y * vi
    return y


# ===== scalar rules (src/rulesets/Base/fastmath_able.jl, base.jl) applied elementwise =========================


def sin_(x):
    return np.sin(x)


# fastmath_able.jl:12-16  ``sinx, cosx = sincos(x); sin_pullback(Δy) = (NoTangent(), cosx' * Δy)``
@rrule(sin_, arrays(shape=(2, 3), min_value=-100.0, max_value=100.0))
def chainrules_sin_rrule(x):
    sinx, cosx = np.sin(x), np.cos(x)
    return sinx, lambda dy: (np.conj(cosx) * dy,)


def cos_(x):
    return np.cos(x)


# fastmath_able.jl:24-28  ``cos_pullback(Δy) = (NoTangent(), -sinx' * Δy)``
@rrule(cos_, arrays(shape=(2, 3), min_value=-100.0, max_value=100.0))
def chainrules_cos_rrule(x):
    sinx, cosx = np.sin(x), np.cos(x)
    return cosx, lambda dy: (-np.conj(sinx) * dy,)


def tan_(x):
    return np.tan(x)


# fastmath_able.jl:35  ``@scalar_rule tan(x) 1 + Ω ^ 2``
@rrule(tan_, arrays(shape=(2, 3), min_value=-1.5, max_value=1.5))
def chainrules_tan_rrule(x):
    omega = np.tan(x)
    return omega, lambda dy: (dy * (1 + omega ** 2),)


def sinh_(x):
    return np.sinh(x)


# fastmath_able.jl:40  ``@scalar_rule sinh(x) cosh(x)``
@rrule(sinh_, arrays(shape=(2, 3), min_value=-700.0, max_value=700.0))
def chainrules_sinh_rrule(x):
    return np.sinh(x), lambda dy: (dy * np.cosh(x),)


def tanh_(x):
    return np.tanh(x)


# fastmath_able.jl:41  ``@scalar_rule tanh(x) 1 - Ω ^ 2``
@rrule(tanh_, arrays(shape=(2, 3), min_value=-100.0, max_value=100.0))
def chainrules_tanh_rrule(x):
    omega = np.tanh(x)
    return omega, lambda dy: (dy * (1 - omega ** 2),)


def atan2_(y, x):
    return np.arctan2(y, x)


# fastmath_able.jl:49  ``@scalar_rule atan(y, x) @setup(u = x ^ 2 + y ^ 2) (x / u, -y / u)``
@rrule(atan2_, arrays(shape=(2, 3)), arrays(shape=(2, 3)))
def chainrules_atan2_rrule(y, x):
    def pullback(dy):
        u = x ** 2 + y ** 2
        return dy * (x / u), dy * (-y / u)

    return np.arctan2(y, x), pullback


def cbrt_(x):
    return np.cbrt(x)


# fastmath_able.jl:53  ``@scalar_rule cbrt(x) inv(3 * Ω ^ 2)``; x = 0 (infinite slope) left out
@rrule(cbrt_, arrays(shape=(2, 3), elements=st.floats(-1e300, 1e300).filter(lambda v: v != 0)))
def chainrules_cbrt_rrule(x):
    omega = np.cbrt(x)
    return omega, lambda dy: (dy * (1 / (3 * omega ** 2)),)


def sqrt_(x):
    return np.sqrt(x)


# fastmath_able.jl:55  ``@scalar_rule sqrt(x) inv(2Ω)  # gradient +Inf at x==0``
@rrule(sqrt_, arrays(shape=(2, 3), min_value=1e-300, max_value=1e300))
def chainrules_sqrt_rrule(x):
    omega = np.sqrt(x)
    return omega, lambda dy: (dy * (1 / (2 * omega)),)


def exp_(x):
    return np.exp(x)


# fastmath_able.jl:56  ``@scalar_rule exp(x) Ω``
@rrule(exp_, arrays(shape=(2, 3), min_value=-700.0, max_value=700.0))
def chainrules_exp_rrule(x):
    omega = np.exp(x)
    return omega, lambda dy: (dy * omega,)


def expm1_(x):
    return np.expm1(x)


# fastmath_able.jl:59  ``@scalar_rule expm1(x) exp(x)``
@rrule(expm1_, arrays(shape=(2, 3), min_value=-700.0, max_value=700.0))
def chainrules_expm1_rrule(x):
    return np.expm1(x), lambda dy: (dy * np.exp(x),)


def log_(x):
    return np.log(x)


# fastmath_able.jl:60  ``@scalar_rule log(x) inv(x)``
@rrule(log_, arrays(shape=(2, 3), min_value=1e-300, max_value=1e300))
def chainrules_log_rrule(x):
    return np.log(x), lambda dy: (dy * (1 / x),)


def log1p_(x):
    return np.log1p(x)


# fastmath_able.jl:62  ``@scalar_rule log1p(x) inv(x + 1)``
@rrule(log1p_, arrays(shape=(2, 3), min_value=-0.999999, max_value=1e300))
def chainrules_log1p_rrule(x):
    return np.log1p(x), lambda dy: (dy * (1 / (x + 1)),)


def log2_(x):
    return np.log2(x)


_LOGTWO = float(np.log(2.0))  # Base.MathConstants: Float64(logtwo)


# fastmath_able.jl:63  ``@scalar_rule log2(x) inv(logtwo * x)``
@rrule(log2_, arrays(shape=(2, 3), min_value=1e-300, max_value=1e300))
def chainrules_log2_rrule(x):
    return np.log2(x), lambda dy: (dy * (1 / (_LOGTWO * x)),)


def abs_(x):
    return np.abs(x)


# fastmath_able.jl:74-81  ``signx = x isa Real ? sign(x) : x / ifelse(iszero(x), one(Ω), Ω);
# return (NoTangent(), signx * real(ΔΩ))``
@rrule(abs_, arrays(shape=(2, 3)))
def chainrules_abs_rrule(x):
    omega = np.abs(x)
    return omega, lambda dy: (_sign(x) * np.real(dy),)


# the same on complex numbers (the ``x / ifelse(iszero(x), one(Ω), Ω)`` branch)
@rrule(abs_, arrays(shape=(2, 3), dtype="complex128"), name="chainrules_abs_complex_rrule")
def chainrules_abs_complex_rrule(x):
    omega = np.abs(x)

    def pullback(dy):
        signx = x / np.where(x == 0, 1.0, omega)
        return (signx * np.real(dy),)

    return omega, pullback


def hypot_(x, y):
    return np.hypot(x, y)


# fastmath_able.jl:158-165  ``Ω = hypot(x, y); c = real(ΔΩ) / ifelse(iszero(Ω), one(Ω), Ω);
# return (NoTangent(), c * x, c * y)``
@rrule(hypot_, arrays(shape=(2, 3)), arrays(shape=(2, 3)))
def chainrules_hypot_rrule(x, y):
    omega = np.hypot(x, y)

    def pullback(dy):
        c = np.real(dy) / np.where(omega == 0, 1.0, omega)
        return c * x, c * y

    return omega, pullback


def pow_(x, p):
    return x ** p


def _pow_grad_x(x, p, y):  # fastmath_able.jl:322-332 (x::Real, p::Real), elementwise
    return np.where((x != 0) | (p < 0), p * y / np.where(x != 0, x, 1.0),
                    np.where(p == 1, 1.0, np.where((p == 0) | (p > 1), 0.0, np.inf)))


def _pow_grad_p(x, p, y):  # fastmath_able.jl:335-343 (x::Real, p::Real), elementwise
    with np.errstate(divide="ignore", invalid="ignore"):
        logx = np.real(np.log(x.astype(np.complex128)))
    return np.where(x != 0, y * logx, np.where(p > 0, 0.0, np.nan))


# fastmath_able.jl:196-210  ``_dx = _pow_grad_x(x, p, float(y)); (NoTangent(), project_x(conj(_dx) * dy),
# @thunk project_p(conj(_pow_grad_p(x, p, float(y))) * dy))``; elementwise ``x .^ p`` (broadcast.jl path 4 calls
# this rrule per element). x > 0 with a real exponent
@rrule(pow_, arrays(shape=(2, 3), min_value=1e-3, max_value=100.0), arrays(shape=(2, 3), min_value=-3.0, max_value=3.0))
def chainrules_pow_rrule(x, p):
    y = x ** p

    def pullback(dy):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.conj(_pow_grad_x(x, p, y)) * dy, np.conj(_pow_grad_p(x, p, y)) * dy

    return y, pullback


# the same on x >= 0 with p >= 1, where _pow_grad_x and _pow_grad_p take their x == 0 branches
@rrule(pow_, arrays(shape=(2, 3), min_value=0.0, max_value=10.0), arrays(shape=(2, 3), min_value=1.0, max_value=3.0),
       name="chainrules_pow_nonneg_rrule")
def chainrules_pow_nonneg_rrule(x, p):
    y = x ** p

    def pullback(dy):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.conj(_pow_grad_x(x, p, y)) * dy, np.conj(_pow_grad_p(x, p, y)) * dy

    return y, pullback


def rem_(x, y):
    return np.fmod(x, y)


_TIES = [-4.0, -3.0, -1.5, -1.0, 0.0, 1.0, 1.5, 2.0, 3.0, 4.5]
_DIVISOR = st.one_of(st.sampled_from([-1.5, -1.0, 1.0, 1.5, 2.0]), st.floats(-10.0, 10.0).filter(lambda v: v != 0))


# fastmath_able.jl:213-217  ``@scalar_rule(rem(x, y), @setup((u, nan) = promote(x / y, NaN16),
# isint = isinteger(x / y)), (ifelse(isint, nan, one(u)), ifelse(isint, nan, -trunc(u))))``
@rrule(rem_, arrays(shape=(2, 3), elements=st.one_of(st.sampled_from(_TIES), st.floats(-10.0, 10.0))),
       arrays(shape=(2, 3), elements=_DIVISOR))
def chainrules_rem_rrule(x, y):
    def pullback(dy):
        u = x / y
        isint = np.isfinite(u) & (u == np.trunc(u))
        return dy * np.where(isint, np.nan, 1.0), dy * np.where(isint, np.nan, -np.trunc(u))

    return np.fmod(x, y), pullback


def mod_(x, y):  # Base.mod(x::T, y::T) where T<:AbstractFloat
    r = np.fmod(x, y)
    return np.where(r == 0, np.copysign(r, y), np.where((r > 0) ^ (y > 0), r + y, r))


# base.jl:158-162  ``@scalar_rule(mod(x, y), @setup((u, nan) = promote(x / y, NaN16), isint = isinteger(x / y)),
# (ifelse(isint, nan, one(u)), ifelse(isint, nan, -floor(u))))``
@rrule(mod_, arrays(shape=(2, 3), elements=st.one_of(st.sampled_from(_TIES), st.floats(-10.0, 10.0))),
       arrays(shape=(2, 3), elements=_DIVISOR))
def chainrules_mod_rrule(x, y):
    def pullback(dy):
        u = x / y
        isint = np.isfinite(u) & (u == np.trunc(u))
        return dy * np.where(isint, np.nan, 1.0), dy * np.where(isint, np.nan, -np.floor(u))

    return mod_(x, y), pullback


def max_(x, y):
    return np.maximum(x, y)


# fastmath_able.jl:219  ``@scalar_rule max(x, y) @setup(gt = x > y) (gt, !gt)``; ties drawn on purpose
@rrule(max_, arrays(shape=(2, 3), elements=st.sampled_from([-1.0, 0.0, 0.5, 2.0])),
       arrays(shape=(2, 3), elements=st.sampled_from([-1.0, 0.0, 0.5, 2.0])))
def chainrules_max_rrule(x, y):
    def pullback(dy):
        gt = x > y
        return dy * gt, dy * ~gt

    return np.maximum(x, y), pullback


def deg2rad_(x):
    return x * (np.pi / 180)


# base.jl:164  ``@scalar_rule deg2rad(x) deg2rad(one(x))``
@rrule(deg2rad_, arrays(shape=(2, 3), min_value=-1e6, max_value=1e6))
def chainrules_deg2rad_rrule(x):
    return x * (np.pi / 180), lambda dy: (dy * (1.0 * (np.pi / 180)),)


def acosh_(x):
    return np.arccosh(x)


# base.jl:170  ``@scalar_rule acosh(x) inv(sqrt(x - 1) * sqrt(x + 1))``
@rrule(acosh_, arrays(shape=(2, 3), min_value=1.000001, max_value=1e300))
def chainrules_acosh_rrule(x):
    return np.arccosh(x), lambda dy: (dy * (1 / (np.sqrt(x - 1) * np.sqrt(x + 1))),)


def asinh_(x):
    return np.arcsinh(x)


# base.jl:175  ``@scalar_rule asinh(x) inv(sqrt(x ^ 2 + 1))``
@rrule(asinh_, arrays(shape=(2, 3), min_value=-1e300, max_value=1e300))
def chainrules_asinh_rrule(x):
    def pullback(dy):
        with np.errstate(over="ignore"):
            return (dy * (1 / np.sqrt(x ** 2 + 1)),)

    return np.arcsinh(x), pullback


def atanh_(x):
    return np.arctanh(x)


# base.jl:176  ``@scalar_rule atanh(x) inv(1 - x ^ 2)``
@rrule(atanh_, arrays(shape=(2, 3), min_value=-0.999999, max_value=0.999999))
def chainrules_atanh_rrule(x):
    return np.arctanh(x), lambda dy: (dy * (1 / (1 - x ** 2)),)


def sinc_(x):
    return _sinc(x)


# base.jl:210  ``@scalar_rule sinc(x) cosc(x)``; Julia's sinc and cosc for Float64 as JuliaLang/julia@0011a4f
# base/special/trig.jl has them (cosc: a minimax polynomial for |x| <= 0.4, else ((πx)cospi(x) - sinpi(x))/((πx)x))
@rrule(sinc_, arrays(shape=(2, 3)))
def chainrules_sinc_rrule(x):
    return _sinc(x), lambda dy: (dy * _cosc(x),)


def clamp_(x, lo, hi):  # Base.clamp(x, lo, hi) = ifelse(x > hi, hi, ifelse(x < lo, lo, x))
    return np.where(x > hi, hi, np.where(x < lo, lo, x))


# base.jl:215-222  ``@scalar_rule(clamp(x, low, high), @setup(islow = x < low, ishigh = high < x),
# (!(islow | ishigh), islow, ishigh))``; x meets the bounds on purpose
@rrule(clamp_, arrays(shape=(2, 3), elements=st.one_of(st.sampled_from([-2.0, -1.0, 1.0, 2.0]), st.floats(-3.0, 3.0))),
       arrays(shape=(2, 3), elements=st.one_of(st.sampled_from([-2.0, -1.0]), st.floats(-2.0, -0.5))),
       arrays(shape=(2, 3), elements=st.one_of(st.sampled_from([1.0, 2.0]), st.floats(0.5, 2.0))))
def chainrules_clamp_rrule(x, lo, hi):
    def pullback(dy):
        islow = x < lo
        ishigh = hi < x
        return dy * ~(islow | ishigh), dy * islow, dy * ishigh

    return clamp_(x, lo, hi), pullback


# ===== reductions (src/rulesets/Base/mapreduce.jl, array.jl) ===================================================


def sum_dims2_(x):  # sum(x; dims=2): Julia keeps the reduced dimension
    return np.sum(x, axis=1, keepdims=True)


# mapreduce.jl:28-47  ``@thunk project(_unsum(x, dy, dims))``; ``_unsum(x, dy, dims) = broadcast(last∘tuple, x, dy)``
@rrule(sum_dims2_, arrays(shape=(2, 3)))
def chainrules_sum_dims_rrule(x):
    return np.sum(x, axis=1, keepdims=True), lambda dy: (np.broadcast_to(dy, x.shape).copy(),)


def prod_(x):  # prod(x): the product in Julia's linear order
    return _prod_f(_linear_f(x))


def _nabla_prod(x, dy, y):  # mapreduce.jl:292-322  ∇prod, ∇prod!, ∇prod_one_zero!
    dx = np.zeros(x.shape, dtype=np.result_type(x, dy))
    numzero = np.count_nonzero(x == 0) if y == 0 else 0
    if numzero == 0:  # This can happen while y==0, if there are several small xs
        dx += np.conj(y / x) * dy
    elif numzero == 1:
        i_zero = None
        p_rest = np.float64(1.0)
        xf = _linear_f(x)
        for i, xi in enumerate(xf):
            p_rest = p_rest * (1.0 if xi == 0 else np.conj(xi))
            i_zero = i if xi == 0 else i_zero
        dxf = _linear_f(dx).copy()
        dxf[i_zero] += p_rest * dy
        dx = dxf.reshape(x.shape, order="F")
    return dx  # numzero > 1: all first derivatives are zero


# mapreduce.jl:244-273 (dims=:)  ``∇prod(x, dy, y)``: ``numzero = iszero(y) ? count(iszero, x) : 0``; no zero:
# ``conj.(y ./ x) .* dy``; one zero: the product of the others at it; more: zeros. Zeros drawn on purpose
@rrule(prod_, arrays(shape=(2, 3), elements=st.one_of(st.just(0.0), st.floats(-3.0, 3.0))))
def chainrules_prod_rrule(x):
    y = prod_(x)
    return y, lambda dy: (_nabla_prod(x, dy, y),)


def prod_dims1_(x):  # prod(x; dims=1)
    return np.array([[_prod_f(x[:, j]) for j in range(x.shape[1])]])


# mapreduce.jl:244-290 (dims=1)  ``elseif any(iszero, x): ∇prod_dims(vald, x, dy, y)`` (∇prod! on each slice
# ``x[:, j]`` with ``dy[1, j]``, ``y[1, j]``) ``else conj.(y ./ x) .* dy``
@rrule(prod_dims1_, arrays(shape=(3, 2), elements=st.one_of(st.just(0.0), st.floats(-3.0, 3.0))))
def chainrules_prod_dims_rrule(x):
    y = prod_dims1_(x)

    def pullback(dy):
        if np.any(x == 0):
            dx = np.zeros(x.shape, dtype=np.result_type(x, dy))
            for j in range(x.shape[1]):
                dx[:, j] += _nabla_prod(x[:, j], dy[0, j], y[0, j])
            return (dx,)
        return (np.conj(y / x) * dy,)

    return y, pullback


def cumsum_dims1_(x):
    return np.cumsum(x, axis=0)


# mapreduce.jl:220-238  ``step1 = reverse(dy; dims=dims); step2 = cumsum(step1; dims); step3 = reverse(step2; dims)``
@rrule(cumsum_dims1_, arrays(shape=(3, 2)))
def chainrules_cumsum_rrule(x):
    def pullback(dy):
        step1 = np.flip(dy, axis=0)
        step2 = np.cumsum(step1, axis=0)
        step3 = np.flip(step2, axis=0)
        return (step3,)

    return np.cumsum(x, axis=0), pullback


def cumprod_(x):
    out = np.empty_like(x)
    acc = np.float64(1.0)
    for k in range(len(x)):
        acc = acc * x[k] if k else x[k]
        out[k] = acc
    return out


# mapreduce.jl:328-349, 392-417  ∇cumprod!: ``z = something(findfirst(iszero, x), hi+1); acc = 0;
# for k in z-1:-1:lo: acc += y[k] * dy[k]; dx[k] += acc / x[k]``; at the first zero ``yk = z==1 ? 1 : y[z-1];
# dx[z] += yk * dy[z]; for k in z+1:hi: yk *= x[k]; dx[z] += yk * dy[k]``. Zeros drawn on purpose
@rrule(cumprod_, arrays(shape=(5,), elements=st.one_of(st.just(0.0), st.floats(-3.0, 3.0))))
def chainrules_cumprod_rrule(x):
    y = cumprod_(x)

    def pullback(dy):
        n = len(x)
        dx = np.zeros(x.shape, dtype=np.result_type(x, dy))
        zeros = np.flatnonzero(x == 0)
        z = int(zeros[0]) if len(zeros) else n  # 0-based; n plays hi + 1
        acc = np.zeros((), dtype=dy.dtype)[()]
        for k in range(z - 1, -1, -1):
            acc = acc + y[k] * dy[k]
            dx[k] += acc / x[k]
        if z != n:
            yk = 1.0 if z == 0 else y[z - 1]
            dx[z] += yk * dy[z]
            for k in range(z + 1, n):
                yk = yk * x[k]
                dx[z] += yk * dy[k]
        return (dx,)

    return y, pullback


def maximum_dims2_(x):  # maximum(x; dims=2)
    return np.max(x, axis=1, keepdims=True)


# array.jl:536-540 with 519-526  ``(y, _), back = rrule(findmax, x; dims=dims)``; findmax's pullback
# ``thunked_∇getindex(x, dy, ind)``: dy at the first maximal index of each row, zero elsewhere. Ties on purpose
@rrule(maximum_dims2_, arrays(shape=(3, 4), elements=st.sampled_from([-1.0, 0.0, 1.5, 3.0])))
def chainrules_maximum_dims_rrule(x):
    ind = np.argmax(x, axis=1)  # the first maximal element, as findmax

    def pullback(dy):
        dx = np.zeros(x.shape, dtype=np.result_type(x, dy))
        dx[np.arange(x.shape[0]), ind] += dy[:, 0]
        return (dx,)

    return np.max(x, axis=1, keepdims=True), pullback


def minimum_(x):
    return np.min(x)


# array.jl:547-551 with 519-526  ``(y, _), back = rrule(findmin, x; dims=:)``: dy at findmin's index, the first
# minimal element in Julia's linear (column-major) order. Ties on purpose
@rrule(minimum_, arrays(shape=(3, 4), elements=st.sampled_from([-1.0, 0.0, 1.5, 3.0])))
def chainrules_minimum_rrule(x):
    lin = int(np.argmin(_linear_f(x)))
    ind = np.unravel_index(lin, x.shape, order="F")

    def pullback(dy):
        dx = np.zeros(x.shape, dtype=np.result_type(x, dy))
        dx[ind] += dy
        return (dx,)

    return np.min(x), pullback


# ===== array functions (src/rulesets/Base/arraymath.jl, array.jl, evalpoly.jl; LinearAlgebra/dense.jl) ========


def matmul_(A, B):
    return A @ B


# arraymath.jl:47-65 (StridedMatrix)  ``dA = Ȳ * B'; dB = A' * Ȳ``
@rrule(matmul_, arrays(shape=(2, 3)), arrays(shape=(3, 4)))
def chainrules_matmul_rrule(A, B):
    return A @ B, lambda dY: (dY @ B.conj().T, A.conj().T @ dY)


# the same with a vector on the right (StridedVecOrMat): ``Ȳ * B'`` is the outer product
@rrule(matmul_, arrays(shape=(3, 4)), arrays(shape=(4,)), name="chainrules_matvec_rrule")
def chainrules_matvec_rrule(A, B):
    return A @ B, lambda dY: (np.outer(dY, B.conj()), A.conj().T @ dY)


def dot_(x, y):
    return np.vdot(x, y)


# dense.jl:9-19  ``x̄ = reshape(y .* ΔΩ', axes(x)); ȳ = reshape(x .* ΔΩ, axes(y))`` (dot conjugates x)
@rrule(dot_, arrays(shape=(4,), dtype="complex128"), arrays(shape=(4,), dtype="complex128"))
def chainrules_dot_complex_rrule(x, y):
    return np.vdot(x, y), lambda dO: ((y * np.conj(dO)).reshape(x.shape), (x * dO).reshape(y.shape))


def permutedims_(x, perm):  # Julia's 1-based perm; permutedims allocates a new array
    return np.transpose(x, tuple(p - 1 for p in perm)).copy()


# array.jl:154-159  ``permutedims_back_2(dy) = (NoTangent(), pr(permutedims(unthunk(dy), invperm(perm))), NoTangent())``
@rrule(permutedims_, arrays(shape=(2, 3, 4)), constant((3, 1, 2)))
def chainrules_permutedims_rrule(x, perm):
    def pullback(dy):
        inv = np.argsort([p - 1 for p in perm])  # invperm, 0-based
        return np.transpose(dy, tuple(inv)), None

    return permutedims_(x, perm), pullback


def repeat_(x, counts):  # repeat(x, counts...)
    return np.tile(x, counts)


# array.jl:198-210  ``size2ndims = ntuple(d -> isodd(d) ? get(S, 1+d÷2, 1) : get(counts, d÷2, 1), 2*ndims(dY));
# reduced = sum(reshape(dY, size2ndims); dims = ntuple(d -> 2d, ndims(dY))); x̄ = project_Xs(reshape(reduced, S))``
# (Julia's reshape is column-major)
@rrule(repeat_, arrays(shape=(2, 3)), constant((2, 3)))
def chainrules_repeat_rrule(x, counts):
    S = x.shape

    def pullback(dy):
        nd = dy.ndim
        size2ndims = tuple((S[d // 2] if d // 2 < len(S) else 1) if d % 2 == 0 else
                           (counts[d // 2] if d // 2 < len(counts) else 1) for d in range(2 * nd))
        reduced = np.sum(dy.reshape(size2ndims, order="F"), axis=tuple(2 * d + 1 for d in range(nd)), keepdims=True)
        return reduced.reshape(S, order="F"), None

    return np.tile(x, counts), pullback


def reshape_(A, dims):  # reshape(A, dims...): column-major
    return np.reshape(A, dims, order="F")


# array.jl:108-114  ``reshape_pullback(Ȳ) = (NoTangent(), project(reshape(Ȳ, ax)), ∂dims...)``
@rrule(reshape_, arrays(shape=(2, 3, 2)), constant((3, 4)))
def chainrules_reshape_rrule(A, dims):
    return np.reshape(A, dims, order="F"), lambda dY: (np.reshape(dY, A.shape, order="F"), None)


def evalpoly_(x, p):  # Base.evalpoly(x, p::AbstractVector): Horner, muladd written as x * ex + p[i]
    ex = p[-1]
    for i in range(len(p) - 2, -1, -1):
        ex = x * ex + p[i]
    return np.asarray(ex)


# evalpoly.jl:14-23, 62-72, 77-81, 131-149  ``ys[1] = p[N]; ys[i] = muladd(x, ys[i - 1], p[N - i + 1])``;
# pullback ``∂yi = Δy; ∂p[1] = ∂yi; ∂x = conj(dot(∂yi, ys[N-1])); ∂yi = x' * ∂yi;
# for i in 2:N-1: ∂x = conj(dot(∂yi, ys[N-i])) + ∂x; ∂p[i] = ∂yi; ∂yi = x' * ∂yi; end; ∂p[N] = ∂yi``
@rrule(evalpoly_, arrays(shape=(), min_value=-3.0, max_value=3.0), arrays(shape=(4,)))
def chainrules_evalpoly_rrule(x, p):
    N = len(p)
    ys = [None] * (N - 1)
    ys[0] = 1.0 * p[N - 1]
    for i in range(2, N):
        ys[i - 1] = x * ys[i - 2] + p[N - i]
    y = np.asarray(x * ys[N - 2] + p[0])

    def pullback(dy):
        xc = np.conj(x)
        dyi = 1.0 * dy
        dp = np.zeros(p.shape, dtype=np.result_type(p, dy))
        dp1 = dyi
        dx = np.conj(np.conj(dyi) * ys[N - 2])
        dyi = xc * dyi
        dp[0] = dp1
        for i in range(2, N):
            dx = np.conj(np.conj(dyi) * ys[N - i - 1]) + dx
            dp[i - 1] = dyi
            dyi = xc * dyi
        dp[N - 1] = dyi
        return np.asarray(dx), dp

    return y, pullback


# ===== linear algebra (src/rulesets/LinearAlgebra/) ===========================================================

# square matrices away from singular ones: a random part plus a dominant diagonal (as correct_autograd_linalg.py)
_square3 = arrays(shape=(3, 3), min_value=-1.0, max_value=1.0).map(lambda a: a + 4.0 * np.eye(3))
# the same with a negative determinant
_square3_neg = arrays(shape=(3, 3), min_value=-1.0, max_value=1.0).map(lambda a: a + 4.0 * np.diag([1.0, 1.0, -1.0]))
# full column rank 4x2 matrices
_tall42 = arrays(shape=(4, 2), min_value=-1.0, max_value=1.0).map(lambda a: a + 3.0 * np.eye(4, 2))
# 4x3 matrices with singular values near 6, 4 and 2 (distinct and nonzero: where the SVD is differentiable)
_tall43 = arrays(shape=(4, 3), min_value=-1.0, max_value=1.0).map(
    lambda a: a + np.vstack([np.diag([6.0, 4.0, 2.0]), np.zeros((1, 3))]))


def det_(x):
    return np.linalg.det(x)


# dense.jl:129-136  ``∂x = x isa Number ? ΔΩ : inv(x)' * dot(Ω, ΔΩ)``
@rrule(det_, _square3)
def chainrules_det_rrule(x):
    omega = np.linalg.det(x)
    return omega, lambda dO: (np.linalg.inv(x).conj().T * (np.conj(omega) * dO),)


def logdet_(x):
    sign, logabs = np.linalg.slogdet(x)
    return logabs if sign > 0 else np.nan  # Julia: DomainError for a negative determinant


# dense.jl:147-154  ``∂x = x isa Number ? ΔΩ / x' : ΔΩ * inv(x)'``
@rrule(logdet_, arrays(shape=(3, 3), structure="psd"))
def chainrules_logdet_rrule(x):
    return logdet_(x), lambda dO: (dO * np.linalg.inv(x).conj().T,)


def logabsdet_(x):
    sign, logabs = np.linalg.slogdet(x)
    return (logabs, sign)


# dense.jl:170-182  ``(Δy, Δsigny) = ΔΩ; (_, signy) = Ω; f = signy' * Δsigny; imagf = f - real(f);
# g = real(Δy) + imagf; ∂x = g * inv(x)'`` (a ZeroTangent for an unused output is taken as None)
@rrule(logabsdet_, _square3_neg, unused_cotangent="none")
def chainrules_logabsdet_rrule(x):
    omega = logabsdet_(x)

    def pullback(dO):
        if dO is None:
            return (None,)
        dy, dsigny = dO
        dy = 0.0 if dy is None else dy
        dsigny = 0.0 if dsigny is None else dsigny
        signy = omega[1]
        f = np.conj(signy) * dsigny
        imagf = f - np.real(f)
        g = np.real(dy) + imagf
        return (g * np.linalg.inv(x).conj().T,)

    return omega, pullback


def inv_(x):
    return np.linalg.inv(x)


# arraymath.jl:10-16  ``Ω = inv(x); inv_pullback(ΔΩ) = NoTangent(), -Ω' * ΔΩ * Ω'``
@rrule(inv_, _square3)
def chainrules_inv_rrule(x):
    omega = np.linalg.inv(x)
    return omega, lambda dO: (-omega.conj().T @ dO @ omega.conj().T,)


def ldiv_(A, B):  # A \ B: LU for square A, the minimum-norm least-squares solution (pivoted QR) otherwise
    if A.shape[0] == A.shape[1]:
        return np.linalg.solve(A, B)
    return np.linalg.lstsq(A, B, rcond=None)[0]


def _ldiv_pullback(A, B, Y):  # arraymath.jl:346-388
    def pullback(dY):
        Bbar = ldiv_(A.conj().T, dY)                       # B̄ = A' \ Ȳ
        Abar = -Bbar @ Y.conj().T                           # Ā = -B̄ * Y'
        t = (B - A @ Y) @ Bbar.conj().T                     # t = (B - A * Y) * B̄'
        Abar = Abar + ldiv_(A, t.conj().T).conj().T         # Ā = add!!(Ā, t / A')
        Abar = Abar + ldiv_(A.conj().T, Y) @ (dY.conj().T - Bbar.conj().T @ A)  # Ā = add!!(Ā, A' \ Y * (Ȳ' - B̄'A))
        dB = ldiv_(A.conj().T, dY)                          # ∂B = A' \ Ȳ
        return Abar, dB

    return pullback


# arraymath.jl:346-388  ``B̄ = A' \ Ȳ; Ā = -B̄ * Y'; t = (B - A * Y) * B̄'; Ā = add!!(Ā, t / A');
# Ā = add!!(Ā, A' \ Y * (Ȳ' - B̄'A)); ∂B = A' \ Ȳ`` (X / A' solved as (A \ X')')
@rrule(ldiv_, _square3, arrays(shape=(3, 2)))
def chainrules_ldiv_rrule(A, B):
    Y = ldiv_(A, B)
    return Y, _ldiv_pullback(A, B, Y)


# the same with a tall A: a least-squares solve, where the two correction terms do not vanish
@rrule(ldiv_, _tall42, arrays(shape=(4, 3)), name="chainrules_ldiv_lstsq_rrule")
def chainrules_ldiv_lstsq_rrule(A, B):
    Y = ldiv_(A, B)
    return Y, _ldiv_pullback(A, B, Y)


def tr_(x):
    return np.trace(x)


# dense.jl:192-200  ``tr_pullback(ΔΩ) = (NoTangent(), Diagonal(fill(ΔΩ, d)))``
@rrule(tr_, arrays(shape=(3, 3)))
def chainrules_tr_rrule(x):
    d = x.shape[0]
    return np.trace(x), lambda dO: (np.diag(np.full(d, dO)),)


def norm2_(x):
    return _norm(x)


# norm.jl:63-84, 241-244  ``_norm2_back(x, y, Δy) = x .* (real(Δy) * pinv(y))``
@rrule(norm2_, arrays(shape=(2, 3)))
def chainrules_norm2_rrule(x):
    y = _norm(x)
    return y, lambda dy: (x * (np.real(dy) * _pinv_number(y)),)


def norm_p_(x, p):
    return _norm(x, p)


def _norm_p_dx(x, p, y, dy):  # norm.jl:42-54, the out-of-place branches
    if x.size == 0 or p == 0:
        return np.zeros_like(x)  # zero.(x) .* (zero(y) * zero(real(Δy)))
    if p == 2:
        return x * (np.real(dy) * _pinv_number(y))                 # _norm2_back
    if p == 1:
        return _sign(x) * np.real(dy)                              # _norm1_back
    if p == np.inf or p == -np.inf:
        return _normInf_back(x, y, dy)
    return _normp_back_x(x, p, y, dy)


def _normInf_back(x, y, dy):  # norm.jl:178-189: the last index whose norm(xi) == y gets sign(x[yind]) * Δu
    du = np.real(dy)
    dx = np.zeros(x.shape, dtype=np.result_type(x, du))
    hits = np.flatnonzero(np.abs(_linear_f(x)) == y)
    if len(hits) == 0:
        raise ValueError("y is not the correct norm of x")
    ind = np.unravel_index(int(hits[-1]), x.shape, order="F")
    dx[ind] = _sign(x[ind]) * du
    return dx


def _normp_back_x(x, p, y, dy):  # norm.jl:129-137
    c = np.real(dy) / y
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = np.abs(x)
        dxi = x * ((a / y) ** (p - 2) * c)
    return np.where(np.isfinite(dxi), dxi, 0.0)  # ifelse(isfinite(∂xi), ∂xi, zero(∂xi))


def _normp_back_p(x, p, y, dy):  # norm.jl:149-158
    if not (y > 0 and np.isfinite(y) and p != 0):
        return 0.0  # zero(real(Δy)) * zero(y) / one(p)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = np.abs(x)
        c = (a / y) ** (p - 1) * a * np.log(a)
        s = np.sum(np.where(np.isfinite(c), c, 0.0))  # ifelse(isfinite(c), c, zero(c))
    return np.real(dy) * (s - y * np.log(y)) / p


# norm.jl:22-61  ``∂x``: p == 2: ``_norm2_back``; p == 1: ``_norm1_back`` (``sign.(x) .* real(Δy)``); p == ±Inf:
# ``_normInf_back``; else ``_normp_back_x``. p = 1 here, a fixed argument (its ∂p thunk is never asked for)
@rrule(norm_p_, arrays(shape=(2, 3)), constant(1.0), name="chainrules_norm1_rrule")
def chainrules_norm1_rrule(x, p):
    y = _norm(x, p)
    return y, lambda dy: (_norm_p_dx(x, p, y, dy), None)


# the same with p = Inf: ``_normInf_back``, the last entry of largest magnitude (ties drawn on purpose)
@rrule(norm_p_, arrays(shape=(2, 3), elements=st.sampled_from([-2.0, -1.0, 0.0, 1.0, 2.0])), constant(np.inf),
       name="chainrules_norminf_rrule")
def chainrules_norminf_rrule(x, p):
    y = _norm(x, p)
    return y, lambda dy: (_norm_p_dx(x, p, y, dy), None)


def norm_pp_(x, p):  # norm(x, p) with a differentiable p
    return _norm(x, float(p))


# the same with a differentiable p in [1.5, 4]: ``∂x`` as above, ``∂p = _normp_back_p(x, p, y, Δy)``:
# ``s = sum((a / y)^(p - 1) * a * log(a)) (non-finite terms 0); ∂p = real(Δy) * (s - y * log(y)) / p``
@rrule(norm_pp_, arrays(shape=(2, 3)), arrays(shape=(), min_value=1.5, max_value=4.0), name="chainrules_normp_rrule")
def chainrules_normp_rrule(x, p):
    pf = float(p)
    y = _norm(x, pf)

    def pullback(dy):
        return _norm_p_dx(x, pf, y, dy), np.asarray(_normp_back_p(x, pf, y, dy))

    return y, pullback


def _normalize_bang(a, nrm):  # LinearAlgebra.__normalize!(a, nrm)
    delta = 1.0 / np.nextafter(np.inf, 0.0)  # inv(prevfloat(typemax(nrm)))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if nrm >= delta:  # Safe to multiply with inverse
            return a * (1.0 / nrm)
        epsdelta = np.finfo(np.float64).eps / delta  # scale elements to avoid overflow
        return (a * epsdelta) * (1.0 / (nrm * epsdelta))


def normalize_(x):
    return _normalize_bang(x.copy(), _generic_norm2(x))


# norm.jl:276-288  ``nrm = LinearAlgebra.norm2(x); y = __normalize!(copy(x), nrm);
# ∂x = (Δy .- realdot(y, Δy) .* y) .* pinv(nrm)``
@rrule(normalize_, arrays(shape=(2, 3)))
def chainrules_normalize_rrule(x):
    nrm = _generic_norm2(x)
    y = _normalize_bang(x.copy(), nrm)

    def pullback(dy):
        realdot = np.real(np.vdot(y, dy))
        return ((dy - realdot * y) * _pinv_number(nrm),)

    return y, pullback


def pinv_(A):
    return np.linalg.pinv(A)


# dense.jl:293-311 (m > n)  ``∂A = Y' * (-ΔY * Y'); ∂A = add!!(∂A, Y' * (Y * ΔY') * (I - Y * A));
# ∂A = add!!(∂A, (ΔY' - A * (Y * ΔY')) * (Y * Y'))``
@rrule(pinv_, _tall42)
def chainrules_pinv_rrule(A):
    Y = np.linalg.pinv(A)

    def pullback(dY):
        m, n = A.shape
        Yh, dYh = Y.conj().T, dY.conj().T
        if m <= n:
            dA = (Yh @ -dY) @ Yh
            dA = dA + (Yh @ Y) @ (dYh - (dYh @ Y) @ A)
            dA = dA + (np.eye(m) - A @ Y) @ (dYh @ Y) @ Yh
        else:
            dA = Yh @ (-dY @ Yh)
            dA = dA + Yh @ (Y @ dYh) @ (np.eye(n) - Y @ A)
            dA = dA + (dYh - A @ (Y @ dYh)) @ (Y @ Yh)
        return (dA,)

    return Y, pullback


def cholesky_upper_(A):  # cholesky(A).U: LAPACK potrf('U') reads the upper triangle of the (exactly symmetric) A
    S = np.triu(A) + np.triu(A, 1).conj().T
    return np.linalg.cholesky(S).conj().T


# factorization.jl:507-521, 523-544, 546-565  ``C.U``'s pullback gives ``factors = UpperTriangular(Ȳ)``;
# ``Ū = real(UpperTriangular(Δfactors)); mul!(Ā, Ū, U'); copytri!(Ā, 'U', true); ldiv!(U, Ā); rdiv!(Ā, U')``;
# then ``Ā[idx] .= real.(Ā[idx]) ./ 2; UpperTriangular(Ā)``
@rrule(cholesky_upper_, arrays(shape=(3, 3), structure="psd"))
def chainrules_cholesky_rrule(A):
    U = cholesky_upper_(A)

    def pullback(dU):
        Ubar = np.real(np.triu(dU))
        Abar = Ubar @ U.conj().T
        Abar = np.triu(Abar) + np.triu(Abar, 1).conj().T     # copytri!(Ā, 'U', true)
        Abar = scipy.linalg.solve_triangular(U, Abar, lower=False)             # ldiv!(U, Ā)
        Abar = scipy.linalg.solve_triangular(U, Abar.conj().T, lower=False).conj().T  # rdiv!(Ā, U')
        idx = np.diag_indices(Abar.shape[0])
        Abar[idx] = np.real(Abar[idx]) / 2
        return (np.triu(Abar),)

    return U, pullback


def svd_(X):  # svd(X) (thin): (U, S, Vt)
    U, s, Vt = np.linalg.svd(X, full_matrices=False)
    return (U, s, Vt)


def _mulsubtrans(X, F):  # utils.jl:5-17  F .* (X - X'), zero diagonal
    Y = F * (X - X.T)
    np.fill_diagonal(Y, 0.0)
    return Y


def _svd_rev(U, s, Vt, Ubar, sbar, Vbar):  # factorization.jl:247-277
    V = Vt.T
    k = len(s)
    with np.errstate(divide="ignore"):
        F = np.array([[1.0 if i == j else 1.0 / (s[j] ** 2 - s[i] ** 2) for j in range(k)] for i in range(k)])
    Ut = U.T
    FUtUbar = _mulsubtrans(Ut @ Ubar, F)
    FVtVbar = _mulsubtrans(Vt @ Vbar, F)
    ImUUt = np.eye(U.shape[0]) - U @ Ut
    ImVVt = np.eye(V.shape[0]) - V @ Vt
    S = np.diag(s)
    Abar = (U @ FUtUbar @ S + ImUUt @ (Ubar / s)) @ Vt
    Abar = Abar + U @ np.diag(sbar) @ Vt
    Abar = Abar + U @ (S @ FVtVbar @ Vt + (Vbar.T / s[:, None]) @ ImVVt)
    return Abar


# factorization.jl:218-227, 247-277  ``∂X = svd_rev(F, Ȳ.U, Ȳ.S, Ȳ.Vt')``; svd_rev: ``F = [i == j ? 1 :
# inv(s[j]^2 - s[i]^2)]; FUᵀŪ = F .* (UᵀŪ - ŪᵀU); FVᵀV̄ = F .* (VᵀV̄ - V̄ᵀV); Ā = (U FUᵀŪ S + (I - UUᵀ)(Ū / S)) Vt
# + U S̄ Vt + U (S FVᵀV̄ Vt + (S \ V̄')(I - VVᵀ))``. Full column rank 4x3 matrices with distinct singular values
@rrule(svd_, _tall43, unused_cotangent="none")
def chainrules_svd_rrule(X):
    U, s, Vt = svd_(X)

    def pullback(dY):
        if dY is None:
            return (None,)
        Ubar, sbar, Vtbar = dY
        Ubar = np.zeros_like(U) if Ubar is None else Ubar
        sbar = np.zeros_like(s) if sbar is None else sbar
        Vbar = np.zeros_like(Vt.T) if Vtbar is None else Vtbar.T
        return (_svd_rev(U, s, Vt, Ubar, sbar, Vbar),)

    return (U, s, Vt), pullback


def eigen_symmetric_(A):  # eigen(Symmetric(A)): the upper triangle, ascending eigenvalues
    w, v = np.linalg.eigh(A, UPLO="U")
    return (w, v)


# symmetric.jl:131-146, 149-165, 465-476  eigen_rev!: ``∂K = U' * ∂U; ∂K ./= λ' .- λ; ∂K[diagind(∂K)] .= real.(∂λ);
# Ā = U * ∂K * U'`` (``Ā = U * (real.(∂λ) .* U')`` when ∂U is zero), then ``_hermitrizelike!``:
# ``A[i, j] = (A[i, j] + conj(A[j, i])) / 2`` above the diagonal, mirrored below
@rrule(eigen_symmetric_, arrays(shape=(3, 3), structure="symmetric"), unused_cotangent="none")
def chainrules_eigen_symmetric_rrule(A):
    lam, U = eigen_symmetric_(A)

    def pullback(dF):
        if dF is None:
            return (None,)
        dlam, dU = dF
        if dlam is None and dU is None:
            return (None,)
        dlam = np.zeros_like(lam) if dlam is None else dlam
        if dU is None:
            Abar = U @ (np.real(dlam)[:, None] * U.conj().T)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                dK = U.conj().T @ dU
                dK = dK / (lam[None, :] - lam[:, None])
            dK[np.diag_indices(len(lam))] = np.real(dlam)
            Abar = U @ (dK @ U.conj().T)
        Abar = np.real(Abar).copy()
        n = Abar.shape[0]
        for i in range(n):
            for j in range(i + 1, n):
                Abar[i, j] = (Abar[i, j] + np.conj(Abar[j, i])) / 2
                Abar[j, i] = np.conj(Abar[i, j])
            Abar[i, i] = np.real(Abar[i, i])
        return (Abar,)

    return (lam, U), pullback


def det_upper_(X):  # det(UpperTriangular(X)) = prod(diag(X))
    return _prod_f(np.diag(X))


# structured.jl:253-260  ``y = det(X); s = conj!(y ./ _diag_view(X)); det_pullback(ȳ) = (NoTangent(),
# Diagonal(ȳ .* s))``
@rrule(det_upper_, arrays(shape=(3, 3), min_value=-3.0, max_value=3.0, structure="upper"))
def chainrules_det_triangular_rrule(X):
    y = det_upper_(X)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.conj(y / np.diag(X))
    return y, lambda dy: (np.diag(dy * s),)


LABELS = {
    "chainrules_sin_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:12-16"},
    "chainrules_cos_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:24-28"},
    "chainrules_tan_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:35"},
    "chainrules_sinh_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:40"},
    "chainrules_tanh_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:41"},
    "chainrules_atan2_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:49"},
    "chainrules_cbrt_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:53"},
    "chainrules_sqrt_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:55"},
    "chainrules_exp_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:56"},
    "chainrules_expm1_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:59"},
    "chainrules_log_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:60"},
    "chainrules_log1p_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:62"},
    "chainrules_log2_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:63"},
    "chainrules_abs_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:74-81"},
    "chainrules_abs_complex_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:74-81"},
    "chainrules_hypot_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:158-165"},
    "chainrules_pow_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:196-210, 321-343"},
    "chainrules_pow_nonneg_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:196-210, 321-343"},
    "chainrules_rem_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:213-217"},
    "chainrules_mod_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/base.jl:158-162"},
    "chainrules_max_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/fastmath_able.jl:219"},
    "chainrules_deg2rad_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/base.jl:164"},
    "chainrules_acosh_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/base.jl:170"},
    "chainrules_asinh_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/base.jl:175"},
    "chainrules_atanh_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/base.jl:176"},
    "chainrules_sinc_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/base.jl:210; {JULIA} base/special/trig.jl"},
    "chainrules_clamp_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/base.jl:215-222"},
    "chainrules_sum_dims_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/mapreduce.jl:28-47"},
    "chainrules_prod_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/mapreduce.jl:244-273, 292-322"},
    "chainrules_prod_dims_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/mapreduce.jl:244-322"},
    "chainrules_cumsum_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/mapreduce.jl:220-238"},
    "chainrules_cumprod_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/mapreduce.jl:328-349, 392-417"},
    "chainrules_maximum_dims_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/array.jl:519-540"},
    "chainrules_minimum_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/array.jl:519-526, 547-551"},
    "chainrules_matmul_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/arraymath.jl:47-65"},
    "chainrules_matvec_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/arraymath.jl:47-65"},
    "chainrules_dot_complex_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/dense.jl:9-19"},
    "chainrules_permutedims_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/array.jl:154-159"},
    "chainrules_repeat_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/array.jl:198-210"},
    "chainrules_reshape_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/array.jl:108-114"},
    "chainrules_evalpoly_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/evalpoly.jl:14-23, 62-81, 131-149"},
    "chainrules_det_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/dense.jl:129-136"},
    "chainrules_logdet_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/dense.jl:147-154"},
    "chainrules_logabsdet_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/dense.jl:170-182"},
    "chainrules_inv_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/arraymath.jl:10-16"},
    "chainrules_ldiv_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/arraymath.jl:346-388"},
    "chainrules_ldiv_lstsq_rrule": {"source": f"{CHAINRULES} src/rulesets/Base/arraymath.jl:346-388"},
    "chainrules_tr_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/dense.jl:192-200"},
    "chainrules_norm2_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/norm.jl:63-84, 241-244"},
    "chainrules_norm1_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/norm.jl:22-61, 205-208"},
    "chainrules_norminf_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/norm.jl:22-61, 178-189"},
    "chainrules_normp_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/norm.jl:22-61, 129-158"},
    "chainrules_normalize_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/norm.jl:276-288"},
    "chainrules_pinv_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/dense.jl:293-311"},
    "chainrules_cholesky_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/factorization.jl:507-565"},
    "chainrules_svd_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/factorization.jl:218-277, "
                                       "utils.jl:5-30"},
    "chainrules_eigen_symmetric_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/symmetric.jl:131-165, "
                                                   "465-476"},
    "chainrules_det_triangular_rrule": {"source": f"{CHAINRULES} src/rulesets/LinearAlgebra/structured.jl:253-260"},
}

UPSTREAM_FLAWS = {
    "chainrules_rem_rrule": (
        {"GG206", "GG301", "GG501"},
        "rem's @scalar_rule returns NaN for both partials wherever isinteger(x / y) in floating point, also where rem "
        "is smooth: at x = 0, where rem(x, y) = x for |x| < |y| (x = 0, y = -1.5 or 2: (NaN, NaN) for a unit and for a "
        "zero cotangent, where the derivative is (1, 0) by mpmath and JAX's fmod gradient), and wherever |x / y| >= "
        "2^53, where every float quotient is an integer (x = -4, y = 1.175494e-38: x / y is no integer in exact "
        "arithmetic, rem = -1.0485e-38 lies inside a tooth, the derivative is (1, 3.4e38), the rule gives NaN). GG501 "
        "is the same NaN inside a program (an x = 0 drawn, or a subnormal x that XLA flushes to 0 under the JAX engine)",
    ),
    "chainrules_mod_rrule": (
        {"GG206", "GG301"},
        "mod's @scalar_rule returns NaN for both partials wherever isinteger(x / y) in floating point: at x = 0, mod(0, "
        "y) = 0 for every y != 0, so the partial in y exists and is 0 (central differences 0 at h = 1e-3 and 1e-8; JAX "
        "gives 0), where the rule gives NaN for a unit and for a zero cotangent (the partial in x has a jump there, and "
        "its NaN is the rule's deliberate marker); and at x = -4, y = 1.175494e-38 (|x / y| >= 2^53, no integer in "
        "exact arithmetic, mod = 1.27e-39 inside a tooth) it gives NaN where the partial in x is 1",
    ),
    "chainrules_cumprod_rrule": (
        {"GG201", "GG202"},
        "∇cumprod! computes acc += y[k] * dy[k]; dx[k] += acc / x[k]: at x = [-4.94e-324, 0, 2.764441, 0, 0] with "
        "cotangent [-3.380268, 0, 0, 0, 0] the product of the first entries rounds in the subnormal range and the rule "
        "gives -3.0 for the first entry (-7.0 for twice the cotangent: not linear), where the derivative is the "
        "cotangent's first entry, -3.380268, as x[1] = 0 (mpmath; JAX's cumprod vjp gives -3.380268)",
    ),
    "chainrules_eigen_symmetric_rrule": (
        {"GG301", "GG302"},
        "eigen_rev! divides ∂K ./= λ' .- λ: at repeated eigenvalues a zero eigenvector cotangent gives 0/0 = NaN in "
        "every entry (at A = diag(1, 0, 0) with zero cotangents, where central differences of the eigenvalues and "
        "eigenvectors along the element [0, 0] are finite, so the answer there is 0); at A = 0 with a unit eigenvalue "
        "cotangent the rule gives the identity (the right value: the sum of the eigenvalues is the trace) when the "
        "eigenvector cotangent is absent (ZeroTangent's branch) and NaN everywhere when it is a zero matrix",
    ),
    "chainrules_det_triangular_rrule": (
        {"GG201", "GG206", "GG301", "GG501"},
        "det's rule for triangular matrices computes s = conj!(y ./ diag(X)) instead of the product of the other "
        "diagonal entries: a zero on the diagonal gives 0/0 = NaN (at X = 0 NaN for a unit and for a zero cotangent, "
        "where the derivative is 0; at diag(X) = (0, 2, 3) NaN where it is 6), and a determinant that rounds in the "
        "subnormal range loses the derivative (diag(X) = (-2.260747, 0.6169735, 4.94e-324): y = -4.94e-324 and the "
        "rule gives -1.0 for the last entry, where the derivative is -2.260747 * 0.6169735 = -1.39482). GG501 (seed "
        "20, `called-twice`, diag(X) = (0.5244, -0.4297, 0)): the same NaN in a program's gradient",
        (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 20),
    ),
    "chainrules_hypot_rrule": (
        {"GG202"},
        "hypot's pullback computes c = real(ΔΩ) / Ω before c * x: where Ω is near the smallest normal number c "
        "overflows: at x = 2.225074e-308, y = -0.0 the rule gives 3.188979 for the cotangent 3.188979 and inf for twice "
        "it (not linear), where the derivative is x / Ω = 1 (and at x = 0, y = 5e-324, drawn at seed 2 and reported "
        "only as a warning, (NaN, inf) where it is (0, 1))",
        (9,),
    ),
}

"""Real-world corpus: historical gradient bugs fixed in public projects, each beside its fix.

Every ``*_buggy_rrule`` is a rule as an upstream project shipped it before a fix, and its
``*_fixed_rrule`` twin is the rule as the fix made it; the math is kept exactly as the source had it
(C++, Rust, TensorFlow and JAX sources are translated to NumPy rules; where the upstream rule was what
JAX's AD made of a primal, the pullback is that derivative written out). Each pair names its source:
repository, commit or issue, and what went wrong. Specs are chosen as a careful user would: the
function's real domain. Projects: HIPS/autograd (1-10), JAX (11-13), PyTorch (14), TensorFlow (15),
burn (16), tinygrad (17), autograd again (18), KeOps (19).

Labels follow tests/corpus/: ``LABELS = {name: {"bug": class, "expect": [ids], "what": ...}}``, with
``"expect": []`` for a fixed twin; ``"source"`` names the upstream fix. ``FIXED`` maps each buggy rule
to its twin and ``BUGGY`` lists the buggy rules (bench/detection.py tells buggy from correct rules by
it); ``UPSTREAM_FLAWS`` names fixed twins whose fix still has a flaw that gradguard finds, with the
evidence. tests/realworld/test_realworld_bugs.py holds gradguard to these labels.
"""

import numpy as np
from hypothesis import strategies as st
from scipy.stats import multivariate_normal as scipy_mvn
from scipy.stats import norm as scipy_norm

from gradguard import arrays, rrule


def _none_or(tangents, nargs=1):
    """A pullback that maps a ``None`` cotangent to ``None`` tangents, as engines without materialised zeros
    need; both twins take it the same way, so only the upstream math differs."""
    return lambda g: (None,) * nargs if g is None else tangents(g)


# ---------------------------------------------------------------------------------------------------------------
# 1. autograd: the gradient of max gave every tied maximum the whole cotangent.
#    HIPS/autograd issue #138, fixed in commit c48b8744c94b29e863c23353e886929879d96b2d
#    ("Made grad_chooser normalize its result by the number of repeated entries"), autograd/numpy/numpy_grads.py,
#    make_grad_chooser. With k tied maxima the pullback's tangent sums to k * g: not a valid directional
#    derivative (moving every entry by +1 moves max(x) by 1, not by k).
# ---------------------------------------------------------------------------------------------------------------


def amax(x):
    return np.max(x)


@rrule(amax, arrays(shape=(4,)))
def max_ties_buggy_rrule(x):
    ans = np.max(x)
    argmax_locations = x == np.full(x.shape, ans)
    return ans, _none_or(lambda g: (np.full(x.shape, g) * argmax_locations,))


@rrule(amax, arrays(shape=(4,)))
def max_ties_fixed_rrule(x):
    ans = np.max(x)
    argmax_locations = x == np.full(x.shape, ans)
    return ans, _none_or(lambda g: (np.full(x.shape, g) * argmax_locations / np.sum(argmax_locations, keepdims=True),))


# ---------------------------------------------------------------------------------------------------------------
# 2. autograd: np.maximum(x, y) with x == y gave the whole cotangent to both arguments.
#    HIPS/autograd issue #141, fixed in commit 855fa5a427d2871da98224969169ed72a3f7c437
#    ("Normalized grads for np.maximum etc."): `g * (x == ans)` became `g * balanced_eq(x, ans, y)`,
#    balanced_eq(x, z, y) = (x == z) / (1.0 + (x == y)). Along x and y moved together the tangent is 2g.
# ---------------------------------------------------------------------------------------------------------------


def maximum(x, y):
    return np.maximum(x, y)


def _balanced_eq(x, z, y):
    return (x == z) / (1.0 + (x == y))


@rrule(maximum, arrays(shape=(4,)), arrays(shape=(4,)))
def maximum_ties_buggy_rrule(x, y):
    ans = np.maximum(x, y)
    return ans, _none_or(lambda g: (g * (x == ans), g * (y == ans)), 2)


@rrule(maximum, arrays(shape=(4,)), arrays(shape=(4,)))
def maximum_ties_fixed_rrule(x, y):
    ans = np.maximum(x, y)
    return ans, _none_or(lambda g: (g * _balanced_eq(x, ans, y), g * _balanced_eq(y, ans, x)), 2)


# ---------------------------------------------------------------------------------------------------------------
# 3. autograd: d/dy x**y was NaN at x == 0 (log(0) * 0**y = -inf * 0), where the derivative is 0 for y > 0.
#    HIPS/autograd issue #149 ("grad(np.power, 1)(0., 1.)"), fixed in commit
#    cbf5c42b6abd5bfc28fb6addf35d8c132022c23a: `anp.log(x)` became `anp.log(anp.where(x, x, 1.))`.
#    The x-tangent is the one autograd had then (commit 0cc9817, below). Domain: x >= 0 (a real power of a
#    negative base is NaN), exponents y >= 1 so that d/dx is finite at x == 0 as well.
# ---------------------------------------------------------------------------------------------------------------


def power(x, y):
    return np.power(x, y)


def _power_x_tangent(g, x, y):
    return g * y * x ** (np.where(y, y - 1, 1.0))


@rrule(power, arrays(shape=(3,), min_value=0.0, max_value=4.0), arrays(shape=(3,), min_value=1.0, max_value=3.0))
def power_log0_buggy_rrule(x, y):
    ans = np.power(x, y)
    return ans, _none_or(lambda g: (_power_x_tangent(g, x, y), g * np.log(x) * x**y), 2)


@rrule(power, arrays(shape=(3,), min_value=0.0, max_value=4.0), arrays(shape=(3,), min_value=1.0, max_value=3.0))
def power_log0_fixed_rrule(x, y):
    ans = np.power(x, y)
    return ans, _none_or(lambda g: (_power_x_tangent(g, x, y), g * np.log(np.where(x, x, 1.0)) * x**y), 2)


# ---------------------------------------------------------------------------------------------------------------
# 4. autograd: d/dx x**n was NaN at x == 0 for n == 0 (0 * 0.0**-1 = 0 * inf), where x**0 == 1 has derivative 0.
#    HIPS/autograd issue #116, fixed in commit 0cc98174b5961d4b567ee0c45bbeef6e7657bcae
#    ("handle grad of x**n when n == 0"): `x ** (y - 1)` became `x ** (anp.where(y, y - 1, 1.))`.
#    The exponent is an integer power, not differentiated here.
# ---------------------------------------------------------------------------------------------------------------


def int_power(x, n):
    return np.power(x, n)


@rrule(int_power, arrays(shape=(3,)), st.integers(0, 3), nondiff=1)
def power_n0_buggy_rrule(x, n):
    ans = np.power(x, n)
    return ans, _none_or(lambda g: (g * n * x ** (n - 1.0), None), 2)


@rrule(int_power, arrays(shape=(3,)), st.integers(0, 3), nondiff=1)
def power_n0_fixed_rrule(x, n):
    ans = np.power(x, n)
    return ans, _none_or(lambda g: (g * n * x ** (np.where(n, n - 1, 1.0)), None), 2)


# ---------------------------------------------------------------------------------------------------------------
# 5. autograd: the cumsum gradient for a non-zero axis ran cumsum without the axis (a flattened result of
#    the wrong shape). HIPS/autograd commit 747b48b6cd6e7a76c4484436594022aa2587e4ee
#    ("fix cumsum bug with nonzero axis, discovered from #244"), autograd/numpy/numpy_grads.py, grad_np_cumsum:
#    `anp.cumsum(reverse_axis(g, axis))` became `anp.cumsum(reverse_axis(g, axis), axis)`.
# ---------------------------------------------------------------------------------------------------------------


def cumsum_axis1(x):
    return np.cumsum(x, axis=1)


def _reverse_axis(x, axis):
    x = x.swapaxes(axis, 0)
    x = x[::-1, ...]
    return x.swapaxes(0, axis)


@rrule(cumsum_axis1, arrays(shape=(2, 3)))
def cumsum_axis_buggy_rrule(x):
    axis = 1
    return np.cumsum(x, axis=axis), _none_or(lambda g: (_reverse_axis(np.cumsum(_reverse_axis(g, axis)), axis),))


@rrule(cumsum_axis1, arrays(shape=(2, 3)))
def cumsum_axis_fixed_rrule(x):
    axis = 1
    return np.cumsum(x, axis=axis), _none_or(lambda g: (_reverse_axis(np.cumsum(_reverse_axis(g, axis), axis), axis),))


# ---------------------------------------------------------------------------------------------------------------
# 6. autograd: np.nan_to_num was declared to have a zero gradient everywhere (it is the identity on finite
#    entries). HIPS/autograd commit afea2096f893c045c3746dc53c84d8052a4f58fd ("fix nan_to_num grad so it's not
#    always zero, add test"), autograd/numpy/numpy_grads.py: `anp.nan_to_num.defgrad_is_zero()` became
#    `anp.nan_to_num.defgrad(lambda ans, x: lambda g: anp.where(anp.isfinite(x), g, 0.))`.
# ---------------------------------------------------------------------------------------------------------------


def nan_to_num(x):
    return np.nan_to_num(x)


@rrule(nan_to_num, arrays(shape=(4,)))
def nan_to_num_zero_buggy_rrule(x):
    return np.nan_to_num(x), _none_or(lambda g: (np.zeros_like(x),))


@rrule(nan_to_num, arrays(shape=(4,)))
def nan_to_num_zero_fixed_rrule(x):
    return np.nan_to_num(x), _none_or(lambda g: (np.where(np.isfinite(x), g, 0.0),))


# ---------------------------------------------------------------------------------------------------------------
# 7. autograd: the pad gradient cut `slice(l, -u)`, which is empty when a side's pad width is 0 (`-0 == 0`): a
#    tangent of the wrong shape. HIPS/autograd commit 7b61be3d1cb0a773c6e6bfe4b7a27c79b500935b ("Fix pad vjp for zero padding"),
#    autograd/numpy/numpy_vjps.py, _unpad: `slice(l, -u)` became `slice(l, -u or None)`. (autograd indexed with
#    a list of slices, which NumPy then accepted; here the list is made a tuple.)
# ---------------------------------------------------------------------------------------------------------------


PAD_WIDTH = ((1, 0),)


def pad_left(x):
    return np.pad(x, PAD_WIDTH, mode="constant")


def _unpad(array, width, fixed):
    if np.isscalar(width):
        width = [[width, width]]
    elif np.shape(width) == (1,):
        width = [np.concatenate((width, width))]
    elif np.shape(width) == (2,):
        width = [width]
    if np.shape(width)[0] == 1:
        width = np.repeat(width, np.ndim(array), 0)
    idxs = [slice(l, (-u or None) if fixed else -u) for l, u in width]
    return array[tuple(idxs)]


@rrule(pad_left, arrays(shape=(4,)))
def pad_zero_width_buggy_rrule(x):
    return pad_left(x), _none_or(lambda g: (_unpad(g, PAD_WIDTH, fixed=False),))


@rrule(pad_left, arrays(shape=(4,)))
def pad_zero_width_fixed_rrule(x):
    return pad_left(x), _none_or(lambda g: (_unpad(g, PAD_WIDTH, fixed=True),))


# ---------------------------------------------------------------------------------------------------------------
# 8. autograd: scipy.stats.norm.cdf's x-gradient defaulted loc to -1.0, so `norm.cdf(x)` (loc left at its
#    default 0) got the density of N(-1, 1) as its derivative. HIPS/autograd commit
#    155f0bfe53bd72bbaf5881ee447a3c398846f08f ("Fix default arguments of stats.norm vjps"),
#    autograd/scipy/stats/norm.py: `lambda ans, x, loc=-1.0, scale=1.0: ... g * pdf(x, loc, scale)` became
#    `loc=0.0`.
# ---------------------------------------------------------------------------------------------------------------


def norm_cdf(x):
    return scipy_norm.cdf(x)


def _norm_cdf_x_vjp(x, loc=-1.0, scale=1.0):
    return lambda g: g * scipy_norm.pdf(x, loc, scale)


def _norm_cdf_x_vjp_fixed(x, loc=0.0, scale=1.0):
    return lambda g: g * scipy_norm.pdf(x, loc, scale)


@rrule(norm_cdf, arrays(shape=(3,), min_value=-5.0, max_value=5.0))
def norm_cdf_loc_buggy_rrule(x):
    vjp = _norm_cdf_x_vjp(x)
    return scipy_norm.cdf(x), _none_or(lambda g: (vjp(g),))


@rrule(norm_cdf, arrays(shape=(3,), min_value=-5.0, max_value=5.0))
def norm_cdf_loc_fixed_rrule(x):
    vjp = _norm_cdf_x_vjp_fixed(x)
    return scipy_norm.cdf(x), _none_or(lambda g: (vjp(g),))


# ---------------------------------------------------------------------------------------------------------------
# 9. autograd: tensordot with `axes` a pair of ints, e.g. `axes=(0, 1)`, took its own branch in the adjoint
#    that contracted as if the summed axis of A were its last: the tangent of A comes back transposed.
#    HIPS/autograd issue #446, fixed in commit 5c12e6e134cab6a206e66026cde641dee06ad994 ("fix issue 446:
#    tensordot vjps not handling axes specification correctly"), autograd/numpy/numpy_vjps.py,
#    tensordot_adjoint_0/1: the `type(axes[0]) is int` branch was removed and int pairs go the general way.
# ---------------------------------------------------------------------------------------------------------------


TD_AXES = (0, 1)


def tensordot_int_axes(a, b):
    return np.tensordot(a, b, TD_AXES)


def _td_adjoint_0(B, G, axes, A_ndim, B_ndim, fixed):
    G_axes = np.arange(np.ndim(G))
    if not fixed and type(axes[0]) is int:
        axes = [axes[0] % A_ndim, axes[1] % B_ndim]
        B_axes = np.arange(B_ndim)
        return np.tensordot(G, B, [G_axes[A_ndim - 1:], np.delete(B_axes, axes[1])])
    axes0 = [axes[0]] if type(axes[0]) is int else axes[0]
    axes1 = [axes[1]] if type(axes[1]) is int else axes[1]
    axes = [axes0, axes1]
    A_axes, B_axes = np.arange(A_ndim), np.arange(B_ndim)
    summed_axes = [np.asarray(axes[0]) % A_ndim, np.asarray(axes[1]) % B_ndim]
    other_axes = [np.delete(A_axes, summed_axes[0]), np.delete(B_axes, summed_axes[1])]
    out = np.tensordot(G, B, [G_axes[len(other_axes[0]):], other_axes[1]])
    perm = np.argsort(np.concatenate((other_axes[0], summed_axes[0][np.argsort(summed_axes[1])])))
    return np.transpose(out, perm)


def _td_adjoint_1(A, G, axes, A_ndim, B_ndim, fixed):
    G_axes = np.arange(np.ndim(G))
    if not fixed and type(axes[0]) is int:
        axes = [axes[0] % A_ndim, axes[1] % B_ndim]
        A_axes = np.arange(A_ndim)
        return np.tensordot(A, G, [np.delete(A_axes, axes[0]), G_axes[: A_ndim - 1]])
    axes0 = [axes[0]] if type(axes[0]) is int else axes[0]
    axes1 = [axes[1]] if type(axes[1]) is int else axes[1]
    axes = [axes0, axes1]
    A_axes, B_axes = np.arange(A_ndim), np.arange(B_ndim)
    summed_axes = [np.asarray(axes[0]) % A_ndim, np.asarray(axes[1]) % B_ndim]
    other_axes = [np.delete(A_axes, summed_axes[0]), np.delete(B_axes, summed_axes[1])]
    out = np.tensordot(A, G, [other_axes[0], G_axes[: len(other_axes[0])]])
    perm = np.argsort(np.concatenate((summed_axes[1][np.argsort(summed_axes[0])], other_axes[1])))
    return np.transpose(out, perm)


def _td_pullback(a, b, fixed):
    return _none_or(lambda g: (_td_adjoint_0(b, g, TD_AXES, a.ndim, b.ndim, fixed),
                               _td_adjoint_1(a, g, TD_AXES, a.ndim, b.ndim, fixed)), 2)


@rrule(tensordot_int_axes, arrays(shape=(3, 3)), arrays(shape=(3, 3)))
def tensordot_int_axes_buggy_rrule(a, b):
    return np.tensordot(a, b, TD_AXES), _td_pullback(a, b, fixed=False)


@rrule(tensordot_int_axes, arrays(shape=(3, 3)), arrays(shape=(3, 3)))
def tensordot_int_axes_fixed_rrule(a, b):
    return np.tensordot(a, b, TD_AXES), _td_pullback(a, b, fixed=True)


# ---------------------------------------------------------------------------------------------------------------
# 10. autograd: tensordot's gradient compared negative axis numbers with non-negative ones, so
#     `axes=([-1], [0])` built a permutation with too many entries and the pullback raised.
#     HIPS/autograd issue #98, fixed in commit 211ab6cc745dc2047f29a36a4019ca35c86ec169 ("handle negative indices in tensordot grad, fixes
#     #98"), autograd/numpy/numpy_grads.py, make_grad_tensordot: convert_negative_indices was added.
# ---------------------------------------------------------------------------------------------------------------


NEG_AXES = ([-1], [0])


def tensordot_neg_axes(a, b):
    return np.tensordot(a, b, NEG_AXES)


def _make_grad_tensordot(argnum, A, B, axes, fixed):
    def convert_negative_indices(a, axes_list):
        axes = range(np.ndim(a))
        return [axes[i] for i in axes_list]

    def gradfun(g):
        N_axes_summed = len(axes[0])
        if argnum == 0:
            X, Y = A, B
            X_axes_summed, Y_axes_summed = axes
            g_axes_from_Y = list(range(np.ndim(g)))[(np.ndim(X) - N_axes_summed):]
        else:
            X, Y = B, A
            X_axes_summed, Y_axes_summed = axes[::-1]
            g_axes_from_Y = list(range(np.ndim(g)))[:(np.ndim(Y) - N_axes_summed)]
        if fixed:
            X_axes_summed, Y_axes_summed = map(convert_negative_indices, [X, Y], [X_axes_summed, Y_axes_summed])
        Y_axes_ignored = [i for i in range(np.ndim(Y)) if i not in Y_axes_summed]
        result = np.tensordot(g, Y, axes=[g_axes_from_Y, Y_axes_ignored])
        sorted_axes_pairs = sorted(zip(X_axes_summed, Y_axes_summed), key=lambda x: x[1])
        forward_permutation = ([i for i in range(np.ndim(X)) if i not in X_axes_summed]
                               + [i for i, _ in sorted_axes_pairs])
        reverse_permutation = list(np.argsort(forward_permutation))
        if result.ndim == 0:
            result = result[()]
        return np.transpose(result, axes=reverse_permutation)

    return gradfun


def _neg_pullback(a, b, fixed):
    ga, gb = _make_grad_tensordot(0, a, b, NEG_AXES, fixed), _make_grad_tensordot(1, a, b, NEG_AXES, fixed)
    return _none_or(lambda g: (ga(g), gb(g)), 2)


@rrule(tensordot_neg_axes, arrays(shape=(2, 3)), arrays(shape=(3, 4)))
def tensordot_neg_axes_buggy_rrule(a, b):
    return np.tensordot(a, b, NEG_AXES), _neg_pullback(a, b, fixed=False)


@rrule(tensordot_neg_axes, arrays(shape=(2, 3)), arrays(shape=(3, 4)))
def tensordot_neg_axes_fixed_rrule(a, b):
    return np.tensordot(a, b, NEG_AXES), _neg_pullback(a, b, fixed=True)


# ---------------------------------------------------------------------------------------------------------------
# 11. JAX: the JVP of lax.rem (C's fmod: the remainder has the dividend's sign) with respect to the divisor
#     used floor(x / y), but the quotient is truncated: wrong wherever x / y < 0. jax-ml/jax issue #11466,
#     fixed by PR #11469, commit daf6e3b06569a94bf53e3f502cd41d3bf7c5f828 ("BUG: fix jvp rule for lax.rem"),
#     jax/_src/lax/lax.py: `mul(neg(g), floor(div(x, y)))` became
#     `mul(neg(g), mul(sign(div(x, y)), floor(abs(div(x, y)))))`. The JVP is elementwise, so its transpose
#     is the same expression in the cotangent.
# ---------------------------------------------------------------------------------------------------------------


def fmod(x, y):
    return np.fmod(x, y)


_REM_X = arrays(shape=(3,), min_value=-10.0, max_value=10.0)
_REM_Y = arrays(shape=(3,), min_value=0.5, max_value=4.0)


@rrule(fmod, _REM_X, _REM_Y)
def rem_divisor_buggy_rrule(x, y):
    return np.fmod(x, y), _none_or(lambda g: (g, -g * np.floor(x / y)), 2)


@rrule(fmod, _REM_X, _REM_Y)
def rem_divisor_fixed_rrule(x, y):
    return np.fmod(x, y), _none_or(lambda g: (g, -g * (np.sign(x / y) * np.floor(np.abs(x / y)))), 2)


# ---------------------------------------------------------------------------------------------------------------
# 12. JAX: jax.scipy.special.xlogy was `where(x != 0, x * log(y), 0)` with "safe" operands, so its derivative
#     in x at x == 0 came out 0 instead of log(y). jax-ml/jax commit dd023e266e6616494cdd590959103ddc646109c4
#     ("jax.scipy.special: fix gradient for xlogy & xlog1py"), jax/_src/scipy/special.py: a custom_jvp,
#     `x_dot * lax.log(y) + y_dot * x / y`. The buggy pullback is what JAX's AD made of the where-based
#     primal (the transposed select keeps the cotangent only where x != 0).
# ---------------------------------------------------------------------------------------------------------------


def xlogy(x, y):
    x_ok = x != 0.0
    safe_x = np.where(x_ok, x, 1.0)
    safe_y = np.where(x_ok, y, 1.0)
    return np.where(x_ok, safe_x * np.log(safe_y), np.zeros_like(x))


_XLOGY_X = arrays(shape=(3,), min_value=-3.0, max_value=3.0)
_XLOGY_Y = arrays(shape=(3,), min_value=0.1, max_value=5.0)


@rrule(xlogy, _XLOGY_X, _XLOGY_Y)
def xlogy_x0_buggy_rrule(x, y):
    x_ok = x != 0.0
    safe_x, safe_y = np.where(x_ok, x, 1.0), np.where(x_ok, y, 1.0)
    return xlogy(x, y), _none_or(lambda g: (np.where(x_ok, g, 0.0) * np.log(safe_y),
                                             np.where(x_ok, g, 0.0) * safe_x / safe_y), 2)


@rrule(xlogy, _XLOGY_X, _XLOGY_Y)
def xlogy_x0_fixed_rrule(x, y):
    return xlogy(x, y), _none_or(lambda g: (g * np.log(y), g * x / y), 2)


# ---------------------------------------------------------------------------------------------------------------
# 13. JAX: jax.nn.celu was `where(x > 0, x, alpha * expm1(x / alpha))`; for float32 x >= 88.72 the unselected
#     branch overflows, and its derivative exp(x / alpha) = inf times the select's zero cotangent is NaN.
#     jax-ml/jax commit b0805a8a318696cc39eb53a05dc10f2e9cee6a29 ("Fixes the JAX implementation of CELU
#     returning NaN gradients for input values >= 88.7229"), jax/_src/nn/functions.py: the primal became
#     `maximum(x, 0) + alpha * expm1(minimum(x, 0) / alpha)`. Both pullbacks are what JAX's AD made of the two
#     primals (maximum/minimum split a tie evenly); float32, as jax.nn runs by default.
# ---------------------------------------------------------------------------------------------------------------


CELU_ALPHA = np.float32(1.0)


def celu(x):
    return np.maximum(x, 0.0).astype(x.dtype) + CELU_ALPHA * np.expm1(np.minimum(x, 0.0) / CELU_ALPHA)


_CELU_X = arrays(shape=(3,), dtype="float32", min_value=-1000.0, max_value=1000.0)  # activations see large inputs


@rrule(celu, _CELU_X)
def celu_overflow_buggy_rrule(x):
    def pullback(g):
        pos = x > 0
        with np.errstate(over="ignore", invalid="ignore"):
            t = np.where(pos, g, 0) + CELU_ALPHA * np.where(pos, 0, g) * np.exp(x / CELU_ALPHA) / CELU_ALPHA
        return (t.astype(x.dtype),)

    with np.errstate(over="ignore"):
        y = np.where(x > 0, x, CELU_ALPHA * np.expm1(x / CELU_ALPHA)).astype(x.dtype)
    return y, _none_or(pullback)


@rrule(celu, _CELU_X)
def celu_overflow_fixed_rrule(x):
    def pullback(g):
        up = np.where(x > 0, 1.0, np.where(x == 0, 0.5, 0.0))
        down = np.where(x < 0, 1.0, np.where(x == 0, 0.5, 0.0))
        t = g * up + g * down * np.exp(np.minimum(x, 0.0) / CELU_ALPHA)
        return (t.astype(x.dtype),)

    return celu(x), _none_or(pullback)


# ---------------------------------------------------------------------------------------------------------------
# 14. PyTorch: sinc's derivative formula in tools/autograd/derivatives.yaml,
#     `grad * ((M_PI * self * (M_PI * self).cos() - (M_PI * self).sin()) / (M_PI * self * self)).conj()`,
#     is 0/0 = NaN at x == 0, where sinc'(0) = 0. pytorch/pytorch issues #53989 and #56760. The first fix,
#     PR #56763, made sinc_backward in torch/csrc/autograd/FunctionsManual.cpp return
#     `at::where(self == 0.0, at::zeros({}, grad.options()), out)`, which is still NaN for a subnormal x whose
#     square underflows (gradguard finds x = 2.5e-175); sinc_backward as it stands now (the base of PR #187803)
#     tests the denominator instead: `self_squared_pi = self * self * M_PI` and
#     `at::where(self_squared_pi == 0.0, ...)`. That is the fixed twin. Real inputs: conj() is the identity.
# ---------------------------------------------------------------------------------------------------------------


def sinc(x):
    return np.sinc(x)


def _sinc_out(g, x):
    return g * ((np.pi * x * np.cos(np.pi * x) - np.sin(np.pi * x)) / (np.pi * x * x))


@rrule(sinc, arrays(shape=(4,), min_value=-3.0, max_value=3.0))
def sinc_zero_buggy_rrule(x):
    return np.sinc(x), _none_or(lambda g: (_sinc_out(g, x),))


@rrule(sinc, arrays(shape=(4,), min_value=-3.0, max_value=3.0))
def sinc_zero_fixed_rrule(x):
    def pullback(g):
        with np.errstate(invalid="ignore", divide="ignore"):
            out = _sinc_out(g, x)
        return (np.where(x * x * np.pi == 0.0, 0.0, out),)

    return np.sinc(x), _none_or(pullback)


# ---------------------------------------------------------------------------------------------------------------
# 15. TensorFlow: the MatMul gradient did not conjugate its inputs, so complex matmul got
#     `grad @ b^T` and `a^T @ grad` (JAX's convention, not TensorFlow's adjoint). tensorflow/tensorflow issues
#     #378 and #4859 (closed), tensorflow/python/ops/math_grad.py, _MatMulGrad: the fix conjugates the inputs,
#     `a = math_ops.conj(op.inputs[0]); b = math_ops.conj(op.inputs[1])`, giving `grad @ b^H` and `a^H @ grad`.
# ---------------------------------------------------------------------------------------------------------------


def matmul(a, b):
    return a @ b


_MM_A = arrays(shape=(2, 3), dtype="complex128")
_MM_B = arrays(shape=(3, 2), dtype="complex128")


@rrule(matmul, _MM_A, _MM_B)
def matmul_complex_buggy_rrule(a, b):
    return a @ b, _none_or(lambda g: (g @ b.T, a.T @ g), 2)


@rrule(matmul, _MM_A, _MM_B)
def matmul_complex_fixed_rrule(a, b):
    a_c, b_c = np.conj(a), np.conj(b)
    return a @ b, _none_or(lambda g: (g @ b_c.T, a_c.T @ g), 2)


# ---------------------------------------------------------------------------------------------------------------
# 16. burn (Rust): the cumprod gradient was reverse_cumsum(grad * output) / input, NaN wherever the input has
#     a zero (the derivative is a polynomial, finite everywhere). tracel-ai/burn issue #3864, fixed by PR #5141
#     ("zero-safe cumprod gradient (no division by input)"): grad_input[i] = left[i] * tail[i], left the
#     exclusive prefix product, tail[i] = grad[i] + input[i+1] * tail[i+1].
# ---------------------------------------------------------------------------------------------------------------


def cumprod(x):
    return np.cumprod(x)


@rrule(cumprod, arrays(shape=(4,), min_value=-2.0, max_value=2.0))
def cumprod_zero_buggy_rrule(x):
    out = np.cumprod(x)

    def pullback(g):
        with np.errstate(invalid="ignore", divide="ignore"):
            return (np.cumsum((g * out)[::-1])[::-1] / x,)

    return out, _none_or(pullback)


@rrule(cumprod, arrays(shape=(4,), min_value=-2.0, max_value=2.0))
def cumprod_zero_fixed_rrule(x):
    out = np.cumprod(x)

    def pullback(g):
        left = np.concatenate(([1.0], np.cumprod(x)[:-1]))
        tail = np.array(g, dtype=float, copy=True)
        for i in range(len(x) - 2, -1, -1):
            tail[i] = g[i] + x[i + 1] * tail[i + 1]
        return (left * tail,)

    return out, _none_or(pullback)


# ---------------------------------------------------------------------------------------------------------------
# 17. tinygrad: prod's gradient was `ret / x` times the cotangent, NaN at a zero entry (where the derivative is
#     the product of the other entries). tinygrad/tinygrad PR #17404 ("fix prod gradients at zero", merged):
#     no zero keeps `ret / x` with a safe denominator; exactly one zero gives that entry the product of the
#     non-zero entries and the others 0; two or more zeros give 0 everywhere. The fix keeps a flaw that
#     PyTorch's prod_backward shares (`grad * (result / input)` when no entry is zero): where the product
#     underflows to 0 (a subnormal entry), `ret / x` is 0 but the derivative is not (see INDEX.md).
# ---------------------------------------------------------------------------------------------------------------


def prod(x):
    return np.prod(x)


@rrule(prod, arrays(shape=(4,), min_value=-2.0, max_value=2.0))
def prod_zero_buggy_rrule(x):
    ret = np.prod(x)

    def pullback(g):
        with np.errstate(invalid="ignore", divide="ignore"):
            return (g * ret / x,)

    return ret, _none_or(pullback)


@rrule(prod, arrays(shape=(4,), min_value=-2.0, max_value=2.0))
def prod_zero_fixed_rrule(x):
    ret = np.prod(x)

    def pullback(g):
        zero = x == 0
        zeros = int(np.sum(zero))
        if zeros == 0:
            return (g * ret / np.where(zero, 1.0, x),)
        if zeros == 1:
            return (np.where(zero, g * np.prod(np.where(zero, 1.0, x)), 0.0),)
        return (np.zeros_like(x) * g,)

    return ret, _none_or(pullback)


# ---------------------------------------------------------------------------------------------------------------
# 18. autograd: the covariance gradient of scipy.stats.multivariate_normal.logpdf had the wrong sign.
#     HIPS/autograd issue #401, fixed in commit fec14ad76ae5ed347c1de34eaca46a71097ff0d4 ("Fix vjp for
#     multivariate normal covariance and unittest typo (issue #401)"), autograd/scipy/stats/multivariate_normal.py:
#     `-np.reshape(g, np.shape(g) + (1, 1)) * covgrad(...)` became `np.reshape(g, ...) * covgrad(...)`, with
#     covgrad = (J s s^T - J) / 2, J = inv(cov), s = J (x - mean). Only the covariance is differentiated here
#     (x and mean are data); its domain is the positive-definite matrices, declared with structure="psd".
# ---------------------------------------------------------------------------------------------------------------


def mvn_logpdf(x, mean, cov):
    return scipy_mvn.logpdf(x, mean, cov)


def _covgrad(x, mean, cov):
    J = np.linalg.inv(cov)
    solved = np.matmul(J, np.expand_dims(x - mean, -1))
    return 1.0 / 2 * (np.matmul(solved, np.swapaxes(solved, -1, -2)) - J)


_MVN_SPECS = (arrays(shape=(2,), min_value=-3.0, max_value=3.0), arrays(shape=(2,), min_value=-3.0, max_value=3.0),
              arrays(shape=(2, 2), structure="psd"))


@rrule(mvn_logpdf, *_MVN_SPECS, nondiff=(0, 1))
def mvn_cov_sign_buggy_rrule(x, mean, cov):
    return mvn_logpdf(x, mean, cov), _none_or(
        lambda g: (None, None, -np.reshape(g, np.shape(g) + (1, 1)) * _covgrad(x, mean, cov)), 3)


@rrule(mvn_logpdf, *_MVN_SPECS, nondiff=(0, 1))
def mvn_cov_sign_fixed_rrule(x, mean, cov):
    return mvn_logpdf(x, mean, cov), _none_or(
        lambda g: (None, None, np.reshape(g, np.shape(g) + (1, 1)) * _covgrad(x, mean, cov)), 3)


# ---------------------------------------------------------------------------------------------------------------
# 19. KeOps: the derivative of Atan2(F, G) = atan2(F, G) subtracted its two terms in the wrong order, giving F
#     the weight -F / (F^2 + G^2) and G the weight G / (F^2 + G^2) (the right ones are G / (F^2 + G^2) and
#     -F / (F^2 + G^2)). getkeops/keops PR #155, commit dc7a67eb9d02b4af159e260c8ba794822c891b6f ("Fix
#     derivative of atan2 which is now subtracting the components in the wrong order"),
#     keops/core/formulas/maths/Atan2.h. G is drawn in the right half-plane, away from the branch cut along
#     G < 0, F = 0 (where atan2 jumps) and from the origin (where it has no derivative).
# ---------------------------------------------------------------------------------------------------------------


def atan2(f, g):
    return np.arctan2(f, g)


_ATAN2_F = arrays(shape=(3,), min_value=-5.0, max_value=5.0)
_ATAN2_G = arrays(shape=(3,), min_value=0.1, max_value=5.0)


@rrule(atan2, _ATAN2_F, _ATAN2_G)
def atan2_order_buggy_rrule(f, g):
    r2 = f * f + g * g
    return np.arctan2(f, g), _none_or(lambda gradin: (-(f / r2) * gradin, (g / r2) * gradin), 2)


@rrule(atan2, _ATAN2_F, _ATAN2_G)
def atan2_order_fixed_rrule(f, g):
    r2 = f * f + g * g
    return np.arctan2(f, g), _none_or(lambda gradin: ((g / r2) * gradin, -(f / r2) * gradin), 2)


FIXED = {
    "max_ties_buggy_rrule": "max_ties_fixed_rrule",
    "maximum_ties_buggy_rrule": "maximum_ties_fixed_rrule",
    "power_log0_buggy_rrule": "power_log0_fixed_rrule",
    "power_n0_buggy_rrule": "power_n0_fixed_rrule",
    "cumsum_axis_buggy_rrule": "cumsum_axis_fixed_rrule",
    "nan_to_num_zero_buggy_rrule": "nan_to_num_zero_fixed_rrule",
    "pad_zero_width_buggy_rrule": "pad_zero_width_fixed_rrule",
    "norm_cdf_loc_buggy_rrule": "norm_cdf_loc_fixed_rrule",
    "tensordot_int_axes_buggy_rrule": "tensordot_int_axes_fixed_rrule",
    "tensordot_neg_axes_buggy_rrule": "tensordot_neg_axes_fixed_rrule",
    "rem_divisor_buggy_rrule": "rem_divisor_fixed_rrule",
    "xlogy_x0_buggy_rrule": "xlogy_x0_fixed_rrule",
    "celu_overflow_buggy_rrule": "celu_overflow_fixed_rrule",
    "sinc_zero_buggy_rrule": "sinc_zero_fixed_rrule",
    "matmul_complex_buggy_rrule": "matmul_complex_fixed_rrule",
    "cumprod_zero_buggy_rrule": "cumprod_zero_fixed_rrule",
    "prod_zero_buggy_rrule": "prod_zero_fixed_rrule",
    "mvn_cov_sign_buggy_rrule": "mvn_cov_sign_fixed_rrule",
    "atan2_order_buggy_rrule": "atan2_order_fixed_rrule",
}
BUGGY = tuple(FIXED)  # the historical bugs, for tools that classify rules by name (bench/detection.py)

_AUTOGRAD = "https://github.com/HIPS/autograd"
_JAX = "https://github.com/jax-ml/jax"
_TORCH = "https://github.com/pytorch/pytorch"
LABELS = {
    "max_ties_buggy_rrule": {
        "bug": "numeric", "expect": ["GG201"], "source": f"{_AUTOGRAD}/issues/138 (fix c48b874)",
        "what": "every tied maximum gets the whole cotangent",
    },
    "maximum_ties_buggy_rrule": {
        "bug": "numeric", "expect": ["GG201", "GG502"], "source": f"{_AUTOGRAD}/issues/141 (fix 855fa5a)",
        "what": "np.maximum at x == y gives both arguments the whole cotangent",
    },
    "power_log0_buggy_rrule": {
        "bug": "numeric", "expect": ["GG206", "GG301"], "source": f"{_AUTOGRAD}/issues/149 (fix cbf5c42)",
        "what": "d/dy x**y is NaN at x == 0, where it is 0",
    },
    "power_n0_buggy_rrule": {
        "bug": "numeric", "expect": ["GG206", "GG301"], "source": f"{_AUTOGRAD}/issues/116 (fix 0cc9817)",
        "what": "d/dx x**0 is NaN at x == 0, where it is 0",
    },
    "cumsum_axis_buggy_rrule": {
        "bug": "contract", "expect": ["GG103"], "source": f"{_AUTOGRAD}/commit/747b48b (from issue #244)",
        "what": "cumsum's pullback for axis=1 flattens: a tangent of the wrong shape",
    },
    "nan_to_num_zero_buggy_rrule": {
        "bug": "numeric", "expect": ["GG201"], "source": f"{_AUTOGRAD}/commit/afea2096f893c045c3746dc53c84d8052a4f58fd",
        "what": "nan_to_num declared to have a zero gradient; it is the identity on finite entries",
    },
    "pad_zero_width_buggy_rrule": {
        "bug": "contract", "expect": ["GG104"], "source": f"{_AUTOGRAD}/commit/7b61be3d1cb0a773c6e6bfe4b7a27c79b500935b",
        "what": "pad's pullback slices `l:-0` for a zero pad width: an empty tangent",
    },
    "norm_cdf_loc_buggy_rrule": {
        "bug": "numeric", "expect": ["GG201"], "source": f"{_AUTOGRAD}/commit/155f0bfe53bd72bbaf5881ee447a3c398846f08f",
        "what": "norm.cdf's x-gradient defaults loc to -1: the density of N(-1, 1) instead of N(0, 1)",
    },
    "tensordot_int_axes_buggy_rrule": {
        "bug": "numeric", "expect": ["GG201"], "source": f"{_AUTOGRAD}/issues/446 (fix 5c12e6e)",
        "what": "tensordot with axes=(0, 1): the tangent of A comes back transposed",
    },
    "tensordot_neg_axes_buggy_rrule": {
        "bug": "contract", "expect": ["GG103", "GG104", "GG201"], "source": f"{_AUTOGRAD}/issues/98 (fix 211ab6c)",
        "what": "tensordot with negative axes: the pullback raises",
    },
    "rem_divisor_buggy_rrule": {
        "bug": "numeric", "expect": ["GG201", "GG203"], "source": f"{_JAX}/issues/11466 (PR #11469, commit daf6e3b)",
        "what": "d/dy rem(x, y) uses floor(x / y) for a truncated quotient: wrong where x / y < 0",
    },
    "xlogy_x0_buggy_rrule": {
        "bug": "numeric", "expect": ["GG201"], "source": f"{_JAX}/commit/dd023e266e6616494cdd590959103ddc646109c4",
        "what": "d/dx xlogy(x, y) is 0 at x == 0 instead of log(y)",
    },
    "celu_overflow_buggy_rrule": {
        "bug": "numeric", "expect": ["GG206", "GG501"], "source": f"{_JAX}/commit/b0805a8a318696cc39eb53a05dc10f2e9cee6a29",
        "what": "celu's gradient is NaN for float32 x >= 88.72 (inf from the unselected branch times 0)",
    },
    "sinc_zero_buggy_rrule": {
        "bug": "numeric", "expect": ["GG206"], "source": f"{_TORCH}/issues/56760 (PR #56763; also #53989)",
        "what": "sinc's derivative formula is 0/0 = NaN at x == 0, where it is 0",
    },
    "matmul_complex_buggy_rrule": {
        "bug": "numeric", "expect": ["GG201", "GG205"],
        "source": "https://github.com/tensorflow/tensorflow/issues/4859 (and #378)",
        "what": "complex matmul's gradient does not conjugate the other factor",
    },
    "cumprod_zero_buggy_rrule": {
        "bug": "numeric", "expect": ["GG206"], "source": "https://github.com/tracel-ai/burn/issues/3864 (PR #5141)",
        "what": "cumprod's gradient divides by the input: NaN at a zero entry",
    },
    "prod_zero_buggy_rrule": {
        "bug": "numeric", "expect": ["GG206"], "source": "https://github.com/tinygrad/tinygrad/pull/17404",
        "what": "prod's gradient divides by the input: NaN at a zero entry",
    },
    "mvn_cov_sign_buggy_rrule": {
        "bug": "numeric", "expect": ["GG201"], "source": f"{_AUTOGRAD}/issues/401 (fix fec14ad)",
        "what": "multivariate_normal.logpdf's covariance gradient has the wrong sign",
    },
    "atan2_order_buggy_rrule": {
        "bug": "numeric", "expect": ["GG201"],
        "source": "https://github.com/getkeops/keops/pull/155 (commit dc7a67eb9d02b4af159e260c8ba794822c891b6f)",
        "what": "atan2's derivative subtracts its two terms in the wrong order",
    },
}
for _bug, _fixed in FIXED.items():
    LABELS[_fixed] = {"bug": "correct", "expect": [], "source": LABELS[_bug]["source"]}

# Fixed twins whose upstream fix still has a flaw that gradguard finds: name -> (ids it may report, evidence).
# tests/realworld/test_realworld_bugs.py allows these ids (and no others) on the twin; INDEX.md has the evidence.
UPSTREAM_FLAWS = {
    "sinc_zero_fixed_rrule": (
        ("GG201", "GG203"),
        "sinc_backward's (pi x cos(pi x) - sin(pi x)) / (pi x^2) cancels for small x: at x = 5.960464e-08 it "
        "gives -1.96842e-07 where the derivative is -1.96091e-07 (0.38% off; PyTorch 2.13 gives the same value)",
    ),
    "prod_zero_fixed_rrule": (
        ("GG201", "GG202", "GG203", "GG501"),
        "`ret / x` with no zero entry: where the product underflows (x = [4.9e-324, -1.80, 1.9, 0.04]) the "
        "tangent of x[0] is 0, but the derivative is the product of the others, -0.137 (PyTorch 2.13 gives 0 too); "
        "GG501 is the same underflow in `called-twice`, whose second input at seed 0 is "
        "[-0.728, -0.111, 4.9e-324, 1.059]; GG202 is its rounding where the product is subnormal "
        "(x = [1.64, 1.48, 1.01, 4.9e-324]: the last entry's tangent is 24.0 for -3.26679 g, where -3.26679 times "
        "its tangent for g is 22.8675)",
    ),
}

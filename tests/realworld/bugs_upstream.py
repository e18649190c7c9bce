"""Real-world corpus: historical gradient bugs fixed in public projects, each beside its fix.

Every ``*_buggy_rrule`` is a rule as an upstream project shipped it before a fix, and its
``*_fixed_rrule`` twin is the rule as the fix made it; the math is kept exactly as the source had it
(Julia, C++ and JAX sources are translated to NumPy rules). Each pair names its source: repository,
commit or issue, and what went wrong. Specs are chosen as a careful user would: the function's real
domain.

Labels follow tests/corpus/: ``LABELS = {name: {"bug": class, "expect": [ids], "what": ...}}``, with
``"expect": []`` for a fixed twin; ``"source"`` names the upstream fix. ``FIXED`` maps each buggy rule
to its twin. tests/realworld/test_realworld_bugs.py holds gradguard to these labels.
"""

import numpy as np
from hypothesis import strategies as st

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


FIXED = {
    "max_ties_buggy_rrule": "max_ties_fixed_rrule",
    "maximum_ties_buggy_rrule": "maximum_ties_fixed_rrule",
    "power_log0_buggy_rrule": "power_log0_fixed_rrule",
    "power_n0_buggy_rrule": "power_n0_fixed_rrule",
    "cumsum_axis_buggy_rrule": "cumsum_axis_fixed_rrule",
}

_AUTOGRAD = "https://github.com/HIPS/autograd"
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
}
for _bug, _fixed in FIXED.items():
    LABELS[_fixed] = {"bug": "correct", "expect": [], "source": LABELS[_bug]["source"]}

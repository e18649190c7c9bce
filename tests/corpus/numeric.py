"""Corpus: numeric bugs (GG2xx): the pullback's numbers are wrong.

Many are wrong only somewhere: for a non-unit cotangent, for negative inputs,
for non-square shapes, for float32, for complex inputs, at a single point.
"""

import numpy as np
from hypothesis import strategies as st

from gradguard import arrays, floats, rrule

_dims = st.integers(1, 4)


def total(x):
    return x.sum()


# The ChainRules documentation bug: ones instead of full(ybar); right only for ybar == 1.
@rrule(total, arrays(shape=(3,)))
def sum_ones_rrule(x):
    return x.sum(), lambda ybar: (None,) if ybar is None else (np.ones(x.shape),)


def square(x):
    return x * x


# The cotangent is dropped entirely: right only for a cotangent of ones.
@rrule(square, arrays(shape=(3,)))
def square_drops_cotangent_rrule(x):
    return x * x, lambda ybar: (None,) if ybar is None else (2 * x,)


# abs(ybar): right only for non-negative cotangents.
@rrule(square, arrays(shape=(3,)))
def square_abs_cotangent_rrule(x):
    return x * x, lambda ybar: (None,) if ybar is None else (2 * x * np.abs(ybar),)


# A constant cotangent assumed: uses the mean of ybar (linear, but right only for a uniform ybar).
@rrule(square, arrays(shape=(4,)))
def square_mean_cotangent_rrule(x):
    return x * x, lambda ybar: (None,) if ybar is None else (2 * x * np.mean(ybar),)


def leaky_relu(x):
    return np.where(x > 0, x, 0.1 * x)


# Wrong only for negative inputs: the slope below zero is taken as 1.
@rrule(leaky_relu, arrays(shape=(4,)))
def leaky_relu_slope_rrule(x):
    return leaky_relu(x), lambda ybar: (None,) if ybar is None else (np.where(x > 0, ybar, ybar),)


def absolute(x):
    return np.abs(x)


# Wrong only for negative inputs: the sign is forgotten.
@rrule(absolute, arrays(shape=(3,)))
def abs_no_sign_rrule(x):
    return np.abs(x), lambda ybar: (None,) if ybar is None else (ybar * np.ones_like(x),)


def sin2(x):
    return np.sin(2 * x)


# A chain-rule factor missing.
@rrule(sin2, arrays(shape=(3,)))
def sin2_missing_factor_rrule(x):
    return np.sin(2 * x), lambda ybar: (None,) if ybar is None else (np.cos(2 * x) * ybar,)


def tanh(x):
    return np.tanh(x)


# A sign slip: 1 + t**2 instead of 1 - t**2.
@rrule(tanh, arrays(shape=(3,)))
def tanh_sign_rrule(x):
    t = np.tanh(x)
    return t, lambda ybar: (None,) if ybar is None else ((1 + t * t) * ybar,)


def col_mean(x):
    return x.mean(axis=0)


# Wrong only for non-square shapes: divides by the number of columns, not rows.
@rrule(col_mean, arrays(shape=st.tuples(_dims, _dims)))
def col_mean_wrong_count_rrule(x):
    n = x.shape[1]
    return x.mean(axis=0), lambda ybar: (None,) if ybar is None else (np.broadcast_to(ybar / n, x.shape).copy(),)


def matmul(a, b):
    return a @ b


# A missing transpose: right only when b is symmetric (never, for random b).
@rrule(matmul, arrays(shape=(3, 3)), arrays(shape=(3, 3)))
def matmul_missing_transpose_rrule(a, b):
    return a @ b, lambda ybar: (None, None) if ybar is None else (ybar @ b, a.T @ ybar)


def mul(a, b):
    return a * b


# The second argument's tangent uses the wrong factor (found and localised to argument 1).
@rrule(mul, arrays(shape=(2, 3)), arrays(shape=(2, 3)))
def mul_second_tangent_rrule(a, b):
    return a * b, lambda ybar: (None, None) if ybar is None else (ybar * b, ybar * b)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# Wrong only for float32: a hand-written "fast path" for single precision drops a factor.
@rrule(sigmoid, arrays(shape=(3,), dtype="float32"))
def sigmoid_f32_fastpath_rrule(x):
    s = (1.0 / (1.0 + np.exp(-x))).astype(x.dtype)
    if x.dtype == np.float32:
        d = s  # should be s * (1 - s)
    else:
        d = s * (1 - s)
    return s, lambda ybar: (None,) if ybar is None else ((d * ybar).astype(x.dtype),)


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


# The -s * <s, ybar> term is missing.
@rrule(softmax, arrays(shape=(4,)))
def softmax_missing_term_rrule(x):
    s = softmax(x)
    return s, lambda ybar: (None,) if ybar is None else (s * ybar,)


def sincos(x):
    return np.sin(x), np.cos(x)


# Tuple output: the two cotangents are swapped.
@rrule(sincos, arrays(shape=(3,)))
def sincos_swapped_rrule(x):
    s, c = np.sin(x), np.cos(x)

    def pullback(ybar):
        if ybar is None:
            return (None,)
        ys = 0.0 if ybar[0] is None else ybar[0]
        yc = 0.0 if ybar[1] is None else ybar[1]
        return (c * yc - s * ys,)

    return (s, c), pullback


def scale_by(x, s):
    return s * x


# The scalar argument's tangent ignores x.
@rrule(scale_by, arrays(shape=(3,)), floats(-3.0, 3.0))
def scale_by_scalar_tangent_rrule(x, s):
    return s * x, lambda ybar: (None, None) if ybar is None else (s * ybar, float(np.sum(ybar)))


def l2_penalised(x):
    return 0.5 * np.sum(x * x)


# Weight decay smuggled into the gradient: an affine, not linear, pullback.
@rrule(l2_penalised, arrays(shape=(3,)))
def weight_decay_in_pullback_rrule(x):
    return 0.5 * np.sum(x * x), lambda ybar: (None,) if ybar is None else (x * ybar + 1e-2 * x,)


def cube(x):
    return x**3


# Squared cotangent: nonlinear in ybar.
@rrule(cube, arrays(shape=(3,)))
def cube_squared_cotangent_rrule(x):
    return x**3, lambda ybar: (None,) if ybar is None else (3 * x * x * ybar * ybar,)


def cmul(z):
    return (2 + 1j) * z


# Complex: JAX's convention in a NumPy rrule (c * ybar instead of conj(c) * ybar).
@rrule(cmul, arrays(shape=(3,), dtype="complex128"))
def cmul_jax_convention_rrule(z):
    return (2 + 1j) * z, lambda ybar: (None,) if ybar is None else ((2 + 1j) * ybar,)


def abs2(z):
    return np.real(z * np.conj(z))


# Complex: |z|**2 with a conjugate too many (2 conj(z) instead of 2 z).
@rrule(abs2, arrays(shape=(3,), dtype="complex128"))
def abs2_conj_rrule(z):
    return abs2(z), lambda ybar: (None,) if ybar is None else (2 * np.conj(z) * ybar,)


def cexp(z):
    return np.exp(z)


# Complex: right for real inputs, wrong for complex ones (only the real part of the derivative).
@rrule(cexp, arrays(shape=(3,), dtype="complex128", max_value=3.0))
def cexp_real_part_rrule(z):
    y = np.exp(z)
    return y, lambda ybar: (None,) if ybar is None else (np.real(y) * ybar,)


def xabs(x):
    return x * np.abs(x)


# NaN at x == 0, where the function is smooth: 2 x**2 / |x|.
@rrule(xabs, arrays(shape=(3,)))
def xabs_nan_at_zero_rrule(x):
    return x * np.abs(x), lambda ybar: (None,) if ybar is None else (2 * x * x / np.abs(x) * ybar,)


def cube2(x):
    return x**3


# NaN at 0: 3 x**3 / x, a derivative written through the output.
@rrule(cube2, arrays(shape=(3,)))
def cube_through_output_rrule(x):
    y = x**3
    return y, lambda ybar: (None,) if ybar is None else (3 * y / x * ybar,)


LABELS = {
    "sum_ones_rrule": {"bug": "numeric", "expect": ["GG201", "GG202", "GG203", "GG301", "GG501"]},
    "square_drops_cotangent_rrule": {"bug": "numeric", "expect": ["GG201", "GG202", "GG203", "GG301", "GG501"]},
    "square_abs_cotangent_rrule": {"bug": "numeric", "expect": ["GG201", "GG202", "GG203", "GG501"]},
    "square_mean_cotangent_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "leaky_relu_slope_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "abs_no_sign_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "sin2_missing_factor_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "tanh_sign_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "col_mean_wrong_count_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "matmul_missing_transpose_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "mul_second_tangent_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "sigmoid_f32_fastpath_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "softmax_missing_term_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "sincos_swapped_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "scale_by_scalar_tangent_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "weight_decay_in_pullback_rrule": {"bug": "numeric", "expect": ["GG201", "GG202", "GG203", "GG301", "GG501"]},
    "cube_squared_cotangent_rrule": {"bug": "numeric", "expect": ["GG201", "GG202", "GG203", "GG501"]},
    "cmul_jax_convention_rrule": {"bug": "numeric", "expect": ["GG201", "GG205", "GG501"]},
    "abs2_conj_rrule": {"bug": "numeric", "expect": ["GG201", "GG205", "GG501"]},
    "cexp_real_part_rrule": {"bug": "numeric", "expect": ["GG201", "GG203", "GG501"]},
    "xabs_nan_at_zero_rrule": {"bug": "numeric", "expect": ["GG206", "GG301"]},
    "cube_through_output_rrule": {"bug": "numeric", "expect": ["GG206", "GG301"]},
}

"""Corpus: contract bugs (GG1xx), the structure of a rule before any number.

Each rule is a realistic slip; several are wrong only for some inputs
(non-square shapes, float32, broadcasting). Labels: bug class and the exact
check ids a correct gradguard reports.
"""

import numpy as np
from hypothesis import strategies as st

from gradguard import arrays, constant, rrule

_dims = st.integers(1, 4)
_matrices = st.tuples(_dims, _dims)


def square(x):
    return x * x


# GG101: the output alone, the pullback forgotten.
@rrule(square, arrays(shape=(3,)))
def no_pullback_rrule(x):
    return x * x


# GG101: the gradient itself instead of a function computing it.
@rrule(square, arrays(shape=(3,)))
def gradient_not_pullback_rrule(x):
    return x * x, 2 * x


def leaky_relu(x):
    return np.where(x > 0, x, 0.1 * x)


# GG102: the forward pass is plain relu (a "training" shortcut): differs only for negative inputs.
@rrule(leaky_relu, arrays(shape=(4,)))
def leaky_forward_relu_rrule(x):
    y = np.maximum(x, 0.0)
    slope = np.where(x > 0, 1.0, 0.1)
    return y, lambda ybar: (None,) if ybar is None else (slope * ybar,)


def scaled_dropout(x):
    return x


_MASK = np.array([2.0, 0.0, 2.0, 0.0])


# GG102: the forward applies the training-time dropout mask; the pullback is consistent with it.
@rrule(scaled_dropout, arrays(shape=(4,)))
def dropout_training_rrule(x):
    return x * _MASK, lambda ybar: (None,) if ybar is None else (ybar * _MASK,)


def mul(a, b):
    return a * b


# GG103: the second tangent is forgotten.
@rrule(mul, arrays(shape=(3,)), arrays(shape=(3,)))
def mul_missing_tangent_rrule(a, b):
    return a * b, lambda ybar: (None, None) if ybar is None else (ybar * b,)


def exp_(x):
    return np.exp(x)


# GG103: the tangent returned bare, not in a tuple.
@rrule(exp_, arrays(shape=(3,), max_value=5.0))
def exp_bare_tangent_rrule(x):
    y = np.exp(x)
    return y, lambda ybar: None if ybar is None else ybar * y


def total(x):
    return x.sum()


# GG104: a flat tangent for a matrix argument.
@rrule(total, arrays(shape=(2, 3)))
def sum_flat_tangent_rrule(x):
    return x.sum(), lambda ybar: (None,) if ybar is None else (np.full(x.size, ybar),)


def trace(a):
    return np.trace(a)


# GG104 only for non-square shapes: eye(rows) is right for a square matrix.
@rrule(trace, arrays(shape=_matrices))
def trace_eye_rows_rrule(a):
    return np.trace(a), lambda ybar: (None,) if ybar is None else (ybar * np.eye(a.shape[0]),)


def bmul(a, b):
    return a * b


# GG104 only with broadcasting: b's tangent is not summed over the broadcast axis.
@rrule(bmul, arrays(shape=(2, 3)), arrays(shape=(3,)))
def bmul_unreduced_rrule(a, b):
    return a * b, lambda ybar: (None, None) if ybar is None else (ybar * b, ybar * a)


def scale(x):
    return 2.0 * x


# GG105 only for float32: the tangent is promoted to float64.
@rrule(scale, arrays(shape=(3,), dtype="float32"))
def scale_f32_promotes_rrule(x):
    return 2.0 * x, lambda ybar: (None,) if ybar is None else (np.full(x.shape, 2.0) * ybar,)


def sq_norm(x):
    return np.sum(x * x)


# GG105: a complex tangent for a real argument (a stray complex factor left from a complex version).
@rrule(sq_norm, arrays(shape=(3,)))
def sq_norm_complex_tangent_rrule(x):
    return np.sum(x * x), lambda ybar: (None,) if ybar is None else ((2 + 0j) * x * ybar,)


def power(x, n):
    return x**n


# GG106: a tangent (zero) for the integer exponent.
@rrule(power, arrays(shape=(3,)), constant(3))
def power_int_tangent_rrule(x, n):
    return x**n, lambda ybar: (None, None) if ybar is None else (n * x ** (n - 1) * ybar, 0.0)


def shift(x, k):
    return np.roll(x, k)


# GG106: the pullback returns the shift amount's "tangent" as an array.
@rrule(shift, arrays(shape=(5,)), constant(2))
def roll_shift_tangent_rrule(x, k):
    return np.roll(x, k), lambda ybar: (None, None) if ybar is None else (np.roll(ybar, -k), np.zeros(1))


LABELS = {
    "no_pullback_rrule": {"bug": "contract", "expect": ["GG101"]},
    "gradient_not_pullback_rrule": {"bug": "contract", "expect": ["GG101"]},
    "leaky_forward_relu_rrule": {"bug": "contract", "expect": ["GG102", "GG503"]},
    "dropout_training_rrule": {"bug": "contract", "expect": ["GG102", "GG201", "GG203", "GG503"]},
    "mul_missing_tangent_rrule": {"bug": "contract", "expect": ["GG103"]},
    "exp_bare_tangent_rrule": {"bug": "contract", "expect": ["GG103"]},
    "sum_flat_tangent_rrule": {"bug": "contract", "expect": ["GG104"]},
    "trace_eye_rows_rrule": {"bug": "contract", "expect": ["GG104"]},
    "bmul_unreduced_rrule": {"bug": "contract", "expect": ["GG104"]},
    "scale_f32_promotes_rrule": {"bug": "contract", "expect": ["GG105"]},
    "sq_norm_complex_tangent_rrule": {"bug": "contract", "expect": ["GG105"]},
    "power_int_tangent_rrule": {"bug": "contract", "expect": ["GG106"]},
    "roll_shift_tangent_rrule": {"bug": "contract", "expect": ["GG106"]},
}

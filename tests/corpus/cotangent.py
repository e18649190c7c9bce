"""Corpus: cotangent bugs (GG3xx): the cotangents engines really pass (zero, None, shared buffers)."""

import numpy as np

from gradguard import arrays, rrule


def tanh(x):
    return np.tanh(x)


# GG301: a "division-safe" guard turns a zero cotangent into one.
@rrule(tanh, arrays(shape=(3,)))
def tanh_zero_guard_rrule(x):
    t = np.tanh(x)

    def pullback(ybar):
        if ybar is None:
            return (None,)
        safe = np.where(ybar == 0, 1.0, ybar)  # meant for a later division, applied too early
        return ((1 - t * t) * safe,)

    return t, pullback


def square(x):
    return x * x


# GG302: None (an unused output) is not handled, by a rule written for engines that pass None.
@rrule(square, arrays(shape=(3,)), unused_cotangent="none")
def square_no_none_rrule(x):
    return x * x, lambda ybar: (2 * x * ybar,)


# GG302: None is taken as a unit cotangent.
@rrule(square, arrays(shape=(3,)), unused_cotangent="none")
def square_none_as_one_rrule(x):
    def pullback(ybar):
        if ybar is None:
            ybar = 1.0
        return (2 * x * ybar,)

    return x * x, pullback


def sincos(x):
    return np.sin(x), np.cos(x)


# GG302 only for tuple outputs: None for the whole cotangent is handled, None for one output is not.
@rrule(sincos, arrays(shape=(3,)), unused_cotangent="none")
def sincos_partial_none_rrule(x):
    s, c = np.sin(x), np.cos(x)

    def pullback(ybar):
        if ybar is None:
            return (None,)
        return (c * ybar[0] - s * ybar[1],)

    return (s, c), pullback


def double(x):
    return 2.0 * x


# GG303: the cotangent is scaled in place.
@rrule(double, arrays(shape=(3,)))
def double_inplace_cotangent_rrule(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        ybar *= 2.0
        return (ybar,)

    return 2.0 * x, pullback


def relu(x):
    return np.maximum(x, 0.0)


# GG303 only where x <= 0: the relu pullback zeroes the cotangent in place.
@rrule(relu, arrays(shape=(4,)))
def relu_zeroes_cotangent_rrule(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        ybar[x <= 0] = 0.0
        return (ybar,)

    return np.maximum(x, 0.0), pullback


def mul(a, b):
    return a * b


# GG303 on one output of two tangents: b's tangent is computed into the cotangent's buffer.
@rrule(mul, arrays(shape=(3,)), arrays(shape=(3,)))
def mul_out_into_cotangent_rrule(a, b):
    def pullback(ybar):
        if ybar is None:
            return (None, None)
        da = ybar * b
        db = np.multiply(ybar, a, out=ybar)
        return (da, db)

    return a * b, pullback


LABELS = {
    "tanh_zero_guard_rrule": {"bug": "cotangent", "expect": ["GG201", "GG202", "GG203", "GG301", "GG501"]},
    "square_no_none_rrule": {"bug": "cotangent", "expect": ["GG302"]},
    "square_none_as_one_rrule": {"bug": "cotangent", "expect": ["GG302", "GG501"]},
    "sincos_partial_none_rrule": {"bug": "cotangent", "expect": ["GG302"]},
    "double_inplace_cotangent_rrule": {"bug": "cotangent", "expect": ["GG303"]},
    "relu_zeroes_cotangent_rrule": {"bug": "cotangent", "expect": ["GG303"]},
    "mul_out_into_cotangent_rrule": {"bug": "cotangent", "expect": ["GG303"]},
}

"""Correct rules: every isolation check passes on them."""

import numpy as np
from hypothesis import strategies as st

from gradguard import arrays, rrule


def softplus(x):
    return np.logaddexp(0.0, x)


@rrule(softplus, arrays(shape=(5,), min_value=-30.0, max_value=30.0))
def softplus_rrule(x):
    y = softplus(x)
    sig = 1.0 / (1.0 + np.exp(-x))
    return y, lambda ybar: (ybar * sig,)


def broadcast_mul(a, b):
    return a * b


def _unbroadcast(g, shape):
    """Sum a gradient over the axes that broadcasting added or stretched."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for axis, n in enumerate(shape):
        if n == 1 and g.shape[axis] != 1:
            g = g.sum(axis=axis, keepdims=True)
    return g


@rrule(broadcast_mul, arrays(shape=(2, 3)), arrays(shape=(3,)))
def broadcast_mul_rrule(a, b):
    return a * b, lambda ybar: (_unbroadcast(ybar * b, a.shape), _unbroadcast(ybar * a, b.shape))


def matmul(a, b):
    return a @ b


_shapes = st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4))


@rrule(matmul, args=_shapes.flatmap(lambda s: st.tuples(arrays(shape=(s[0], s[1])), arrays(shape=(s[1], s[2])))))
def matmul_rrule(a, b):
    return a @ b, lambda ybar: (ybar @ b.T, a.T @ ybar)

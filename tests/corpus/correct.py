"""Corpus: correct rules. Every check must pass on each, for every seed.

They cover what the buggy twins get wrong: non-unit cotangents, None for an
unused output, non-square and broadcast shapes, float32, complex inputs,
kinks, tuple outputs, scalar and constant arguments, and mutation done right
(a declared output buffer, a private workspace).
"""

import numpy as np
from hypothesis import strategies as st

from gradguard import arrays, constant, floats, rrule

_dims = st.integers(1, 4)
_matrices = st.tuples(_dims, _dims)


def _unbroadcast(g, shape):
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for axis, n in enumerate(shape):
        if n == 1 and g.shape[axis] != 1:
            g = g.sum(axis=axis, keepdims=True)
    return g


def square(x):
    return x * x


@rrule(square, arrays(shape=(3,)))
def square_rrule(x):
    return x * x, lambda ybar: (None,) if ybar is None else (2 * x * ybar,)


def total(x):
    return x.sum()


@rrule(total, arrays(shape=(3,)))
def sum_rrule(x):
    return x.sum(), lambda ybar: (None,) if ybar is None else (np.full(x.shape, ybar),)


def softplus(x):
    return np.logaddexp(0.0, x)


@rrule(softplus, arrays(shape=(5,), min_value=-30.0, max_value=30.0))
def softplus_rrule(x):
    sig = 1.0 / (1.0 + np.exp(-x))
    return softplus(x), lambda ybar: (None,) if ybar is None else (ybar * sig,)


def tanh(x):
    return np.tanh(x)


@rrule(tanh, arrays(shape=(3,)))
def tanh_rrule(x):
    t = np.tanh(x)
    return t, lambda ybar: (None,) if ybar is None else ((1 - t * t) * ybar,)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@rrule(sigmoid, arrays(shape=(3,), dtype="float32"))
def sigmoid_f32_rrule(x):
    s = (1.0 / (1.0 + np.exp(-x))).astype(x.dtype)
    return s, lambda ybar: (None,) if ybar is None else ((s * (1 - s) * ybar).astype(x.dtype),)


def bmul(a, b):
    return a * b


@rrule(bmul, arrays(shape=(2, 3)), arrays(shape=(3,)))
def broadcast_mul_rrule(a, b):
    return a * b, lambda ybar: (None, None) if ybar is None else (_unbroadcast(ybar * b, a.shape), _unbroadcast(ybar * a, b.shape))


def matmul(a, b):
    return a @ b


_shapes = st.tuples(_dims, _dims, _dims)


@rrule(matmul, args=_shapes.flatmap(lambda s: st.tuples(arrays(shape=(s[0], s[1])), arrays(shape=(s[1], s[2])))))
def matmul_rrule(a, b):
    return a @ b, lambda ybar: (None, None) if ybar is None else (ybar @ b.T, a.T @ ybar)


def col_mean(x):
    return x.mean(axis=0)


@rrule(col_mean, arrays(shape=_matrices))
def col_mean_rrule(x):
    m = x.shape[0]
    return x.mean(axis=0), lambda ybar: (None,) if ybar is None else (np.broadcast_to(ybar / m, x.shape).copy(),)


def trace(a):
    return np.trace(a)


@rrule(trace, arrays(shape=_matrices))
def trace_rrule(a):
    return np.trace(a), lambda ybar: (None,) if ybar is None else (ybar * np.eye(*a.shape),)


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


@rrule(softmax, arrays(shape=(4,)))
def softmax_rrule(x):
    s = softmax(x)
    return s, lambda ybar: (None,) if ybar is None else (s * (ybar - np.dot(s, ybar)),)


def logsumexp(x):
    m = x.max()
    return m + np.log(np.sum(np.exp(x - m)))


@rrule(logsumexp, arrays(shape=(4,)))
def logsumexp_rrule(x):
    y = logsumexp(x)
    return y, lambda ybar: (None,) if ybar is None else (np.exp(x - y) * ybar,)


def relu(x):
    return np.maximum(x, 0.0)


@rrule(relu, arrays(shape=(4,)))
def relu_rrule(x):
    mask = (x > 0).astype(x.dtype)
    return np.maximum(x, 0.0), lambda ybar: (None,) if ybar is None else (mask * ybar,)


def sincos(x):
    return np.sin(x), np.cos(x)


@rrule(sincos, arrays(shape=(3,)))
def sincos_rrule(x):
    s, c = np.sin(x), np.cos(x)

    def pullback(ybar):
        if ybar is None:
            return (None,)
        ys = 0.0 if ybar[0] is None else ybar[0]
        yc = 0.0 if ybar[1] is None else ybar[1]
        return (c * ys - s * yc,)

    return (s, c), pullback


def scale_by(x, s):
    return s * x


@rrule(scale_by, arrays(shape=(3,)), floats(-3.0, 3.0))
def scale_by_rrule(x, s):
    return s * x, lambda ybar: (None, None) if ybar is None else (s * ybar, float(np.dot(ybar, x)))


def power(x, n):
    return x**n


@rrule(power, arrays(shape=(3,)), constant(3))
def power_rrule(x, n):
    return x**n, lambda ybar: (None, None) if ybar is None else (n * x ** (n - 1) * ybar, None)


def cmul(z):
    return (2 + 1j) * z


@rrule(cmul, arrays(shape=(3,), dtype="complex128"))
def cmul_rrule(z):
    return (2 + 1j) * z, lambda ybar: (None,) if ybar is None else ((2 - 1j) * ybar,)


def abs2(z):
    return np.real(z * np.conj(z))


@rrule(abs2, arrays(shape=(3,), dtype="complex128"))
def abs2_rrule(z):
    return abs2(z), lambda ybar: (None,) if ybar is None else (2 * z * ybar,)


def xabs(x):
    return x * np.abs(x)


@rrule(xabs, arrays(shape=(3,)))
def xabs_rrule(x):
    return x * np.abs(x), lambda ybar: (None,) if ybar is None else (2 * np.abs(x) * ybar,)


def transpose(x):
    return x.T.copy()


@rrule(transpose, arrays(shape=_matrices))
def transpose_rrule(x):
    return x.T.copy(), lambda ybar: (None,) if ybar is None else (np.ascontiguousarray(ybar.T),)


def cumsum(x):
    return np.cumsum(x)


@rrule(cumsum, arrays(shape=(5,)))
def cumsum_rrule(x):
    return np.cumsum(x), lambda ybar: (None,) if ybar is None else (np.cumsum(ybar[::-1])[::-1].copy(),)


def exp_scalar(t):
    return float(np.exp(t))


@rrule(exp_scalar, floats(-5.0, 5.0))
def exp_scalar_rrule(t):
    y = float(np.exp(t))
    return y, lambda ybar: (None,) if ybar is None else (y * ybar,)


def scaled_into(x, out):
    """Writes 2 x into the output buffer ``out`` (mutated, declared) and returns a copy."""
    np.multiply(x, 2.0, out=out)
    return out.copy()


@rrule(scaled_into, arrays(shape=(3,)), constant(np.zeros(3)), mutates=(1,))
def scaled_into_rrule(x, out):
    y = scaled_into(x, out)
    return y, lambda ybar: (None, None) if ybar is None else (2.0 * ybar, None)


_WORKSPACE = np.empty(3)


def sum_of_cubes(x):
    """sum(x**3), computed in a private preallocated workspace."""
    np.multiply(x, x, out=_WORKSPACE)
    np.multiply(_WORKSPACE, x, out=_WORKSPACE)
    return float(_WORKSPACE.sum())


@rrule(sum_of_cubes, arrays(shape=(3,)))
def sum_of_cubes_workspace_rrule(x):
    y = sum_of_cubes(x)
    d = 3.0 * x * x  # a fresh residual per call, not the workspace
    return y, lambda ybar: (None,) if ybar is None else (d * ybar,)


def sort_values(x, work):
    """The sorted values of x, sorted in a caller-provided scratch array ``work`` (mutated, declared)."""
    work[...] = x
    work.sort()
    return work.copy()


@rrule(sort_values, arrays(shape=(4,)), constant(np.zeros(4)), mutates=(1,))
def sort_scratch_rrule(x, work):
    order = np.argsort(x, kind="stable")
    y = sort_values(x, work)

    def pullback(ybar):
        if ybar is None:
            return (None, None)
        g = np.zeros_like(x)
        g[order] = ybar
        return (g, None)

    return y, pullback


LABELS = {
    name: {"bug": "correct", "expect": []}
    for name in [
        "square_rrule",
        "sum_rrule",
        "softplus_rrule",
        "tanh_rrule",
        "sigmoid_f32_rrule",
        "broadcast_mul_rrule",
        "matmul_rrule",
        "col_mean_rrule",
        "trace_rrule",
        "softmax_rrule",
        "logsumexp_rrule",
        "relu_rrule",
        "sincos_rrule",
        "scale_by_rrule",
        "power_rrule",
        "cmul_rrule",
        "abs2_rrule",
        "xabs_rrule",
        "transpose_rrule",
        "cumsum_rrule",
        "exp_scalar_rrule",
        "scaled_into_rrule",
        "sum_of_cubes_workspace_rrule",
        "sort_scratch_rrule",
    ]
}

"""Corpus: state bugs (GG4xx): rules that are not pure functions of their inputs and cotangent.

Several are wrong only after a second call, only for negative inputs, or only
for some cotangents; all give right gradients when each forward is followed
by its own pullback once.
"""

import numpy as np

from gradguard import arrays, rrule


def normalise(x):
    return x / np.sqrt(np.sum(x * x) + 1.0)


# GG401: normalises in place without declaring mutates=.
@rrule(normalise, arrays(shape=(3,)))
def normalise_inplace_rrule(x):
    x0 = x.copy()
    n = np.sqrt(np.sum(x0 * x0) + 1.0)
    x /= n
    y = x.copy()

    def pullback(ybar):
        if ybar is None:
            return (None,)
        return (ybar / n - x0 * np.dot(x0, ybar) / n**3,)

    return y, pullback


def relu(x):
    return np.maximum(x, 0.0)


# GG401 only for negative inputs: np.maximum(x, 0, out=x) writes only where x < 0.
@rrule(relu, arrays(shape=(4,)))
def relu_out_into_input_rrule(x):
    mask = x > 0
    y = np.maximum(x, 0.0, out=x).copy()
    return y, lambda ybar: (None,) if ybar is None else (ybar * mask,)


def square(x):
    return x * x


# GG402: the pullback scales the primal argument in place to build the tangent.
@rrule(square, arrays(shape=(3,)))
def square_pullback_writes_input_rrule(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        x[...] *= 2 * ybar
        return (x.copy(),)

    return x * x, pullback


def exp_(x):
    return np.exp(x)


# GG402: the pullback computes the tangent in the output's memory (y *= ybar), which the caller holds.
@rrule(exp_, arrays(shape=(3,), max_value=5.0))
def exp_pullback_writes_output_rrule(x):
    y = np.exp(x)

    def pullback(ybar):
        if ybar is None:
            return (None,)
        np.multiply(y, ybar, out=y)  # the residual is the output itself
        return (y.copy(),)

    return y, pullback


def cube(x):
    return x**3


# GG403: the gradient accumulates into a buffer captured at forward time.
@rrule(cube, arrays(shape=(3,)))
def cube_accumulates_rrule(x):
    grad = np.zeros_like(x)

    def pullback(ybar):
        if ybar is None:
            return (None,)
        grad[...] += 3 * x * x * ybar
        return (grad.copy(),)

    return x**3, pullback


def sin_(x):
    return np.sin(x)


# GG403: residuals popped from a list: the second call raises.
@rrule(sin_, arrays(shape=(3,)))
def sin_pops_residual_rrule(x):
    saved = [np.cos(x)]

    def pullback(ybar):
        if ybar is None:
            return (None,)
        return (saved.pop() * ybar,)

    return np.sin(x), pullback


# GG403: the pullback returns the same buffer every call: a later call overwrites an earlier tangent.
@rrule(square, arrays(shape=(3,)))
def square_returns_shared_buffer_rrule(x):
    out = np.empty_like(x)

    def pullback(ybar):
        if ybar is None:
            return (None,)
        np.multiply(2 * x, ybar, out=out)
        return (out,)

    return x * x, pullback


_COS = np.empty(3)


# GG404: residuals in a module-level preallocated buffer, shared by every call.
@rrule(sin_, arrays(shape=(3,)))
def sin_shared_buffer_rrule(x):
    np.cos(x, out=_COS)
    return np.sin(x), lambda ybar: (None,) if ybar is None else (ybar * _COS,)


_CACHE = {}


def tanh(x):
    return np.tanh(x)


# GG404: a cache of residuals keyed on the shape, not the input.
@rrule(tanh, arrays(shape=(3,)))
def tanh_shape_cache_rrule(x):
    t = np.tanh(x)
    buf = _CACHE.setdefault(x.shape, np.empty(x.shape))
    buf[...] = 1 - t * t
    return t, lambda ybar: (None,) if ybar is None else (buf * ybar,)


_OUT = np.empty(3)


# GG404: the forward returns a preallocated output buffer that the next call overwrites.
@rrule(square, arrays(shape=(3,)))
def square_returns_buffer_rrule(x):
    np.multiply(x, x, out=_OUT)
    d = 2 * x
    return _OUT, lambda ybar: (None,) if ybar is None else (d * ybar,)


def identity(x):
    return x


# GG405 (a warning): the output is the input itself.
@rrule(identity, arrays(shape=(3,)))
def identity_returns_input_rrule(x):
    return x, lambda ybar: (None,) if ybar is None else (np.array(ybar, copy=True),)


def flatten(x):
    return x.reshape(-1)


# GG405 (a warning): the output is a view (reshape) of the input.
@rrule(flatten, arrays(shape=(2, 3)))
def flatten_view_rrule(x):
    return x.reshape(-1), lambda ybar: (None,) if ybar is None else (np.reshape(ybar, x.shape).copy(),)


def scale(x):
    return 3.0 * x


# GG406: stochastic rounding in the pullback from a global generator.
@rrule(scale, arrays(shape=(3,)))
def scale_stochastic_pullback_rrule(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        return (3.0 * ybar + np.random.default_rng().normal(scale=1e-3, size=x.shape),)

    return 3.0 * x, pullback


def dropout_eval(x):
    return x


# GG406 and GG102: dropout with a hidden, unseeded mask in the forward pass.
@rrule(dropout_eval, arrays(shape=(4,)))
def dropout_hidden_rng_rrule(x):
    mask = (np.random.default_rng().random(x.shape) < 0.5) * 2.0
    return x * mask, lambda ybar: (None,) if ybar is None else (ybar * mask,)


_LAZY = {}


def softplus(x):
    return np.logaddexp(0.0, x)


# GG404 only after a second call: residuals computed lazily on the first call and reused after.
@rrule(softplus, arrays(shape=(3,)))
def softplus_lazy_init_rrule(x):
    if "sig" not in _LAZY or _LAZY["sig"].shape != x.shape:
        _LAZY["sig"] = np.empty(x.shape)
    np.divide(1.0, 1.0 + np.exp(-x), out=_LAZY["sig"])
    sig = _LAZY["sig"]
    return softplus(x), lambda ybar: (None,) if ybar is None else (sig * ybar,)


LABELS = {
    "normalise_inplace_rrule": {"bug": "state", "expect": ["GG401", "GG501", "GG503"]},
    "relu_out_into_input_rrule": {"bug": "state", "expect": ["GG401", "GG501", "GG503"]},
    "square_pullback_writes_input_rrule": {"bug": "state", "expect": ["GG402", "GG403", "GG501"]},
    "exp_pullback_writes_output_rrule": {"bug": "state", "expect": ["GG402", "GG403"]},
    "cube_accumulates_rrule": {"bug": "state", "expect": ["GG403"]},
    "sin_pops_residual_rrule": {"bug": "state", "expect": ["GG403"]},
    "square_returns_shared_buffer_rrule": {"bug": "state", "expect": ["GG403"]},
    "sin_shared_buffer_rrule": {"bug": "state", "expect": ["GG404", "GG501"]},
    "tanh_shape_cache_rrule": {"bug": "state", "expect": ["GG204", "GG404", "GG501"]},
    "square_returns_buffer_rrule": {"bug": "state", "expect": ["GG404", "GG503"]},
    "identity_returns_input_rrule": {"bug": "state", "expect": ["GG405"]},
    "flatten_view_rrule": {"bug": "state", "expect": ["GG405"]},
    # The two rules below draw a new random sample on every call: the checks that compare separate calls
    # (GG202's two cotangents, GG204's nearby inputs, GG404, GG70x) would see the new sample and blame linearity,
    # second order or stale residuals for it, so they give no verdict on them; GG403 and GG406 name the cause.
    "scale_stochastic_pullback_rrule": {"bug": "state", "expect": ["GG201", "GG203", "GG301", "GG403", "GG406", "GG501"]},
    "dropout_hidden_rng_rrule": {"bug": "state", "expect": ["GG102", "GG201", "GG203", "GG406", "GG503"]},
    "softplus_lazy_init_rrule": {"bug": "state", "expect": ["GG404", "GG501"]},
}

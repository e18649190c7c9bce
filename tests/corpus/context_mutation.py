"""Corpus: rules that mutate their argument. Each is right in isolation (declared `mutates=(0,)`, a correct
pullback that accepts None) and wrong in context: an earlier `dot(x, x)` captured the argument by reference,
so its pullback reads the mutated values (GG501)."""

import numpy as np

from gradguard import arrays, rrule


def _none_or(tangent):
    return lambda ybar: (None,) if ybar is None else (tangent(ybar),)


def addone_(a):
    a += 1
    return a.sum()


@rrule(addone_, arrays(shape=(3,)), mutates=(0,))
def addone_rrule(a):
    y = addone_(a)
    return y, _none_or(lambda ybar: np.full(a.shape, ybar))


def scale_(a):
    a *= 2.0
    return a.sum()


@rrule(scale_, arrays(shape=(4,)), mutates=(0,))
def scale_rrule(a):
    y = scale_(a)
    return y, _none_or(lambda ybar: np.full(a.shape, 2.0 * ybar))


def square_(a):
    np.square(a, out=a)
    return a.sum()


@rrule(square_, arrays(shape=(3,)), mutates=(0,))
def square_rrule(a):
    old = a.copy()  # the pullback needs the values before the mutation
    y = square_(a)
    return y, _none_or(lambda ybar: 2.0 * old * ybar)


def tanh_(a):
    np.tanh(a, out=a)
    return a.sum()


@rrule(tanh_, arrays(shape=(3,), min_value=-2.0, max_value=2.0), mutates=(0,))
def tanh_rrule(a):
    y = tanh_(a)
    t = a.copy()  # tanh(a), saved
    return y, _none_or(lambda ybar: (1.0 - t * t) * ybar)


def exp_(a):
    np.exp(a, out=a)
    return a.sum()


@rrule(exp_, arrays(shape=(3,), min_value=-3.0, max_value=3.0), mutates=(0,))
def exp_rrule(a):
    y = exp_(a)
    e = a.copy()
    return y, _none_or(lambda ybar: e * ybar)


def cumsum_(a):
    np.cumsum(a, out=a)
    return a.sum()


@rrule(cumsum_, arrays(shape=(4,)), mutates=(0,))
def cumsum_rrule(a):
    y = cumsum_(a)
    n = a.shape[0]
    return y, _none_or(lambda ybar: np.arange(n, 0, -1, dtype=a.dtype) * ybar)


def normalize_(a):
    a /= np.sqrt(np.sum(a * a))
    return a.copy()


@rrule(normalize_, arrays(shape=(3,), min_value=0.5, max_value=2.0), mutates=(0,))
def normalize_rrule(a):
    norm = np.sqrt(np.sum(a * a))
    y = normalize_(a)
    u = y.copy()

    def pullback(ybar):
        if ybar is None:
            return (None,)
        return ((ybar - u * np.dot(u, ybar)) / norm,)

    return y, pullback


LABELS = {
    "addone_rrule": {"bug": "context", "what": "mutates a captured argument", "expect": ["GG501"]},
    "scale_rrule": {"bug": "context", "what": "mutates a captured argument", "expect": ["GG501"]},
    "square_rrule": {"bug": "context", "what": "mutates a captured argument", "expect": ["GG501"]},
    "tanh_rrule": {"bug": "context", "what": "mutates a captured argument", "expect": ["GG501"]},
    "exp_rrule": {"bug": "context", "what": "mutates a captured argument", "expect": ["GG501"]},
    "cumsum_rrule": {"bug": "context", "what": "mutates a captured argument", "expect": ["GG501"]},
    "normalize_rrule": {"bug": "context", "what": "mutates a captured argument", "expect": ["GG501"]},
}

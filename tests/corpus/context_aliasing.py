"""Corpus: aliased arguments (the same array twice, x and x.T). Per-slot tangents must add up."""

import numpy as np

from gradguard import arrays, rrule


def mul(a, b):
    return a * b


@rrule(mul, arrays(shape=(2, 2)), arrays(shape=(2, 2)))
def mul_rrule(a, b):
    return a * b, lambda g: (None, None) if g is None else (g * b, g * a)


@rrule(mul, arrays(shape=(2, 2)), arrays(shape=(2, 2)))
def mul_is_rrule(a, b):
    def pullback(g):
        if g is None:
            return (None, None)
        if a is b:  # the total derivative in each slot: counted twice
            return 2 * g * a, 2 * g * a
        return g * b, g * a

    return a * b, pullback


@rrule(mul, arrays(shape=(2, 2)), arrays(shape=(2, 2)))
def mul_shares_rrule(a, b):
    def pullback(g):
        if g is None:
            return (None, None)
        if np.shares_memory(a, b):  # "one variable": everything to the first slot, as if b were a itself
            return g * b + g * a, None
        return g * b, g * a

    return a * b, pullback


def mul_into_(y, x):
    y *= x
    return y.sum()


@rrule(mul_into_, arrays(shape=(3,)), arrays(shape=(3,)), mutates=(0,))
def mul_into_rrule(y, x):
    y_old = y.copy()
    out = mul_into_(y, x)

    def pullback(g):
        if g is None:
            return (None, None)
        return x * g, y_old * g  # reads x by reference: when x is y, it reads y * x

    return out, pullback


def matvec(w, x):
    return w @ x


@rrule(matvec, arrays(shape=(3, 3)), arrays(shape=(3,)))
def matvec_rrule(w, x):
    return w @ x, lambda g: (None, None) if g is None else (np.outer(g, x), w.T @ g)


LABELS = {
    "mul_rrule": {"bug": "correct", "expect": []},
    "mul_is_rrule": {"bug": "aliasing", "what": "special-cases aliasing", "expect": ["GG502"]},
    "mul_shares_rrule": {"bug": "aliasing", "what": "special-cases shared memory", "expect": ["GG502"]},
    "mul_into_rrule": {"bug": "aliasing", "what": "mutates one slot, reads the other by reference", "expect": ["GG501", "GG502"]},
    "matvec_rrule": {"bug": "correct", "expect": []},
}

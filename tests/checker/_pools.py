"""A max pool with overlapping windows (2 x 2, stride 1) and its rule as MyGrad writes it, shared by the tests of
GG201 and GG203 at ties that couple two windows."""

import numpy as np
from hypothesis import strategies as st

from gradguard.checker import rrule

# entry (1, 0) ties with -0 at (0, 1) in window (0, 0) and with (2, 0) in window (1, 0)
COUPLED_TIES = np.array([[-4.67, -0.0, -6.41], [0.0, -7.65, -9.48], [0.0, -3.84, -0.0]])


def pool2(x):
    return np.stack([x[:-1, :-1], x[:-1, 1:], x[1:, :-1], x[1:, 1:]]).max(axis=0)


def pool_rule(x, name, every_tie=False):
    """MyGrad's MaxPoolND rule at the one input ``x``: each window's cotangent to its first maximum (``every_tie``:
    to each of its maxima, the whole of it: a bug)."""

    @rrule(pool2, st.just(x), name=name)
    def pool_rrule(x):
        windows = np.stack([x[:-1, :-1], x[:-1, 1:], x[1:, :-1], x[1:, 1:]])
        first = windows.argmax(axis=0)

        def pullback(g):
            out = np.zeros_like(x)
            for (r, c), k in np.ndenumerate(first):
                for j in (np.flatnonzero(windows[:, r, c] == windows[k, r, c]) if every_tie else [k]):
                    out[r + j // 2, c + j % 2] += g[r, c]
            return (out,)

        return pool2(x), pullback

    return pool_rrule

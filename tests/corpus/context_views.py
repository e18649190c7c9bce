"""Corpus: rules right on the contiguous arrays isolation checks pass them, wrong on non-contiguous views."""

import numpy as np
from numpy.lib.stride_tricks import as_strided

from gradguard import arrays, rrule


def pair_sums(x):
    """x[0::2] + x[1::2], through a strided window that assumes x is contiguous."""
    n = x.shape[0] // 2
    return as_strided(x, shape=(n, 2), strides=(2 * x.itemsize, x.itemsize)).sum(axis=1)


@rrule(pair_sums, arrays(shape=(4,)))
def pair_sums_rrule(x):
    y = pair_sums(x)

    def pullback(g):
        if g is None:
            return (None,)
        return (np.repeat(g, 2),)

    return y, pullback


def square2d(x):
    return x * x


@rrule(square2d, arrays(shape=(2, 3)))
def square2d_rrule(x):
    def pullback(g):
        if g is None:
            return (None,)
        t = np.zeros_like(x)  # keeps x's memory order: Fortran for a transposed view
        t.reshape(-1)[:] = (2.0 * x * g).reshape(-1)  # a copy, not a view, when t is Fortran-ordered
        return (t,)

    return x * x, pullback


_W6 = np.linspace(-1.0, 1.0, 6)


def flat_weighted(x):
    """<w, x> over the elements in memory order."""
    return float(x.ravel(order="K") @ _W6)


@rrule(flat_weighted, arrays(shape=(2, 3)))
def flat_weighted_rrule(x):
    y = flat_weighted(x)
    return y, lambda g: (None,) if g is None else (_W6.reshape(x.shape) * g,)


LABELS = {
    "pair_sums_rrule": {"bug": "context", "what": "assumes contiguous strides", "expect": ["GG501", "GG503"]},
    # Declared on (2, 3) only: tied-weights no longer passes them W.T, a (3, 2) array their specs never make (a
    # primal that runs on W.T may read it as another thing), so their GG502 there is gone; transposed-view still
    # catches both (GG501).
    "square2d_rrule": {"bug": "aliasing", "what": "tangent written into a copy for Fortran-ordered views", "expect": ["GG501"]},
    "flat_weighted_rrule": {"bug": "aliasing", "what": "depends on memory order", "expect": ["GG501", "GG503"]},
}

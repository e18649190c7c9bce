"""The seed case in context: `addone_` is right alone and wrong inside a program.

`addone_rrule` mutates its argument (declared `mutates=(0,)`), its pullback
is `full(shape, ybar)` and accepts an unused output (None): it passes every
isolation check. Its safety matrix shows where it is unsafe: after
`y = dot(x, x)` the tape's `dot` pullback reads the mutated `x`
("captured-before", "read-after"); JAX refuses the mutation (read-only
buffers). `addone_safe_rrule` returns a new array instead: every cell right.
`scaled_sum_rrule` mutates only a private workspace: every cell right.

    gradguard check examples/mutation_in_context.py
"""

import numpy as np

from gradguard import arrays, rrule


def addone_(a):
    """Adds one to `a` in place and returns the sum."""
    a += 1
    return a.sum()


@rrule(addone_, arrays(shape=(3,)), mutates=(0,))
def addone_rrule(a):
    y = addone_(a)

    def pullback(ybar):
        if ybar is None:  # the output was not used
            return (None,)
        return (np.full(a.shape, ybar),)

    return y, pullback


def addone(a):
    """The same function written safely: a new array, no mutation."""
    return (a + 1).sum()


@rrule(addone, arrays(shape=(3,)))
def addone_safe_rrule(a):
    y = addone(a)
    return y, lambda ybar: (None,) if ybar is None else (np.full(a.shape, ybar),)


_WORKSPACE = np.empty(3)  # private: no caller ever sees it


def scaled_sum(a):
    """sum(3 a**2), computed in a preallocated workspace."""
    np.multiply(a, a, out=_WORKSPACE)
    np.multiply(_WORKSPACE, 3.0, out=_WORKSPACE)
    return float(_WORKSPACE.sum())


@rrule(scaled_sum, arrays(shape=(3,)))
def scaled_sum_rrule(a):
    y = scaled_sum(a)  # mutates only the workspace, never `a`
    da = 6.0 * a  # the residual is a fresh array of this call
    return y, lambda ybar: (None,) if ybar is None else (da * ybar,)

"""Aliased variables (seed: gradients with aliased variables, tied weights).

When one array reaches a rule through two slots (`x .* x'`, a layer and its
transposed twin sharing `W`), its gradient is the sum of the per-slot
tangents, and the engine does the adding. A rule must return each slot's own
partial derivative:

* `mul_rrule` does: every cell of its safety matrix is right, `mul(x, x)` and
  `mul(x, x.T)` included.
* `mul_alias_rrule` "helps" when both slots hold the very same array by
  returning the total derivative in each slot: right in isolation, doubled
  in `mul(x, x)` (GG502).
* `matvec_rrule` (`W @ x`) is right with tied weights `W` and `W.T`.
* `matvec_buffer_rrule` returns its weight gradient in a preallocated
  buffer. The isolation checks already flag the reuse (GG403, GG202); the
  matrix shows what it does in programs: with tied weights the second
  pullback overwrites the tangent the engine still holds from the first
  (GG502), and the same happens when the rule is called twice (GG501).

    gradguard check examples/aliasing.py
"""

import numpy as np

from gradguard import arrays, rrule


def mul(a, b):
    return a * b


@rrule(mul, arrays(shape=(2, 2)), arrays(shape=(2, 2)))
def mul_rrule(a, b):
    def pullback(g):
        if g is None:
            return (None, None)
        return g * b, g * a  # one partial per slot; engines add them over aliases

    return a * b, pullback


@rrule(mul, arrays(shape=(2, 2)), arrays(shape=(2, 2)))
def mul_alias_rrule(a, b):
    def pullback(g):
        if g is None:
            return (None, None)
        if a is b:  # BUG: the total derivative d(a*a)/da in each slot, so engines count it twice
            return 2 * g * a, 2 * g * a
        return g * b, g * a

    return a * b, pullback


def matvec(w, x):
    return w @ x


@rrule(matvec, arrays(shape=(3, 3)), arrays(shape=(3,)))
def matvec_rrule(w, x):
    def pullback(g):
        if g is None:
            return (None, None)
        return np.outer(g, x), w.T @ g

    return w @ x, pullback


_GRAD_W = np.zeros((3, 3))  # reused to save an allocation per backward pass


@rrule(matvec, arrays(shape=(3, 3)), arrays(shape=(3,)))
def matvec_buffer_rrule(w, x):
    x = x.copy()

    def pullback(g):
        if g is None:
            return (None, None)
        np.outer(g, x, out=_GRAD_W)  # BUG: every call hands out the same tangent buffer
        return _GRAD_W, w.T @ g

    return w @ x, pullback

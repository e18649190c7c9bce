"""A rule that reuses a preallocated buffer across calls (GG404).

Saving allocations by keeping residuals in a module-level buffer is a common
trick; the pullback then reads whatever the *latest* forward call wrote, so
the first call's gradient is wrong as soon as the rule is called twice.
"""

import numpy as np

from gradguard import arrays, rrule

_BUFFER = np.empty(3)


def square(x):
    return x * x


@rrule(square, arrays(shape=(3,)))
def square_buffered_rrule(x):
    _BUFFER[:] = 2.0 * x  # BUG: shared across calls
    return x * x, lambda ybar: (_BUFFER * ybar,)


@rrule(square, arrays(shape=(3,)))
def square_rrule(x):
    dx = 2.0 * x  # a fresh residual per call
    return x * x, lambda ybar: (dx * ybar,)

"""A pullback that mutates the cotangent it was given (GG303).

The cotangent belongs to the engine: it may be shared with other pullbacks
(fan-out), so scaling it in place corrupts their gradients.
"""

import numpy as np

from gradguard import arrays, rrule


def double(x):
    return 2.0 * x


@rrule(double, arrays(shape=(3,)))
def double_inplace_rrule(x):
    def pullback(ybar):
        ybar *= 2.0  # BUG: writes into the engine's cotangent
        return (ybar,)

    return 2.0 * x, pullback


@rrule(double, arrays(shape=(3,)))
def double_rrule(x):
    return 2.0 * x, lambda ybar: (2.0 * ybar,)

"""A correct rule: the sandbox must run it to a passing report."""

import numpy as np

from gradguard.checker import arrays, rrule


def scale(x):
    return 3.0 * x


@rrule(scale, arrays(shape=(3,)))
def scale_rrule(x):
    return scale(x), lambda ybar: (None if ybar is None else 3.0 * ybar,)

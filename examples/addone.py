"""The seed case: a rule for a function that mutates its argument.

`addone_ones_rrule` is the rule from the ChainRules documentation: its
pullback returns `ones` whatever the cotangent, so it is right only when the
cotangent is 1 (fails GG202, and GG201 for any other cotangent).
`addone_rrule` is the fix: `full(shape, ybar)`.
"""

import numpy as np

from gradguard import arrays, rrule


def addone_(a):
    """Adds one to `a` in place and returns the sum."""
    a += 1
    return a.sum()


@rrule(addone_, arrays(shape=(3,)), mutates=(0,))
def addone_ones_rrule(a):
    y = addone_(a)
    return y, lambda ybar: (np.ones(a.shape),)  # BUG: ignores the cotangent's value


@rrule(addone_, arrays(shape=(3,)), mutates=(0,))
def addone_rrule(a):
    y = addone_(a)
    return y, lambda ybar: (np.full(a.shape, ybar),)

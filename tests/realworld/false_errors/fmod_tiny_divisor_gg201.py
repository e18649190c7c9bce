"""GG201 on Chainer's fmod at divisors far below the finite differences' steps (found by the twelfth pass's probe).

Defect class 1 (kinks): fmod(x, d) = x - d * trunc(x / d) jumps wherever x / d crosses an integer. At
x = -8.42032710098587, d = 5.96e-8 (x / d = -141269646.56, not an integer) the nearest jump in d is 1.8e-16 away,
and at x = 0, d = -3.9e-212 (|x| < |d|) fmod is x itself: the rule's tangents (d/dx = 1, 1; d/dd = 141269646, 0)
are the exact derivatives. Finite differences at steps of 6e-6 and finer straddle millions of jumps and average
the sawtooth (0.0 and 0.00754636), and none of GG201's exemptions (at_kink, near_kinks, not linear, unresolved)
recognises a primal whose jumps are denser than any step. Exits 1 while the false error is there.
"""

import numpy as np
from hypothesis import strategies as st

from _common import reproduce
from gradguard import rrule

X = np.array([-8.42032710098587, 0.0])
D = np.array([5.960464477539063e-08, -3.8643076835899907e-212])


def fmod_(x, d):
    return np.fmod(x, d)


@rrule(fmod_, st.just(X), st.just(D))
def fmod_rrule(x, d):  # chainer/functions/math/fmod.py:28-32: gw, -fix(x / divisor) * gw
    return np.fmod(x, d), lambda g: (g, -np.fix(x / d) * g)


if __name__ == "__main__":
    reproduce(fmod_rrule, {"GG201"}, range(2))

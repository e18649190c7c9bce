"""A rule whose forward pass is not the primal: it branches on a training flag.

Users run `scaled_dropout` (the inference path, the identity); the rule's
forward applies the training-time mask, so AD differentiates a different
function from the one users run (GG102).
"""

import numpy as np

from gradguard import arrays, rrule

TRAINING = True
MASK = np.array([1.0, 0.0, 2.0, 0.0])  # a fixed "dropout" mask, scaled by 1/(1-p)


def scaled_dropout(x):
    """Inference-time dropout: the identity."""
    return x


@rrule(scaled_dropout, arrays(shape=(4,)))
def scaled_dropout_rrule(x):
    y = x * MASK if TRAINING else x  # BUG: differs from the primal while "training"
    return y, lambda ybar: (ybar * MASK if TRAINING else ybar,)

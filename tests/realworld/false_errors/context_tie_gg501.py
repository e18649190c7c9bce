"""GG501 in the `output-used` context for a rule at a kink (issue 12, defect class 1, first case).

Corpus rules: torch_max_binary_rrule and torch_clamp_min_rrule (`output-used`, `called-twice`, ...),
max_axis_ties_rrule (GG502 in `tied-weights`: autograd splits the cotangent evenly among tied maxima), and
hypot_rrule in `same-array-twice` (hypot(x, x) = sqrt(2) |x| at tiny x). The minimal case is PyTorch's
`max(Tensor self, Tensor other)` formula. At a tie
self == other, PyTorch gives the whole cotangent to `other`: the tangent's inner product with any direction
v is v_other * g, which lies between the one-sided directional derivatives min(v_self, v_other) * g and
max(v_self, v_other) * g, so it is a valid one-sided derivative, and GG201 (which has a near-kink guard)
passes. The context checks compare the program's gradient with a symmetric finite difference of the whole
program, which at the tie straddles the kink and returns the average of the two one-sided slopes; without
the guard, the correct rule is reported as a wrong gradient under every engine.
"""

import numpy as np
from hypothesis import strategies as st

from _common import reproduce
from gradguard import arrays, rrule


def maximum(self, other):
    return np.maximum(self, other)


_ties = st.sampled_from([-1.0, 0.0, 2.0])


@rrule(maximum, arrays(shape=(4,), elements=_ties), arrays(shape=(4,), elements=_ties))
def max_binary_rrule(self, other):
    result = np.maximum(self, other)
    # self: grad.clone().masked_fill_(self <= other, 0); other: grad.clone().masked_fill_(self > other, 0)
    return result, lambda grad: (np.where(self <= other, 0, grad), np.where(self > other, 0, grad))


if __name__ == "__main__":
    reproduce(max_binary_rrule, {"GG501", "GG502"})

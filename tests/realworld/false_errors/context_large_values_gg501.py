"""GG501 where the whole-program finite difference is inaccurate (issue 12, defect class 1, second case).

Corpus rules: torch_expm1_rrule (`called-twice`, `output-used`), exp_rrule (`output-used`, and GG502 in
`tied-weights`), gamma_rrule and norm_logpdf_rrule (`strided-view`).
PyTorch's expm1 formula, ``grad * (result + 1)``, is exact; GG201 passes it. In the contexts the program's
values reach e**20 (5e8), the central difference of the whole program at the chosen step carries an error
of the same order as the reported disagreement, and all four engines agree with each other (they run the
same pullback) while the finite difference alone disagrees. GG201 bounds its claim by the finite
difference's error estimate; the contexts do not, so the rule is reported wrong.
"""

import numpy as np

from _common import reproduce
from gradguard import arrays, rrule


def expm1(x):
    return np.expm1(x)


@rrule(expm1, arrays(shape=(3,), min_value=-20.0, max_value=20.0))
def expm1_rrule(self):
    result = np.expm1(self)
    return result, lambda grad: (grad * (result + 1),)  # derivatives.yaml: `self: grad * (result + 1)`


if __name__ == "__main__":
    reproduce(expm1_rrule, {"GG501", "GG502"})

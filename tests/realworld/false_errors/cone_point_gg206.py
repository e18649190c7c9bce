"""GG206/GG301 at a point where the derivative does not exist (issue 12, defect class 3).

Corpus rules: hypot_rrule, norm2_rrule, std_rrule, eigh_rrule (autograd). The minimal case is autograd's
vector 2-norm vjp, ``g / ans * x``. At x = 0 it returns 0/0 = NaN. gradguard's GG206 says "the primal is
finite and so is its derivative (finite differences give 0.0)", but ||x|| has no derivative at 0: along e_1
the one-sided slopes are +1 and -1 (printed below); the symmetric difference is 0 only because it averages
them. GG301 (zero cotangent gives NaN) is the same point: with no derivative, NaN is at most a warning that
suggests a subgradient (JAX's maintainers call NaN the intended answer there, jax-ml/jax#21723).
The same holds for hypot at (0, 0), std of a constant row, and eigh's eigenvectors at a repeated eigenvalue.
"""

import numpy as np

from _common import reproduce
from gradguard import arrays, rrule


def norm(x):
    return np.linalg.norm(x)


@rrule(norm, arrays(shape=(3,)))
def norm_rrule(x):
    ans = np.linalg.norm(x)
    return ans, lambda g: (g / ans * x,)  # autograd/numpy/linalg.py, norm_vjp, ord=None


if __name__ == "__main__":
    h, e1 = 1e-6, np.array([1.0, 0.0, 0.0])
    print(f"one-sided slopes of norm at 0 along e1: {norm(h * e1) / h:+.3f} (right), {-norm(-h * e1) / h:+.3f} (left)")
    reproduce(norm_rrule, {"GG206", "GG301"})

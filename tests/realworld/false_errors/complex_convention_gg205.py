"""GG205/GG201/GG501 on a complex rule written in its engine's documented convention (issue 12, class 7's
sibling: a convention that depends on the engine the rule is written for cannot be declared).

Corpus rules: abs_complex_rrule, angle_complex_rrule (autograd). autograd documents its complex convention
(docs/tutorial.md, "Complex numbers"): for a holomorphic primitive the vjp is f'(z) * g, the same convention
as JAX. Its abs vjp is ``g * conj(x) / |x|``. gradguard requires every NumPy rrule to follow ChainRules'
convention (the adjoint for the real inner product, here g * x / |x|) and reports the autograd rule as an
error under GG205, then again under GG201 and in the safety matrix (GG501), although gradguard's own GG205
message recognises the rule as JAX's convention. A rule option (or project setting) naming the convention
would let GG205 judge it by the convention its engine uses, as issue 12 asks for None cotangents (class 7).
"""

import numpy as np

from _common import reproduce
from gradguard import arrays, rrule


def absolute(x):
    return np.abs(x)


@rrule(absolute, arrays(shape=(3,), dtype="complex128", min_value=0.1, max_value=4.0))
def abs_complex_rrule(x):
    ans = np.abs(x)
    return ans, lambda g: (g * np.conj(x) / ans,)  # autograd's np_abs_vjp (replace_zero is a no-op off 0)


if __name__ == "__main__":
    reproduce(abs_complex_rrule, {"GG205", "GG201", "GG501"}, seeds=range(1))

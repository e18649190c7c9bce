"""Code that branches on "am I being differentiated?" (seed: `within_gradient`).

`gradguard.engines.within_gradient(x)` is True while the tape or JAX differentiates
`x`. The seed's program `x -> within_gradient(x) ? x^2 : x` computes `x`
when run but `x^2` under AD, so AD differentiates a different function:
Zygote and Diffractor gave 4.0, Yota 2.0 at x = 2. Run this file to see what
each of our engines gives beside the primal:

    python examples/within_gradient.py

For a rule, the same mismatch is a forward pass that is not the primal:
`square_when_differentiated` is the primal above and its rrule implements the
differentiated branch. In isolation the primal runs on plain arrays
(within_gradient is False), so GG102 reports the forward/primal mismatch, and
in every context the program's value under the tape and JAX differs from
what users run (GG503), with the gradient wrong against finite differences
of the program (GG501).
"""

from gradguard import engines
from gradguard import arrays, rrule


def seed_program(xp, x):
    """The seed: x^2 while differentiated, x otherwise (`xp` is numpy, the tape's tnp or jax.numpy)."""
    return x * x if engines.within_gradient(x) else x


def square_when_differentiated(x):
    return x * x if engines.within_gradient(x) else x


@rrule(square_when_differentiated, arrays(shape=(3,), min_value=0.5, max_value=3.0))
def square_when_differentiated_rrule(x):
    y = x * x  # BUG: the branch AD would take, not what the primal computes when run
    return y, lambda ybar: (None,) if ybar is None else (2 * x * ybar,)


if __name__ == "__main__":
    from gradguard.checker.contexts import compare_engines

    print("x -> within_gradient(x) ? x^2 : x at x = 2.0")
    for view in compare_engines(seed_program, 2.0):
        print(" ", view)
    print("(Zygote 4.0, Diffractor 4.0, Yota 2.0 in the seed discussion.)")

"""Test the tester: a non-finite tangent where the primal has a vertical tangent (no finite derivative).

MyGrad's cube root pulls back ``g / (3 * cbrt(x**2))``: at x = 0 that is inf for a nonzero cotangent and NaN for
a zero one, as JAX's and PyTorch's own rules give. ``cbrt`` has no finite derivative at 0 (its one-sided
difference quotients ``h**(-2/3)`` grow at every step), so GG206 and GG301 hold the non-finite value to a warning,
as they do at a cone point; they used to call it an error (the one-sided quotients agree, so the point passed for
a differentiable one), and GG206's message then claimed a derivative there. A NaN where the primal is smooth
stays an error.
"""

import re

import numpy as np

from gradguard.checker import arrays, rrule
from gradguard.checker.case import Case
from gradguard.checker.checks.registry import CHECKS
from gradguard.checker.reproducer import ReplayDraws


def cbrt(x):
    return np.cbrt(x)


@rrule(cbrt, arrays(shape=(2,), min_value=-2.0, max_value=2.0))
def cbrt_rrule(x):
    return np.cbrt(x), lambda g: (g / (3 * np.cbrt(x**2)),)


def cube(x):
    return x**3


@rrule(cube, arrays(shape=(2,), min_value=-2.0, max_value=2.0))
def cube_nan_at_zero_rrule(x):
    return x**3, lambda g: (3 * x**3 * g / x,)  # BUG: 0/0 at x = 0, where the cube is smooth


AT_ZERO = (np.array([0.0, 1.0]),)
GROWING = (r"the one-sided difference quotients of the output at \[0\] along this element grow at every step finite "
           r"differences can take \(3010\.02 at step 6e-06, 301002 at step 6e-09, 3\.01002e\+07 at step 6e-12, "
           r"3\.01002e\+09 at step 6e-15\), so they establish no finite derivative there")


def _problems(rule, check_id, draws):
    with np.errstate(all="ignore"):
        return list(CHECKS[check_id].fn(Case(rule, AT_ZERO, ReplayDraws(draws))) or ())


def test_a_zero_cotangent_at_a_vertical_tangent_is_a_warning_that_says_what_was_established():
    [problem] = _problems(cbrt_rrule, "GG301", [])
    assert problem.severity == "warning"
    assert re.fullmatch(
        r"the pullback of cbrt_rrule must return zero tangents for a zero cotangent, but the tangent for argument 0 "
        r"at \[0\] is nan, at a point where the primal has no derivative along this element: " + GROWING +
        r"\. A program that does not use the output still gets this value in its gradient\.", problem.message)


def test_a_non_finite_tangent_at_a_vertical_tangent_is_a_warning_for_any_cotangent():
    for cotangent in (np.array([0.0, 1.0]), np.array([1.0, 1.0])):
        [problem] = _problems(cbrt_rrule, "GG206", [cotangent])
        assert problem.severity == "warning"
        assert re.fullmatch(
            r"the pullback of cbrt_rrule returned (nan|inf) in the tangent for argument 0 at \[0\], where the primal "
            r"is finite, but " + GROWING + r"; 1 element\(s\) of this tangent are not finite\.", problem.message)
        assert problem.expected == "a finite value"


def test_a_nan_where_the_primal_is_smooth_stays_an_error():
    [problem] = _problems(cube_nan_at_zero_rrule, "GG301", [])
    assert problem.severity is None  # the check's own: an error
    assert problem.message == ("the pullback of cube_nan_at_zero_rrule must return zero tangents for a zero "
                               "cotangent, but the tangent for argument 0 at [0] is nan.")
    [problem] = _problems(cube_nan_at_zero_rrule, "GG206", [np.array([1.0, 1.0])])
    assert problem.severity is None
    assert re.fullmatch(r"the pullback of cube_nan_at_zero_rrule returned nan in the tangent for argument 0 at \[0\], "
                        r"where the primal is finite and has a derivative along this element \(its one-sided derivatives "
                        r"agree; finite differences give (-?1e-40|0)\); 1 element\(s\) of this tangent are not "
                        r"finite\.", problem.message), problem.message

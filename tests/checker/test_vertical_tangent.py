"""Test the tester: a non-finite tangent where the primal has a vertical tangent (no finite derivative).

MyGrad's cube root pulls back ``g / (3 * cbrt(x**2))``: at x = 0 that is inf for a nonzero cotangent and NaN for
a zero one, as JAX's and PyTorch's own rules give. ``cbrt`` has no finite derivative at 0 (its one-sided
difference quotients ``h**(-2/3)`` grow at every step), so GG206 and GG301 hold the non-finite value to a warning,
as they do at a cone point; they used to call it an error (the one-sided quotients agree, so the point passed for
a differentiable one), and GG206's message then claimed a derivative there. A NaN where the primal is smooth
stays an error.

JAX's own ``entr`` (``x * log(x)``, pulled back as ``g * (log(x) + 1)``) is the same at the edge of its domain:
at 0 its difference quotients from above grow like log(h) at every step (only logarithmically, so a 10-fold growth
per step was once required and missed it) and the primal is NaN below 0; the NaN it gives a zero cotangent there
is a warning too. A rule NaN at the edge of its domain where the one-sided derivative is finite
(``x**1.5`` at 0) stays an error, and so does a zero-cotangent NaN wherever the primal is finite.
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


def xlogx(x):  # 0 at 0, as scipy's and JAX's xlogy(x, x)
    return x * np.log(np.where(x == 0, 1.0, x))


@rrule(xlogx, arrays(shape=(2,), min_value=0.0, max_value=2.0))
def xlogx_rrule(x):  # jax.scipy.special's _xlogx rule: x_dot * (log(x) + 1)
    return xlogx(x), lambda g: (g * (np.log(x) + 1),)


def x_log_abs(x):
    return x * np.log(np.abs(np.where(x == 0, 1.0, x)))


@rrule(x_log_abs, arrays(shape=(2,), min_value=-2.0, max_value=2.0))
def x_log_abs_rrule(x):
    return x_log_abs(x), lambda g: (g * (np.log(np.abs(x)) + 1),)


def x_to_1_5(x):
    return x * np.sqrt(x)


@rrule(x_to_1_5, arrays(shape=(2,), min_value=0.0, max_value=2.0))
def x_to_1_5_rrule(x):
    return x * np.sqrt(x), lambda g: (1.5 * x * g / np.sqrt(x),)  # BUG: 0/0 at 0, where the derivative is 0


def log(x):
    return np.log(x)


@rrule(log, arrays(shape=(2,), min_value=0.0, max_value=2.0))
def log_rrule(x):
    return np.log(x), lambda g: (g / x,)  # 0/0 for a zero cotangent at 0, where log itself is -inf


@rrule(log, arrays(shape=(2,), min_value=0.0, max_value=2.0))
def log_ones_rrule(x):
    return np.log(x), lambda g: (np.ones_like(x) / x,)  # BUG: ignores the cotangent


AT_ZERO = (np.array([0.0, 1.0]),)
GROWING = (r"the one-sided difference quotients of the output at \[0\] along this element grow at every step finite "
           r"differences can take \(3010\.02 at step 6e-06, 301002 at step 6e-09, 3\.01002e\+07 at step 6e-12, "
           r"3\.01002e\+09 at step 6e-15\), so they establish no finite derivative there")


def _problems(rule, check_id, draws, at=AT_ZERO):
    with np.errstate(all="ignore"):
        return list(CHECKS[check_id].fn(Case(rule, at, ReplayDraws(draws))) or ())


def test_a_zero_cotangent_at_a_vertical_tangent_is_a_warning_that_says_what_was_established():
    [problem] = _problems(cbrt_rrule, "GG301", [])
    assert problem.severity == "warning"
    assert re.fullmatch(
        r"the pullback of cbrt_rrule must return zero tangents for a zero cotangent, but the tangent for argument 0 \(x\) "
        r"at \[0\] is nan, at a point where the primal has no derivative finite differences resolve along this "
        r"element: " + GROWING +
        r"\. A program that does not use the output still gets this value in its gradient\.", problem.message)


def test_a_non_finite_tangent_at_a_vertical_tangent_is_a_warning_for_any_cotangent():
    for cotangent in (np.array([0.0, 1.0]), np.array([1.0, 1.0])):
        [problem] = _problems(cbrt_rrule, "GG206", [cotangent])
        assert problem.severity == "warning"
        assert re.fullmatch(
            r"the pullback of cbrt_rrule returned (nan|inf) in the tangent for argument 0 \(x\) at \[0\], where the primal "
            r"is finite, but " + GROWING + r"; 1 element\(s\) of this tangent are not finite\.", problem.message)
        assert problem.expected == "a finite value"


def test_a_nan_where_the_primal_is_smooth_stays_an_error():
    [problem] = _problems(cube_nan_at_zero_rrule, "GG301", [])
    assert problem.severity is None  # the check's own: an error
    assert problem.message == ("the pullback of cube_nan_at_zero_rrule must return zero tangents for a zero "
                               "cotangent, but the tangent for argument 0 (x) at [0] is nan.")
    [problem] = _problems(cube_nan_at_zero_rrule, "GG206", [np.array([1.0, 1.0])])
    assert problem.severity is None
    assert re.fullmatch(r"the pullback of cube_nan_at_zero_rrule returned nan in the tangent for argument 0 \(x\) at \[0\], "
                        r"where the primal is finite and has a derivative along this element \(its one-sided derivatives "
                        r"agree; finite differences give (-?1e-40|0)\); 1 element\(s\) of this tangent are not "
                        r"finite\.", problem.message), problem.message


def _log_growth(side: str) -> str:
    quotients = r"-12\.0146 at step 6e-06, -18\.9223 at step 6e-09, -25\.8301 at step 6e-12, -32\.7378 at step 6e-15"
    which = (r"the one-sided difference quotients of the output at \[0\] along this element" if side == "both" else
             r"the difference quotients of the output at \[0\] from above along this element \(the primal is not "
             r"finite below this point\)")
    return which + r" grow at every step finite differences can take \(" + quotients + r"\), so they establish no " \
        r"finite derivative there"


def test_a_logarithmic_vertical_tangent_at_the_edge_of_the_domain_is_a_warning():
    [problem] = _problems(xlogx_rrule, "GG301", [])
    assert problem.severity == "warning"
    assert re.fullmatch(
        r"the pullback of xlogx_rrule must return zero tangents for a zero cotangent, but the tangent for argument 0 \(x\) "
        r"at \[0\] is nan, at a point where the primal has no derivative finite differences resolve along this "
        r"element: " + _log_growth("above")
        + r"\. A program that does not use the output still gets this value in its gradient\.", problem.message)
    # -inf for a unit cotangent: finite differences cannot straddle the edge, so GG206 establishes nothing there
    assert _problems(xlogx_rrule, "GG206", [np.array([1.0, 1.0])]) == []


def test_a_logarithmic_vertical_tangent_inside_the_domain_is_a_warning():
    [problem] = _problems(x_log_abs_rrule, "GG301", [])
    assert problem.severity == "warning"
    assert re.search(_log_growth("both"), problem.message), problem.message
    [problem] = _problems(x_log_abs_rrule, "GG206", [np.array([1.0, 1.0])])
    assert problem.severity == "warning" and problem.expected == "a finite value"
    assert re.fullmatch(r"the pullback of x_log_abs_rrule returned -inf in the tangent for argument 0 \(x\) at \[0\], where "
                        r"the primal is finite, but " + _log_growth("both") + r"; 1 element\(s\) of this tangent are "
                        r"not finite\.", problem.message), problem.message


def test_a_nan_at_the_edge_of_the_domain_where_the_derivative_is_finite_stays_an_error():
    [problem] = _problems(x_to_1_5_rrule, "GG301", [])
    assert problem.severity is None
    assert problem.message == ("the pullback of x_to_1_5_rrule must return zero tangents for a zero cotangent, but the "
                               "tangent for argument 0 (x) at [0] is nan.")


def test_a_zero_cotangent_where_the_primal_is_not_finite_is_a_warning_and_ignoring_it_stays_an_error():
    [problem] = _problems(log_rrule, "GG301", [])  # log(0) = -inf: no derivative there, but the NaN still leaks
    assert problem.severity == "warning"
    assert problem.message == ("the pullback of log_rrule must return zero tangents for a zero cotangent, but the "
                               "tangent for argument 0 (x) at [0] is nan, at a point where the primal's output at [0] is "
                               "-inf, so it has no derivative there. A program that does not use the output still "
                               "gets this value in its gradient.")
    for at in (AT_ZERO, (np.array([0.5, 1.0]),)):
        [problem] = _problems(log_ones_rrule, "GG301", [], at=at)
        assert problem.severity is None
        assert re.fullmatch(r"the pullback of log_ones_rrule must return zero tangents for a zero cotangent, but the "
                            r"tangent for argument 0 \(x\) at \[0\] is (inf|2\.0)\.", problem.message), problem.message


# -- beside a pole, not at a cone point: nothing established, so no claim ----------------------------
def reciprocal(x):
    return 1.0 / x


@rrule(reciprocal, arrays(shape=(2,)))
def reciprocal_rrule(x):  # -g / x**2: x**2 underflows to 0 at 1e-200, so a zero cotangent gives NaN
    return 1.0 / x, lambda g: (-g / x**2,)


def test_steps_that_straddle_a_pole_establish_no_cone_point_and_a_derivative_beyond_float64_is_a_warning():
    # 1/x at 1e-200 is smooth (derivative -1e400, beyond float64); steps of 6e-6 straddle its pole at 0, and their
    # one-sided "derivatives" (-1.7e5 and 1.7e5) change 1000-fold at a finer step: no claim of a missing
    # derivative. The pullback's own tangent for a unit cotangent is -inf, and no step resolves one: as Chainer's
    # digamma at 2.5e-175 (trigamma 1.6e349), 0 * inf there is a warning that says only that.
    [problem] = _problems(reciprocal_rrule, "GG301", [], at=(np.array([1e-200, 1.0]),))
    assert problem.severity == "warning"
    assert problem.message == (
        "the pullback of reciprocal_rrule must return zero tangents for a zero cotangent, but the tangent for argument "
        "0 (x) at [0] is nan, where finite differences establish no derivative of the output at [0] along this element (its "
        "one-sided slopes grow at every step float64 can take: a singularity nearer than any step), and the "
        "pullback's own tangent there for a unit cotangent is -inf. A program that does not use the output still "
        "gets this value in its gradient.")


@rrule(reciprocal, arrays(shape=(2,)))
def reciprocal_nan_unused_rrule(x):
    return 1.0 / x, lambda g: (-g / (x * x) if np.any(g) else np.full(x.shape, np.nan),)  # BUG: NaN when unused


def test_a_nan_for_a_zero_cotangent_beside_a_pole_whose_unit_tangent_is_finite_stays_an_error():
    [problem] = _problems(reciprocal_nan_unused_rrule, "GG301", [], at=(np.array([1e-100, 1.0]),))
    assert problem.severity is None, problem.message  # -1e200 for a unit cotangent: the derivative is a float64
    assert problem.message.endswith("is nan."), problem.message


def test_a_slope_that_overflows_float64_is_a_derivative_beyond_it():
    # 1/x at 2.2e-308 is 4.5e307; a step of 6e-6 to 1.7e5 gives a slope of 7e312, which is inf in float64
    [problem] = _problems(reciprocal_rrule, "GG301", [], at=(np.array([2.2250738585072014e-308, 1.0]),))
    assert problem.severity == "warning"
    assert ("finite differences establish no derivative of the output at [0] along this element (its one-sided "
            "slopes overflow float64 though its values are finite), and the pullback's own tangent there for a unit "
            "cotangent is -inf.") in problem.message, problem.message


def test_gg206_claims_no_derivative_where_finite_differences_resolve_none_beyond_float64():
    # Chainer's polygamma(1, x) at 1.8e-113 (its derivative -1.8e339): a NaN from 0 * inf where the cotangent
    # element is 0 drew a GG206 error saying "finite differences give 0.0" for a derivative they never resolved.
    assert _problems(reciprocal_rrule, "GG206", [np.array([0.0, 1.0])], at=(np.array([1e-200, 1.0]),)) == []
    [problem] = _problems(cube_nan_at_zero_rrule, "GG206", [np.array([0.0, 1.0])])  # smooth there: still an error
    assert problem.severity is None


# -- float16: steps that still move the element ------------------------------------------------------------------
# The float16 probe of the real-world corpus: chainer's sqrt at an all-zero input drew a GG301 error where float64
# and float32 warn. The finest steps (1e-9 of eps**(1/3) = 9.9e-11) are below float16's smallest number (6e-8), so
# 0 + step rounded to 0 and the quotients did not grow. Now they end at ten spacings of the element.
@rrule(cbrt, arrays(shape=(2,), dtype="float16", min_value=-2.0, max_value=2.0))
def cbrt_f16_rrule(x):
    y = np.cbrt(x)
    return y, lambda g: (g / (3 * y * y),)


@rrule(cube, arrays(shape=(2,), dtype="float16", min_value=-2.0, max_value=2.0))
def cube_nan_at_zero_f16_rrule(x):
    return x**3, lambda g: (3 * x * x * g * (x / x),)  # BUG: 0/0 at 0, where the derivative is 0


AT_ZERO_F16 = (np.array([0.0, 1.0], dtype=np.float16),)


def test_a_float16_vertical_tangent_is_found_at_steps_that_move_the_element():
    [problem] = _problems(cbrt_f16_rrule, "GG301", [], at=AT_ZERO_F16)
    assert problem.severity == "warning"
    assert re.fullmatch(
        r"the pullback of cbrt_f16_rrule must return zero tangents for a zero cotangent, but the tangent for argument 0 "
        r"\(x\) at \[0\] is nan, at a point where the primal has no derivative finite differences resolve along this "
        r"element: the one-sided difference quotients of the output at \[0\] along this element grow at every step "
        r"finite differences can take \(\S+ at step 0\.1, \S+ at step 0\.002, \S+ at step 3e-05, \S+ at step 6e-07\), "
        r"so they establish no finite derivative there\. A program that does not use the output still gets this value "
        r"in its gradient\.", problem.message), problem.message


def test_a_float16_nan_where_the_primal_is_smooth_stays_an_error():
    [problem] = _problems(cube_nan_at_zero_f16_rrule, "GG301", [], at=AT_ZERO_F16)
    assert problem.severity is None  # the check's own: an error
    assert problem.message == ("the pullback of cube_nan_at_zero_f16_rrule must return zero tangents for a zero "
                               "cotangent, but the tangent for argument 0 (x) at [0] is nan.")


# A cone point in float16: a norm of a zero row. At the 1000-fold finer step (9.9e-5) float16's x * x underflows, the
# primal reads flat and the sides did not "keep their values": an error where float64 warns. Narrow floats' sides are
# also compared at a 32-fold finer step.
def row_norm(x):
    return np.sqrt(np.sum(x * x, axis=1))


@rrule(row_norm, arrays(shape=(2, 3), dtype="float16", min_value=-2.0, max_value=2.0))
def row_norm_f16_rrule(x):
    n = row_norm(x)
    return n, lambda g: ((g / n)[:, None] * x,)


def test_a_float16_cone_point_is_found_where_float16_holds_the_finer_step():
    [problem] = _problems(row_norm_f16_rrule, "GG301", [], at=(np.zeros((2, 3), dtype=np.float16),))
    assert problem.severity == "warning"
    assert problem.message == (
        "the pullback of row_norm_f16_rrule must return zero tangents for a zero cotangent, but the tangent for argument "
        "0 (x) at [0, 0] is nan, at a point where the primal has no derivative finite differences resolve along this "
        "element: the one-sided derivatives of the output at [0] are -0.999693 (from below) and 0.999693 (from above) "
        "at steps 0.1 and 0.003. A program that does not use the output still gets this value in its gradient.")


# A cone float16 cannot hold at either step: MyGrad's 3-norm of a zero row, whose |t|**3 underflows below t = 0.004
# (float16's smallest number is 6e-8), reads flat at 0.003 too, and GG301 called the NaN an error where float64
# warns. Its sides are found on float64 copies of the arguments, and the finding says so.
def row_norm3(x):
    return np.sum(np.abs(x) ** 3, axis=1) ** (1 / 3)


@rrule(row_norm3, arrays(shape=(2, 3), dtype="float16", min_value=-2.0, max_value=2.0))
def row_norm3_f16_rrule(x):  # MyGrad's Norm backward (ord 3): |x|**2 * sign(x) * norm / sum(|x|**3) * grad
    n = row_norm3(x)
    return n, lambda g: (np.abs(x) ** 2 * np.sign(x) * (n / np.sum(np.abs(x) ** 3, axis=1))[:, None] * g[:, None],)


def test_a_float16_cone_point_no_float16_step_holds_is_found_on_float64_copies():
    [problem] = _problems(row_norm3_f16_rrule, "GG301", [], at=(np.zeros((2, 3), dtype=np.float16),))
    assert problem.severity == "warning"
    assert problem.message == (
        "the pullback of row_norm3_f16_rrule must return zero tangents for a zero cotangent, but the tangent for "
        "argument 0 (x) at [0, 0] is nan, at a point where the primal has no derivative finite differences resolve "
        "along this element: the one-sided derivatives of the output at [0] are -1 (from below) and 1 (from above) at "
        "steps 6e-06 and 6e-09 on float64 copies of the arguments. A program that does not use the output still gets "
        "this value in its gradient.")


def test_a_float16_nan_beside_a_cone_point_stays_an_error():
    # the same rule at [0, 0, 0.0039]: a smooth point, where sum(|x|**3) underflows in the pullback alone
    [problem] = _problems(row_norm3_f16_rrule, "GG301", [],
                          at=(np.array([[0, 0, 0.003906], [1, 1, 1]], dtype=np.float16),))
    assert problem.severity is None
    assert problem.message.startswith("the pullback of row_norm3_f16_rrule must return zero tangents for a zero "
                                      "cotangent, but the tangent for argument 0 (x) at [0, ")


# A derivative no float16 holds: TensorFlow's rsqrt gradient, -0.5 * g * y**3, at x = 1e-6 in float16, where the
# derivative is -4.9e8 and float16 ends at 65504. A unit cotangent gives -inf, its correct rounding, and a zero one
# 0 * -inf = NaN: GG301 called that an error, where float64 warns at a derivative float64 cannot hold.
def rsqrt(x):
    return 1.0 / np.sqrt(x)


@rrule(rsqrt, arrays(shape=(3,), dtype="float16", min_value=1e-6, max_value=10.0))
def rsqrt_f16_rrule(x):
    y = rsqrt(x)
    return y, lambda g: (-0.5 * g * (y * y * y),)


@rrule(cbrt, arrays(shape=(2,), dtype="float16", min_value=-2.0, max_value=2.0))
def cbrt_squared_f16_rrule(x):  # MyGrad's Cbrt backward: grad / (3 * cbrt(a**2)), whose a**2 underflows in float16
    return np.cbrt(x), lambda g: (g / (3 * np.cbrt(x**2)),)


def test_a_float16_derivative_beyond_float16_is_a_warning_that_says_so():
    [problem] = _problems(rsqrt_f16_rrule, "GG301", [], at=(np.array([1e-6, 1.0, 4.0], dtype=np.float16),))
    assert problem.severity == "warning"
    assert re.fullmatch(
        r"the pullback of rsqrt_f16_rrule must return zero tangents for a zero cotangent, but the tangent for argument "
        r"0 \(x\) at \[0\] is nan, where the derivative of the sum of the outputs along this element, -4\.9\d+e\+08 by "
        r"finite differences on float64 copies of the arguments, is beyond float16's largest number \(65504\), and the "
        r"pullback's own tangent there for a unit cotangent is -inf\. A program that does not use the output still "
        r"gets this value in its gradient\.", problem.message), problem.message


def test_a_float16_nan_where_float16_holds_the_derivative_stays_an_error():
    # x = 1e-7: the derivative is 15500, a float16 number; the pullback's x**2 underflows to 0 and divides by it
    [problem] = _problems(cbrt_squared_f16_rrule, "GG301", [], at=(np.array([1e-7, 1.0], dtype=np.float16),))
    assert problem.severity is None
    assert problem.message == ("the pullback of cbrt_squared_f16_rrule must return zero tangents for a zero "
                               "cotangent, but the tangent for argument 0 (x) at [0] is nan.")


# A singularity float16's steps do not show: TensorFlow's atan2 gradient at y = 0, x = -0 in float16 (atan2 jumps from
# -pi/2 through pi to pi/2 there). Its slopes grow at every step float64 can take, and float64 warns; float16's
# quotients, from steps that end at ten spacings of the element, did not, and GG301 called the NaN an error.
def atan2(y, x):
    return np.arctan2(y, x)


@rrule(atan2, arrays(shape=(2,), dtype="float16"), arrays(shape=(2,), dtype="float16"))
def atan2_f16_rrule(y, x):
    def pullback(g):
        grad_inv = g / (np.square(y) + np.square(x))
        return x * grad_inv, -y * grad_inv

    return np.arctan2(y, x), pullback


def test_a_float16_singularity_float64_steps_resolve_is_a_warning():
    at = (np.array([1.0, 0.0], dtype=np.float16), np.array([1.0, -0.0], dtype=np.float16))
    [problem] = _problems(atan2_f16_rrule, "GG301", [], at=at)
    assert problem.severity == "warning"
    assert re.fullmatch(
        r"the pullback of atan2_f16_rrule must return zero tangents for a zero cotangent, but the tangent for argument "
        r"0 \(y\) at \[1\] is nan, where finite differences on float64 copies of the arguments establish no derivative "
        r"of the output at \[1\] along this element \(.*\), and the pullback's own tangent there for a unit cotangent "
        r"is nan\. A program that does not use the output still gets this value in its gradient\.",
        problem.message), problem.message

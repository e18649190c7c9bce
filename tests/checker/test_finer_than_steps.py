"""No verdict where a function's pieces are finer than every finite-difference step (`kinks.unresolved_element`).

Found on Chainer's fmod backward (tests/realworld/correct_chainer.py), a correct rule: ``fmod(x, d)`` jumps by
``|d|`` wherever ``x / d`` crosses an integer, so along ``d`` its pieces are ``d**2 / |x|`` wide (2e-15 at
x = 7.15, d = -1.2e-7; narrower than the spacing of floats at d = 2e-256), and along ``x`` at ``x = 0`` they are
``|d|`` wide. Its tangents (1 along x, ``-trunc(x / d)`` along d) are the exact derivatives, which no step from
6e-6 down to 6e-15 sees: finite differences there average the sawtooth. GG201, GG206, GG301 and the safety
matrix called the rule wrong at every seed of the real-world corpus. Such an element is recognised by the
function itself, one element at a time: at the finest steps its one-sided slopes scatter from step to step where
a smooth function's lie on a line, or, for a small element, they differ from its slopes at steps 1000 times its
own spacing. A wrong fmod rule at an ordinary input is still reported.
"""

import numpy as np
import pytest
from hypothesis import strategies as st

from gradguard.checker import arrays, check, rrule
from gradguard.checker.kinks import unresolved_element

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def fmod_(x, d):
    return np.fmod(x, d)


def _one(v):
    return np.array([v])


@pytest.mark.parametrize("f, args, i, unresolved", [
    (fmod_, (_one(-3.4782552850749573), _one(2.0466727397420063e-256)), 1, True),  # pieces finer than floats at d
    (fmod_, (_one(-8.42032710098587), _one(5.960464477539063e-08)), 1, True),  # pieces 4e-16 wide: slopes scatter
    (fmod_, (_one(7.1476530282373645), _one(-1.1920928960000001e-07)), 1, True),  # regular at 6e-15, 6e7 at 2.6e-20
    (fmod_, (_one(0.0), _one(-3.8643076835899907e-212)), 0, True),  # along x: pieces 3.9e-212 wide
    (fmod_, (_one(-8.42), _one(2.5)), 1, False),  # an ordinary divisor: pieces far wider than the steps
    (fmod_, (_one(-8.42), _one(2.5)), 0, False),
    (lambda x: np.diff(x), (np.array([8.4, 8.4 + 1e-9, 3.0]),), 0, False),  # a cancelling difference
    (np.sin, (np.array([np.pi, 1e5]),), 0, False),  # smooth, at a root and at a large argument
    (np.exp, (_one(700.0),), 0, False),  # smooth and huge
    (lambda x: np.maximum(x, 0.0), (_one(0.0),), 0, False),  # a kink at x: each side's slopes settle
    (np.floor, (_one(2.5),), 0, False),  # flat between jumps far from x
    (np.tanh, (np.array([0.3], dtype=np.float32),), 0, False),
    (np.multiply, (_one(5.85e-198), _one(5.85e-198)), 0, False),  # a product that underflows to 0 at finer steps
    (np.cbrt, (_one(7.026045e-224),), 0, True),  # smooth, but curving within 1e-223 of x: slope 2e148 there, 3e9 at 6e-15
    (np.cbrt, (_one(1.0),), 0, False),
    (np.sin, (_one(1e-200),), 0, False),  # a small element of a function that is straight on the steps' scale
], ids=["fmod-d-subfloat", "fmod-d-6e-8", "fmod-d-micro", "fmod-x-at-0", "fmod-d-ordinary", "fmod-x-ordinary",
        "diff", "sin", "exp", "relu-at-kink", "floor", "tanh-float32",
        "underflow", "cbrt-tiny", "cbrt-one", "sin-tiny"])
def test_unresolved_element_tells_pieces_finer_than_the_steps_from_smooth_functions_and_kinks(f, args, i, unresolved):
    assert (unresolved_element(f, args, i, 0) is not None) is unresolved


# The inputs at which the real-world corpus's fmod rule drew its false errors (seeds 0, 2 and 9 of the ten-seed run),
# each with elements whose pieces are finer than the steps beside ordinary ones.
PIECES_FINER_THAN_STEPS = [
    (np.array([-8.42032710098587, 0.0]), np.array([5.960464477539063e-08, -3.8643076835899907e-212])),
    (np.array([-3.4782552850749573, 0.66387005459506554]), np.array([2.0466727397420063e-256, 1.1920928960000001e-07])),
    (np.array([7.1476530282373645, 10.0]), np.array([-1.1920928960000001e-07, -2.00001])),
]


@rrule(fmod_, st.sampled_from([x for x, _ in PIECES_FINER_THAN_STEPS]),
       st.sampled_from([d for _, d in PIECES_FINER_THAN_STEPS]))
def fmod_rrule(x, d):  # chainer/functions/math/fmod.py:28-32: gw, -fix(x / divisor) * gw
    return np.fmod(x, d), lambda g: (g, -np.fix(x / d) * g)


@rrule(fmod_, arrays(shape=(2, 3), min_value=-10.0, max_value=10.0),
       arrays(shape=(2, 3), min_value=0.5, max_value=10.0))
def fmod_sign_flipped_rrule(x, d):
    return np.fmod(x, d), lambda g: (g, np.fix(x / d) * g)  # BUG: d/dd fmod(x, d) is -trunc(x / d)


def _errors_at_seeds(rule, seeds=range(3)) -> dict[int, list[str]]:
    """Every check of ``rule`` at each seed: its error findings' messages, by seed."""
    return {seed: [f.message for f in check(rule, seed=seed, rule_timeout_s=0).rules[0].findings if f.severity == "error"]
            for seed in seeds}


def test_a_correct_fmod_where_its_pieces_are_finer_than_the_steps_gets_no_error():
    assert _errors_at_seeds(fmod_rrule) == {0: [], 1: [], 2: []}


def test_a_wrong_fmod_at_ordinary_inputs_is_still_reported():
    result = check(fmod_sign_flipped_rrule, seed=0, select=["GG201"]).rules[0]
    assert [f.check_id for f in result.findings] == ["GG201"]
    assert result.findings[0].message.startswith(
        "the pullback of fmod_sign_flipped_rrule disagrees with finite differences of the primal: cotangent for "
        "argument 1 (d) at ")


# -- elements far smaller than the steps, beside huge ones --------------------------------------------------------
# ChainRules.jl's cbrt rule (tests/realworld/correct_chainrules.py), correct to 2e-16 (mpmath): at inputs mixing entries
# near 1e-200 with entries near 1e+200, steps of 6e-15 and more cross cbrt's vertical tangent at 0 beside the tiny
# entries, and the contraction's rounding (the huge entries' values) hides what they do there. GG201 reported
# "expected 0.0 (finite differences)" at an element of 7e-224 whose derivative is 2e148, and a kink where entries
# meet with one-sided "derivatives" of -1.2e50 and 1.2e50 where both are 5.2e123; GG501 the same in `output-used`.
TINY_BESIDE_HUGE = [
    np.array([[3.261973e+182, 1.0e+007, 1.0], [1.375780e-186, 1.0, 1.0]]),
    np.array([[-1.269223e+292, 7.013330e+016, 6.600475e+016], [-4.203213e+016, 7.026045e-224, -1.435656e+290]]),
]


def cbrt_(x):
    return np.cbrt(x)


@rrule(cbrt_, st.sampled_from(TINY_BESIDE_HUGE))
def cbrt_rrule(x):  # JuliaDiff/ChainRules.jl fastmath_able.jl: inv(3 * Ω ^ 2)
    omega = np.cbrt(x)
    return omega, lambda dy: (dy * (1 / (3 * omega ** 2)),)


@rrule(cbrt_, arrays(shape=(2, 3), min_value=0.5, max_value=10.0))
def cbrt_missing_third_rrule(x):
    omega = np.cbrt(x)
    return omega, lambda dy: (dy / omega ** 2,)  # BUG: the derivative is 1 / (3 cbrt(x)**2)


def test_a_correct_cbrt_at_tiny_entries_beside_huge_ones_gets_no_error():
    assert _errors_at_seeds(cbrt_rrule) == {0: [], 1: [], 2: []}


def test_a_wrong_cbrt_at_ordinary_inputs_is_still_reported():
    result = check(cbrt_missing_third_rrule, seed=0).rules[0]
    assert {f.check_id for f in result.findings if f.severity == "error"} >= {"GG201", "GG501"}
    gg201 = next(f for f in result.findings if f.check_id == "GG201")
    assert gg201.message.startswith("the pullback of cbrt_missing_third_rrule disagrees with finite differences of the "
                                    "primal: cotangent for argument 0 (x) at ")


# -- an input of several scales: steps fit for none of its small elements --------------------------------------------
# The same cbrt rule at seed 3 of the real-world corpus: an element of -1.4e-9 beside entries of 4e16 to 9e104. The
# default steps (0.018 down to 2e-9 with the confirming tables) cross cbrt's vertical tangent at 0 beside it and read
# slopes of 76, 765, 7700 and 78000 from table to table, each give or take most of itself, where the derivative is
# 2.7e5; and steps fine enough for it lose the large entries' moves, whose outputs' rounding (cbrt(1.5e34) = 2.4e11)
# swamps what such steps do. GG201 said "expected -51.4882 (finite differences), got -531657". Tested again at each
# of the input's scales (`by_scales`), each group of elements at steps of its own size, the rule agrees; and a wrong
# rule's message holds up what those steps resolve.
SEVERAL_SCALES = np.array([[9.126323576670767e+104, -4.44076105365553e+16, -5.818114497290794e+16],
                           [1.4664965481252084e+34, -1.4041680307380093e-09, 3.978500796016916e-240]])
SEVERAL_SCALES_DRAWS = [  # the cotangent, then the direction, as the check drew them
    np.array([[0.0, 0.4007729591068161, -1.4755455442532077], [3.176182904570018, -2.00001, 0.43953918373618084]]),
    (np.array([[-3.1167120004341164, 3.7653813194012464, 0.6928533856114205], [3.3747419279615904, 3.2015084004785415,
                                                                              0.0]]),),
]


@rrule(cbrt_, arrays(shape=(2, 3), min_value=0.5, max_value=10.0))
def cbrt_clamped_rrule(x):
    omega = np.cbrt(x)
    return omega, lambda dy: (dy * np.minimum(1 / (3 * omega ** 2), 1e5),)  # BUG: the slope is not 1e5 near 0


def test_a_correct_cbrt_at_an_input_of_several_scales_passes_gg201():
    from gradguard.checker.reproducer import replay

    replay(cbrt_rrule, "GG201", (SEVERAL_SCALES,), SEVERAL_SCALES_DRAWS)


@pytest.mark.parametrize("rule, got, test", [
    (cbrt_missing_third_rrule, "-1.59497e+06", "<pullback(ybar), v> = -5.10631e+06, 3.4e+06 apart where the tolerance allows 5.3"),
    (cbrt_clamped_rrule, "-200001.0", "<pullback(ybar), v> = -640305, 1.1e+06 apart where the tolerance allows 1.9"),
], ids=["missing-third", "clamped"])
def test_a_wrong_cbrt_at_an_input_of_several_scales_is_reported_with_what_its_own_scales_resolve(rule, got, test):
    from gradguard.checker.reproducer import replay

    with pytest.raises(AssertionError) as failed:
        replay(rule, "GG201", (SEVERAL_SCALES,), SEVERAL_SCALES_DRAWS)
    # cbrt's derivative times the cotangent at [1, 1] is -2.00001 / (3 cbrt(-1.4e-9)**2) = -531657; the default steps
    # said -51.4882 there, and -75.8951 for the whole test, whose value is -1.7021e+06
    assert str(failed.value) == (
        f"GG201 pullback disagrees with finite differences: the pullback of {rule.name} disagrees with finite "
        f"differences of the primal: cotangent for argument 0 (x) at [1, 1]: expected -531657 (finite differences), got "
        f"{got} (dot-product test: <ybar, J v> = -1.7021e+06 by finite differences, {test}).")


# In float32 (a 2x3 cbrt over all finite float32 numbers, seed 2 before this fix): -1e-5 and 6e-8 beside entries of
# 1e16 to 6e16. Float32's groups span less (its first steps move an element by 5e-3 of its size, and its largest one
# must still move by a hundred spacings at the finest): the three groups resolve, and the rule agrees.
FLOAT32_SCALES = np.array([[3.156408e+16, -1e-05, -1.29101e+16], [5.960464e-08, 5.895184e+16, 5.593181e+16]],
                          dtype=np.float32)
FLOAT32_SCALES_DRAWS = [
    np.array([[3.056556, -3.371178, 0.0], [-1.715473, -3.20217, -3.610528]], dtype=np.float32),
    (np.array([[0.0, 0.793165, -3.091804], [0.5, 0.295711, 3.33226]], dtype=np.float32),),
]


@rrule(cbrt_, arrays(shape=(2, 3), dtype=np.float32))
def cbrt_float32_rrule(x):
    omega = np.cbrt(x)
    return omega, lambda dy: (dy * (1 / (3 * omega ** 2)),)


def test_a_correct_float32_cbrt_at_an_input_of_several_scales_passes_gg201():
    from gradguard.checker.reproducer import replay

    replay(cbrt_float32_rrule, "GG201", (FLOAT32_SCALES,), FLOAT32_SCALES_DRAWS)


# Seed 36 of the same rule: an element of -5e-324, the smallest subnormal number, beside entries of 2e16 to 9e149.
# cbrt's derivative there is 1.15e215, which no finite difference in float64 reaches: the least step moves the element
# by its own size, across cbrt's vertical tangent at 0. GG201 said "expected 0.0 (finite differences), got
# 1.82485e+215"; the input is now not judged, with the reason. A function straight at that scale is still judged there.
SUBNORMAL = np.array([[2.821220000144724e+16, -8.972872466824922e+149, -1.1224230700990578e-244],
                      [-5e-324, 2.0260748827352816e+16, -6.347973172112064e+16]])
SUBNORMAL_DRAWS = [
    np.array([[0.0, 1.062301899949376, 0.0], [1.5880752054136886, 0.99999, 3.654449359190197]]),
    (np.array([[0.627822867793209, 3.480246086485394, 3.95039771914065], [-3.1931072300221928, -0.5, 0.0]]),),
]


def cbrt_and_triple_(x):
    return np.stack([np.cbrt(x[0]), 3.0 * x[1]])


@rrule(cbrt_and_triple_, arrays(shape=(2,)))
def cbrt_and_triple_rrule(x):
    omega = np.cbrt(x[0])
    return np.stack([omega, 3.0 * x[1]]), lambda dy: (np.stack([dy[0] / (3 * omega ** 2), 3.0 * dy[1]]),)


# -1.4e-15 under cbrt beside a subnormal number in a straight function: the default steps resolve neither; cbrt's element
# at its own scale, and the subnormal one at steps of 1e5 of its spacings, where 3 x is exact, resolve both
STRAIGHT_AT_SUBNORMAL = (np.array([-1.4041680307380093e-15, -5e-324]),)
STRAIGHT_AT_SUBNORMAL_DRAWS = [np.array([1.0, 1.0]), (np.array([1.0, 1.0]),)]


def test_a_correct_cbrt_at_a_subnormal_element_is_not_judged_there():
    from gradguard.checker.reproducer import replay

    with pytest.raises(AssertionError) as failed:
        replay(cbrt_rrule, "GG201", (SUBNORMAL,), SUBNORMAL_DRAWS)
    assert str(failed.value) == (
        "GG201 did not apply to this input: finite differences established no derivative to judge the pullback by at "
        "any input drawn; at the first: an element of the input is subnormal, so small that no step its float type can "
        "take is small beside it, and at the finest steps that move it well above rounding the primal's slopes do not "
        "settle")


def test_a_straight_function_at_a_subnormal_element_is_measured_at_steps_of_many_spacings():
    from gradguard.checker.case import Case
    from gradguard.checker.checks._vjp import at_own_scale, by_scales
    from gradguard.checker.reproducer import ReplayDraws, replay

    case = Case(cbrt_and_triple_rrule, STRAIGHT_AT_SUBNORMAL, ReplayDraws(STRAIGHT_AT_SUBNORMAL_DRAWS))
    ybar, v = STRAIGHT_AT_SUBNORMAL_DRAWS[0], STRAIGHT_AT_SUBNORMAL_DRAWS[1]
    subnormal, floored = at_own_scale(case, ybar, (np.array([0.0, 1.0]),), 5e-324)
    assert floored and float(subnormal.value) == pytest.approx(3.0, rel=1e-6) and subnormal.error < 0.01
    cbrt_slope = 1 / (3 * np.cbrt(STRAIGHT_AT_SUBNORMAL[0][0]) ** 2)
    right = by_scales(case, ybar, v, (np.array([cbrt_slope, 3.0]),), case.tol)
    assert right.agrees and float(right.total.value) == pytest.approx(cbrt_slope + 3.0, rel=1e-9)
    wrong = by_scales(case, ybar, v, (np.array([cbrt_slope, 2.0]),), case.tol)
    assert not wrong.agrees and not wrong.unresolvable and float(wrong.total.value) == pytest.approx(cbrt_slope + 3.0, rel=1e-9)
    replay(cbrt_and_triple_rrule, "GG201", STRAIGHT_AT_SUBNORMAL, STRAIGHT_AT_SUBNORMAL_DRAWS)


# -- stairs: values rounded inside the primal far beyond its output's rounding --------------------------------------
# DeZero's sigmoid cross-entropy (a precision probe of oreilly-japan/deep-learning-from-scratch-3): sigmoid is
# tanh(x / 2) / 2 + 1 / 2, so at x = 32 the loss term -log(1 - sigmoid(x)) sees 1 - sigmoid(x) as a few hundred
# multiples of 2**-53: flat over 0.0085 in x, then a jump. DeZero's backward gives sigmoid(x), the slope of the
# function the primal computes to within those stairs; GG201 (finite differences of 0 with an error of 1e-10) and
# the safety matrix called it wrong at most seeds.
def _sigmoid(x):
    return np.tanh(x * 0.5) * 0.5 + 0.5


def neg_log_one_minus_sigmoid(x):
    return -np.log(1 - _sigmoid(x))


@pytest.mark.parametrize("f, x, stairs", [
    (neg_log_one_minus_sigmoid, 32.0, True),  # flat over 0.0085 at every step finite differences take
    (neg_log_one_minus_sigmoid, 30.0, True),  # x on a narrow stair between wide ones
    (neg_log_one_minus_sigmoid, 36.0, True),  # two stairs below log(0) = inf
    (neg_log_one_minus_sigmoid, 21.18, True),  # stairs 2e-7 wide, finer than the steps
    (lambda x: np.sum(neg_log_one_minus_sigmoid(x)) / 2, 32.0, True),  # a scalar output
    (neg_log_one_minus_sigmoid, 5.0, False),  # 1 - sigmoid(x) is far from its last bits
    (lambda x: np.logaddexp(0.0, x), 32.0, False),  # the same loss computed stably
    (lambda x: np.maximum(x, 0.0), -1e-3, False),  # a kink beyond the steps: it moves on one side only
    (lambda x: np.maximum(np.abs(x) - 1e-9, 0.0), 0.0, False),  # a dead zone: its sides move at every sample
    (np.floor, 2.5, False),  # a staircase by design, its stairs far wider than any step looks
    (lambda x: np.clip(x, -1.0, 1.0), 5.0, False),  # flat
    (np.exp, 3.0, False),
], ids=["loss-32", "loss-30", "loss-36", "loss-21", "loss-sum", "loss-5", "stable-32", "relu-beyond", "dead-zone", "floor",
        "clip-flat", "exp"])
def test_staircase_tells_values_rounded_inside_the_primal_from_flat_and_smooth_ones(f, x, stairs):
    from gradguard.checker.kinks import staircase

    assert (staircase(f, (_one(x),), 0, 0) is not None) is stairs


@rrule(neg_log_one_minus_sigmoid, arrays(shape=(1,), min_value=30.0, max_value=36.0))
def dezero_loss_rrule(x):  # DeZero's backward through Neg, Log, Sub and Sigmoid: gy * p
    p = _sigmoid(x)
    d = 1 - p
    return -np.log(d), lambda gy: (gy / d * p * (1 - p),)


@rrule(neg_log_one_minus_sigmoid, arrays(shape=(2,), min_value=18.0, max_value=22.0))
def dezero_loss_doubled_rrule(x):
    p = _sigmoid(x)
    return -np.log(1 - p), lambda gy: (2 * gy * p,)  # BUG: twice the slope


def test_a_correct_rule_of_a_primal_in_stairs_gets_no_error():
    assert _errors_at_seeds(dezero_loss_rrule) == {0: [], 1: [], 2: []}


def test_a_wrong_rule_where_the_stairs_are_finer_than_the_steps_is_still_reported():
    result = check(dezero_loss_doubled_rrule, seed=0, select=["GG201"]).rules[0]
    assert [f.message for f in result.findings] == [
        "the pullback of dezero_loss_doubled_rrule disagrees with finite differences of the primal: cotangent for "
        "argument 0 (x) at [0]: expected 1 (finite differences), got 2 (dot-product test: <ybar, J v> = 2 by finite "
        "differences, <pullback(ybar), v> = 4, 2 apart where the tolerance allows 5.7e-06)."]


# -- what the scales' test reads: NumPy scalars, integer outputs beside float ones ----------------------------------
def cbrt_times_(x, n):
    return np.cbrt(x) * n, np.argmax(np.atleast_1d(x))


@rrule(cbrt_times_, arrays(shape=()), arrays(shape=(), min_value=1.0, max_value=4.0))
def cbrt_times_rrule(x, n):
    omega = np.cbrt(x)
    return cbrt_times_(x, n), lambda dy: (dy[0] * n / (3 * omega ** 2), dy[0] * omega)


@pytest.mark.parametrize("scale, agrees", [(1.0, True), (2.0, False)], ids=["right", "doubled"])
def test_the_scales_test_reads_numpy_scalars_and_integer_outputs(scale, agrees):
    """A 0-d input gives NumPy scalars (np.float64, np.int64), not arrays: each group's probe weighs them too."""
    from gradguard.checker.case import Case
    from gradguard.checker.checks._vjp import by_scales
    from gradguard.checker.reproducer import ReplayDraws

    args = (np.array(-1.4041680307380093e-09), np.array(3.0))
    case = Case(cbrt_times_rrule, args, ReplayDraws([]))
    ybar = (np.array(-2.00001), None)
    tangents = cbrt_times_rrule.rrule(*args)[1](ybar)
    tangents = (tangents[0] * scale, tangents[1])
    v = (np.array(3.2015084004785415), None)
    found = by_scales(case, ybar, v, tangents, case.tol)
    assert found.agrees is agrees and found.total is not None
    assert float(found.total.value) == pytest.approx(float(tangents[0]) / scale * 3.2015084004785415, rel=1e-9)

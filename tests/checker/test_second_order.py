"""Test the tester: GG204 for NumPy rules (the tape differentiates the rrule and the pullback).

Each broken rule passes every first-order check and fails GG204 with its exact message; its correct twin
passes. A rule the tape cannot run is skipped with the reason, never an error."""

import re

import numpy as np
from hypothesis import strategies as st
import pytest

from gradguard.checker import arrays, check, rrule

NUM = r"(-?[0-9.e+-]+|nan|inf)"
FIRST_ORDER = ["GG201", "GG202", "GG301"]

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def findings(rule, check_id="GG204", **kwargs):
    report = check(rule, select=[check_id], **kwargs)
    return report, [f for f in report.findings if f.check_id == check_id]


def skipped(report, check_id="GG204"):
    return [s["reason"] for r in report.rules for s in r.checks_skipped if s["id"] == check_id]


def first_order_findings(rule):
    return [f"{f.check_id}: {f.message}" for f in check(rule, select=FIRST_ORDER).findings]


# -- a residual detached from the input -------------------------------------------------------------
def sin(x):
    return np.sin(x)


@rrule(sin, arrays(shape=(3,)))
def sin_detached(x):
    slope = np.array(np.cos(x))  # the stored derivative, copied out of the trace
    return np.sin(x), lambda ybar: (ybar * slope,)


@rrule(sin, arrays(shape=(3,)))
def sin_traced(x):
    slope = np.cos(x)
    return np.sin(x), lambda ybar: (ybar * slope,)


DETACHED = (
    rf"the second order of sin_detached is wrong with respect to the input: along a random direction u, "
    rf"d/dt <w, pullback at \(x \+ t u\)\(ybar\)> = {NUM} by finite differences of the pullback, but the tape's "
    rf"derivative of the pullback \(the rrule and pullback run on traced arrays\) gives {NUM}\. Traced values "
    rf"were read as plain ones \(np\.asarray/np\.array at test_second_order\.py:\d+\); the tape treats what is "
    rf"computed from such a copy as a constant\."
)


def test_detached_residual_passes_first_order_and_fails_second_order() -> None:
    assert first_order_findings(sin_detached) == []
    _, found = findings(sin_detached)
    assert found, "GG204 missed a residual copied out of the trace"
    assert re.fullmatch(DETACHED, found[0].message), found[0].message
    assert float(found[0].actual) == 0.0  # the tape sees a constant slope
    assert found[0].location == "the input"


def test_traced_residual_passes() -> None:
    report, found = findings(sin_traced)
    assert found == [] and skipped(report) == []


# -- a pullback whose use of the cotangent is nonlinear in what it traces ----------------------------
def square(x):
    return x * x


@rrule(square, arrays(shape=(3,)))
def square_rescaled(x):
    def pullback(ybar):
        size = 1.0 + np.sqrt(np.sum(ybar * ybar))  # rescale the cotangent for range, then undo it
        unit = ybar / size
        return (unit * float(size) * 2 * x,)  # float() reads the scale out of the trace

    return x * x, pullback


@rrule(square, arrays(shape=(3,)))
def square_plain(x):
    return x * x, lambda ybar: (ybar * 2 * x,)


RESCALED = (
    rf"the second order of square_rescaled is wrong with respect to the cotangent: along a random cotangent "
    rf"direction c, d/ds <w, pullback\(ybar \+ s c\)> = {NUM} by finite differences of the pullback, but the "
    rf"tape's derivative of the pullback \(the rrule and pullback run on traced arrays\) gives {NUM}\. Traced "
    rf"values were read as plain ones \(float\(\) at test_second_order\.py:\d+\); the tape treats what is "
    rf"computed from such a copy as a constant\."
)


def test_cotangent_read_out_of_the_trace_passes_first_order_and_fails_second_order() -> None:
    assert first_order_findings(square_rescaled) == []
    _, found = findings(square_rescaled)
    assert found, "GG204 missed a pullback nonlinear in what it traces of ybar"
    assert re.fullmatch(RESCALED, found[0].message), found[0].message
    assert found[0].location == "the cotangent"


def test_linear_pullback_passes() -> None:
    report, found = findings(square_plain)
    assert found == [] and skipped(report) == []


# -- a huge tangent beside the cotangent's direction: its rounding is not a second derivative ----------
HUGE = np.array([[0.0, 0.0, 0.0], [301.25957, 0.0, 0.0]])  # exp(301) = 1e130 where the cotangent direction is 0


def exp(x):
    return np.exp(x)


@rrule(exp, st.just(HUGE))
def exp_at_huge(x):  # Chainer's exp backward, y * gy
    y = np.exp(x)
    return y, lambda ybar: (y * ybar,)


@rrule(exp, st.sampled_from([HUGE, np.ones((2, 3))]))  # at HUGE only rounding is resolved: the bug shows at ones
def exp_cotangent_detached(x):
    y = np.exp(x)

    def pullback(ybar):
        size = 1.0 + np.sqrt(np.sum(ybar * ybar))
        return (y * (ybar / size) * float(size),)  # BUG: float() reads the scale out of the trace

    return y, pullback


def test_rounding_of_a_huge_tangent_is_not_a_second_order_error() -> None:
    # (ahead - behind) / 2 of two inner products of 1e130 is their rounding: it was compared as exact (0.0
    # against the tape's right 1.21766) and drew a GG204 error on a linear pullback.
    report, found = findings(exp_at_huge)
    assert found == [] and skipped(report) == []


def test_a_cotangent_copied_out_of_the_trace_still_fails_where_it_can_be_resolved() -> None:
    _, found = findings(exp_cotangent_detached)
    assert found and found[0].location == "the cotangent", found
    assert "Traced values were read as plain ones (float()" in found[0].message


# -- near a pole: the finite differences must not reach across it -------------------------------------
def log(x):
    return np.log(x)


@rrule(log, arrays(shape=(3,), min_value=1e-3, max_value=100.0))
def log_detached(x):
    inverse = np.array(1 / x)  # the stored derivative, copied out of the trace
    return np.log(x), lambda g: (g * inverse,)


@rrule(log, arrays(shape=(3,), min_value=1e-3, max_value=100.0))
def log_near_pole(x):  # HIPS/autograd's log vjp, g / x: its pullback has a pole at 0, 1e-3 away
    return np.log(x), lambda g: (g / x,)


def test_log_pullback_near_its_pole_passes() -> None:
    report, found = findings(log_near_pole, seed=0)
    assert [f.message for f in found] == [] and skipped(report) == []


def test_detached_residual_near_a_pole_still_fails_second_order() -> None:
    _, found = findings(log_detached, seed=0)
    assert found, "GG204 missed a residual copied out of the trace near the pole"
    assert re.fullmatch(DETACHED.replace("sin_detached", "log_detached"), found[0].message), found[0].message
    assert float(found[0].actual) == 0.0


def test_finite_differences_across_a_pole_are_not_taken_as_the_derivative() -> None:
    """d/dt <w, g / (x + t u)> = -sum w g u / x**2 (by hand); at x = [1e-3, 1, 1] the first table's steps
    (1.8e-2) reach across the pole at 0 and its error estimate does not cover its mistake."""
    from gradguard.checker.checks.second_order import fd_directional, fd_settled

    x, g, u, w = np.array([1e-3, 1.0, 1.0]), np.array([1.0, -2.0, 0.5]), np.array([1.0, 1.0, -1.0]), np.array([1.0, 3.0, 1.0])
    exact = -float(np.sum(w * g * u / x**2))

    def pulled(x):
        return (g / x,)

    one_table = fd_directional(pulled, (x,), (u,), (w,))
    assert abs(one_table.value - exact) > 4 * one_table.error  # the hazard is real: one table is fooled
    settled = fd_settled(pulled, (x,), (u,), (w,), agrees=lambda d: abs(d.value - exact) <= d.error)
    assert abs(settled.value - exact) <= max(settled.error, 1e-9 * abs(exact)), (settled, exact)
    wrong = fd_settled(pulled, (x,), (u,), (w,), agrees=lambda d: abs(d.value + exact) <= d.error)  # the wrong sign
    assert abs(wrong.value - exact) <= max(wrong.error, 1e-9 * abs(exact)) and abs(wrong.value + exact) > 4 * wrong.error


# -- what the tape cannot run: skipped with the reason ---------------------------------------------
def softsign(x):
    return x / (1 + np.abs(x))


@rrule(softsign, arrays(shape=(3,)))
def softsign_untraceable(x):
    d = 1 / np.square(1 + np.fabs(x))  # np.fabs has no tape rule
    return x / (1 + np.abs(x)), lambda ybar: (ybar * d,)


@rrule(sin, arrays(shape=(3,)))
def sin_converts_input(x):
    x = np.asarray(x)  # a plain array from here on: nothing is traced
    return np.sin(x), lambda ybar: (ybar * np.cos(x),)


def test_untraceable_rule_is_skipped_with_the_reason() -> None:
    report, found = findings(softsign_untraceable)
    assert found == [] and report.rules[0].verdict != "error"
    (reason,) = skipped(report)
    assert reason.startswith("the tape cannot run softsign_untraceable on traced arrays, so its second order is "
                             "not checked: TraceError: np.fabs is not supported on Tracked values"), reason


_SIN_VJPS = {np.ndarray: lambda x: np.cos(x)}  # google/tangent's and autograd's pattern: a table keyed by type


@rrule(sin, arrays(shape=(3,)))
def sin_by_type_table(x):
    d = _SIN_VJPS[type(x)](x)
    return np.sin(x), lambda ybar: (ybar * d,)


def test_a_table_looked_up_by_type_is_named_not_the_tapes_class() -> None:
    """The skip reason quoted "KeyError: <class 'gradguard.engines.tape._tape.Tracked'>", gradguard's internals."""
    report, found = findings(sin_by_type_table)
    assert found == []
    (reason,) = skipped(report)
    assert reason == ("the tape cannot run sin_by_type_table on traced arrays, so its second order is not checked: "
                      "KeyError on a traced array's type: the rule looks up a table by type(x), and a traced array is "
                      "not an np.ndarray"), reason


def test_rule_converting_its_input_is_skipped_with_the_site() -> None:
    report, found = findings(sin_converts_input)
    assert found == []
    (reason,) = skipped(report)
    assert re.fullmatch(r"the output of sin_converts_input is read out of the trace \(np\.asarray/np\.array at "
                        r"test_second_order\.py:\d+\), so the tape cannot differentiate through it and its second "
                        r"order is not checked", reason), reason


def scale(x, s):
    return s * x


@rrule(scale, arrays(shape=(3,)), arrays(shape=()))
def scale_float_tangent(x, s):  # a Python float tangent for a 0-d argument: formatting, not a bug
    return s * x, lambda g: (s * g, float(np.sum(g * x)))


def test_tangent_returned_as_a_plain_value_is_skipped_with_the_site() -> None:
    report, found = findings(scale_float_tangent)
    assert found == []
    (reason,) = skipped(report)
    assert re.fullmatch(r"the pullback of scale_float_tangent returns its tangent for argument 1 read out of the "
                        r"trace \(float\(\) at test_second_order\.py:\d+\), so the tape cannot differentiate "
                        r"through it and its second order is not checked", reason), reason


@rrule(sin, arrays(shape=(3,)), mutates=(0,))
def sin_in_place(x):
    y = np.sin(x)
    x *= 1.0
    return y, lambda ybar: (ybar * np.cos(x),)


def test_mutating_rule_is_skipped() -> None:
    report, found = findings(sin_in_place)
    assert found == []
    assert any("mutates an argument" in r for r in skipped(report))


# -- correct rules with several arguments and tuple outputs pass ------------------------------------
def mul(a, b):
    return a * b


@rrule(mul, arrays(shape=(2, 3)), arrays(shape=(3,)))
def mul_rule(a, b):
    return a * b, lambda g: (g * b, np.sum(g * a, axis=0))


def polar(x):
    return np.cos(x), np.sin(x)


@rrule(polar, arrays(shape=(3,)))
def polar_rule(x):
    c, s = np.cos(x), np.sin(x)
    return (c, s), lambda g: (-g[0] * s + g[1] * c,)


def xabs(x):
    return x * np.abs(x)


@rrule(xabs, arrays(shape=(3,)))
def xabs_rule(x):  # the pullback has a kink at 0, where Hypothesis looks first
    return x * np.abs(x), lambda g: (2 * np.abs(x) * g,)


@pytest.mark.parametrize("rule", [mul_rule, polar_rule, xabs_rule], ids=["broadcast", "tuple-output", "kink"])
def test_correct_rules_pass(rule) -> None:
    report, found = findings(rule)
    assert [f.message for f in found] == [] and skipped(report) == []


# -- large inputs: a shallow first table, and today's full judgement where it disagrees ------------
LARGE = (2**7, 2**7 + 1)  # more elements than fd.LARGE_INPUT: finite differences take fd.budget's shallow table


def test_large_input_settles_on_the_shallow_table_when_it_agrees() -> None:
    from gradguard.checker.checks.second_order import fd_settled
    from gradguard.engines import fd

    x = np.random.default_rng(0).uniform(-2, 2, size=LARGE)
    assert x.size > fd.LARGE_INPUT
    u, w = np.ones(LARGE), np.random.default_rng(1).uniform(-1, 1, size=LARGE)
    exact = float(np.sum(w * -np.sin(x) * u))  # d/dt <w, cos(x + t u)>
    calls = []

    def pulled(x):
        calls.append(1)
        return (np.cos(x),)

    settled = fd_settled(pulled, (x,), (u,), (w,), agrees=lambda d: abs(d.value - exact) <= d.error + 1e-6 * abs(exact))
    # one base call, two rounding probes, two calls per level: the six-level table would take 15
    assert len(calls) == settled.evaluations == 3 + 2 * fd.SHALLOW_LEVELS


def test_large_input_judges_a_disagreement_exactly_as_a_small_one() -> None:
    """Where the shallow table disagrees with the claim, the verdict comes from the full table and then the
    confirmed one, as on small inputs: the same value, not the shallow table's."""
    from gradguard.checker.checks.second_order import fd_directional, fd_settled

    x = np.random.default_rng(0).uniform(-2, 2, size=LARGE)
    u, w = np.ones(LARGE), np.random.default_rng(1).uniform(-1, 1, size=LARGE)
    exact = float(np.sum(w * -np.sin(x) * u))

    def pulled(x):
        return (np.cos(x),)

    wrong = fd_settled(pulled, (x,), (u,), (w,), agrees=lambda d: abs(d.value + exact) <= d.error)  # the wrong sign
    full = fd_directional(pulled, (x,), (u,), (w,), confirm=True)
    assert (wrong.value, wrong.error, wrong.step) == (full.value, full.error, full.step)


@rrule(sin, arrays(shape=LARGE))
def sin_detached_large(x):
    slope = np.array(np.cos(x))
    return np.sin(x), lambda ybar: (ybar * slope,)


def test_detached_residual_on_a_large_input_still_fails_second_order() -> None:
    _, found = findings(sin_detached_large, max_examples=1)
    assert found, "GG204 missed a residual copied out of the trace on a large input"
    assert re.fullmatch(DETACHED.replace("sin_detached", "sin_detached_large"), found[0].message), found[0].message



def _hard_mish_gradient(ybar):
    # timm's hard_mish_bwd (timm/layers/activations_me.py): f' = x + 1 on [-2, 0], 1 above 0; f'' jumps at 0
    def pulled(x):
        m = (x >= -2.0) * 1.0
        return (ybar * np.where((x >= -2.0) & (x <= 0.0), x + 1.0, m),)

    return pulled


def test_a_kink_beside_a_second_kink_a_few_steps_away_is_still_a_kink() -> None:
    """timm's hard mish at seed 5 of the real-world corpus: the gradient has a kink at t = 0 (x[3] = 1.6e-300, at
    f''s jump) and another at x[5] = 1e-5, which the first step reaches and the next ten times finer does not: the
    one-sided slopes' difference shrank from the first step to the second only because the second kink dropped out.
    Finite differences average the two sides (3.46705, where PyTorch's 0.0 is the left side's), so no verdict."""
    from gradguard.checker.checks.second_order import kinked

    x = np.array([7.202971, -3.656904, 6.36773, 1.585236e-300, 2.613794, 1e-5])
    ybar = np.array([-3.282271, 0.0, 0.0, 1.349048, 2.307583, 1.028801])
    u = (np.array([0.0, 0.0, 2.07296, -3.946059, 0.0, 2.913441]),)
    w = (np.array([0.0, -3.520915, -2.327616, -1.302564, -4.0, -3.381183]),)
    assert kinked(_hard_mish_gradient(ybar), (x,), u, w)
    # Away from both kinks the same gradient is smooth (piecewise linear), and a smooth one stays unkinked.
    assert not kinked(_hard_mish_gradient(ybar), (x + np.array([0, 0, 0, 1.0, 0, 1.0]),), u, w)
    assert not kinked(lambda x: (ybar * np.cos(x),), (x,), u, w)


def _silu_gradient_through_float32(x):
    # xformers' _silu_backward: silu' computed in float32 (x.float()), inside float64 arithmetic, so no value of the
    # gradient is a float32 number, yet each rounds at float32's 1e-7
    x32 = x.astype(np.float32)
    s = (1 / (1 + np.exp(-x32))).astype(np.float32)
    return (8.0 * (s * (1 + x32 * (1 - s))).astype(np.float64) - 7.9 * np.tanh(x),)


def test_kinked_does_not_read_float32_rounding_that_does_not_shrink_with_the_step_as_a_kink() -> None:
    """A kink's second difference shrinks tenfold with the step; rounding's does not. Against one floor that fell
    where the rounding errors nearly cancel, the rounding of a gradient computed through float32 read as a kink here
    (and in xformers' SwiGLU at seed 2, where the kink excused a double backward of -4.13 against finite differences'
    -8.56); a kink is still one."""
    from gradguard.checker.checks.second_order import kinked

    x = np.array([-0.05665856467284369, 1.557951337396001, 1.7361740638249987, -0.5688192131637191,
                  0.28611932291904374, -0.7125224356962314])
    u = (np.array([0.5658001811981808, -0.9725326469572004, -0.6502859968310326, 2.341646112028754,
                   -1.6370544387997217, 0.7391228681162545]),)
    w = (np.array([-2.495907938505691, 1.995864885920387, 1.7225898449321004, -1.563783342042287,
                   2.2589053848642227, -2.648591791168834]),)
    assert not kinked(_silu_gradient_through_float32, (x,), u, w)
    assert kinked(lambda x: (np.abs(x) + _silu_gradient_through_float32(x)[0],), (x - x * (np.arange(6) == 3),), u, w)


def test_kinked_passes_constants_as_they_are() -> None:
    """kinked() rebuilt every 0-d argument with type(a)(a): a callable or None constant (a checkpoint's function,
    gpytorch's sq_dist_func) raised there, and the raise read as a kink on every input, so GG204 and GG705 excused
    any disagreement of such a rule (gpytorch's covariance Functions had no second derivative, unreported)."""
    from gradguard.checker.checks.second_order import kinked

    def smooth(x, fn, flag):
        return (fn(x) if flag is None else x,)

    x, u, w = np.array([0.3, -0.7]), np.array([1.0, 0.5]), (np.ones(2),)
    assert not kinked(smooth, (x, np.sin, None), (u, None, None), w)
    assert kinked(lambda x, fn, flag: (np.abs(x),), (np.zeros(2), np.sin, None), (u, None, None), w)
    assert not kinked(lambda s: (np.array([s * s]),), (0.5,), (1.0,), (np.ones(1),))  # a moving Python float


def gauss_logpdf(x):
    return -0.5 * (x - 1.0) ** 2


@rrule(gauss_logpdf, arrays(shape=(1,)))  # one element: every input disagrees, so every input is skipped
def gauss_residual_of_asarray_input(x):
    g = 1.0 - np.asarray(x)  # pints' log-priors: np.asarray(x) is x itself for an array
    return gauss_logpdf(x), lambda ybar: (ybar * g,)


def test_a_residual_of_the_input_read_as_a_plain_array_is_skipped_not_an_error() -> None:
    """pints' log-priors compute their gradient from np.asarray(x), which NumPy hands back as x itself: the rule
    computes from its input, and only the tape (any engine tracing NumPy's dispatch) cannot follow it. GG204 said
    the second order was wrong (the tape's 0 against -1); like a rule that converts its input before computing
    anything, it is the tape's limit, skipped with the reason. A copy of a computed residual still fails."""
    report, found = findings(gauss_residual_of_asarray_input)
    assert found == []
    (reason,) = skipped(report)
    assert reason.startswith("gauss_residual_of_asarray_input reads its own input or cotangent as a plain array "
                             "(np.asarray/np.array at test_second_order.py:"), reason
    assert findings(sin_detached)[1], "a residual copied out of the trace is still an error"


def cube(x):
    return x**3


@rrule(cube, arrays(shape=(3,)))  # the first input drawn is zeros, where 6 x ybar u w is 0: the tape's 0 agrees
def cube_of_asarray_input(x):
    r = np.asarray(x)  # the residual, read as a plain array; the output stays traced
    return x**3, lambda ybar: (3.0 * r * r * ybar,)


def test_a_rule_that_reads_its_input_as_a_plain_array_is_skipped_even_where_the_derivatives_agreed_before() -> None:
    """Once the tape's derivative past a read of the input disagrees, it is not the rule's second order: its
    agreement at an earlier input (the zeros Hypothesis draws first, a TensorSlow graph's Variables) established
    nothing, and a check that ran there and skipped at the others read as a pass with no reason given."""
    report, found = findings(cube_of_asarray_input)
    assert found == [] and "GG204" not in report.rules[0].checks_run
    (reason,) = skipped(report)
    assert reason.startswith("cube_of_asarray_input reads its own input or cotangent as a plain array "
                             "(np.asarray/np.array at test_second_order.py:"), reason


@rrule(cube, arrays(shape=(3,)))
def cube_reading_the_cotangents_dtype(x):
    return x**3, lambda ybar: (3.0 * x * x * ybar * np.ones(3, dtype=np.asarray(ybar).dtype),)


def test_a_read_of_the_cotangent_that_does_not_matter_leaves_the_second_order_checked() -> None:
    """PyTorch's clamp_min formula reads the cotangent as a plain array for its dtype only: the tape's derivative is
    the rule's at every input, so GG204 runs on every input and judges it (a residual copied out of the trace, with
    no read of the rule's own input, still fails: sin_detached above)."""
    report, found = findings(cube_reading_the_cotangents_dtype)
    assert found == [] and "GG204" in report.rules[0].checks_run, skipped(report)
    assert report.rules[0].examples == 20

"""GG201's kink exemptions behind one call: kink_excuse says why a failed dot-product test is not a finding
(the primal is not differentiable there and the rule's answer is a valid subgradient), or returns None."""

import numpy as np
import pytest
from hypothesis import strategies as st

from gradguard.checker import arrays, rrule
from gradguard.checker.case import Case, ReplayDraws
from gradguard.checker.checks._kinks import EXCUSES, kink_excuse
from gradguard.checker.checks._vjp import CHAINRULES, dot_test, finite_difference

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def relu_sum(x):
    return np.maximum(x, 0.0).sum()


def square_sum(x):
    return (x * x).sum()


def amax(x):
    return np.max(x)


@rrule(relu_sum, arrays(shape=(1,)))
def relu_rule(x):
    return relu_sum(x), lambda g: (g * (x > 0),)


@rrule(square_sum, arrays(shape=(2,)))
def square_rule(x):
    return square_sum(x), lambda g: (2 * g * x,)


@rrule(amax, arrays(shape=(3,), elements=st.sampled_from([0.0, 1.0])))
def amax_rule(x):
    ans = np.max(x)
    return ans, lambda g: (np.full(x.shape, g) * (x == ans),)


def excuse(rule, x, tangent, v=None):
    """kink_excuse for the pullback value ``tangent`` at ``x`` (cotangent 1, direction ``v``, default ones),
    with the dot-product test failed as GG201 would have seen it."""
    case = Case(rule, (np.asarray(x, dtype=float),), ReplayDraws([]))
    ybar = 1.0
    v = (np.ones(np.shape(x)) if v is None else np.asarray(v, dtype=float),)
    tangents = (np.asarray(tangent, dtype=float),)
    whole = dot_test(finite_difference(case, ybar, v), tangents, v)
    assert not whole.agrees(case.tol), "the test must start from a failed dot-product test"
    return kink_excuse(case, ybar, v, tangents, whole, CHAINRULES, case.tol)


def test_a_subgradient_at_a_kink_is_excused():
    found = excuse(relu_rule, [0.0], [0.0])  # relu'(0) = 0 lies in [0, 1]; finite differences give 0.5
    assert found is not None and found.reason in EXCUSES and found.problem is None
    found = excuse(relu_rule, [0.0], [1.0])
    assert found is not None and found.problem is None


def test_a_value_outside_the_one_sided_derivatives_is_not_excused():
    assert excuse(relu_rule, [0.0], [2.0]) is None  # relu'(0) = 2 is no subgradient
    assert excuse(relu_rule, [0.0], [-0.5]) is None


def test_a_wrong_tangent_of_a_smooth_primal_is_not_excused():
    assert excuse(square_rule, [1.0, -2.0], [3.0, -4.0]) is None  # 2x would be [2, -4]


def test_ties_each_given_the_whole_cotangent_are_excused_with_the_coupled_kink_finding():
    # Each tied entry alone lies between its one-sided derivatives (0 and 1), so the input is excused element
    # by element; together along a positive direction they sum past the max's rate: that finding stands.
    found = excuse(amax_rule, [1.0, 1.0, 0.0], [1.0, 1.0, 0.0], v=[1.0, 0.0, 0.0])
    assert found is not None
    assert found.problem is not None
    assert "at a kink where entries meet" in found.problem.message

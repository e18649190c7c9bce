"""GG201's kink exemptions behind one call: kink_excuse says why a failed dot-product test is not a finding
(the primal is not differentiable there and the rule's answer is a valid subgradient), or returns None."""

import numpy as np
import pytest
from hypothesis import strategies as st

from gradguard.checker import arrays, rrule
from gradguard.checker.case import Case, ReplayDraws
from gradguard.checker.checks._kinks import EXCUSES, coupled_kink, kink_excuse
from gradguard.checker.checks._vjp import CHAINRULES, dot_test, finite_difference

from _pools import COUPLED_TIES, pool_rule

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
    assert "at a kink that couples entries (along u its one-sided derivatives are not the sums of each entry's own)" \
        in found.problem.message


def middle(x):
    return np.sort(x)[1]


@rrule(middle, arrays(shape=(3,)))
def middle_rule(x):
    order = np.argsort(x, kind="stable")
    return middle(x), lambda g: (np.eye(3)[order[1]] * g,)


def test_a_subgradient_where_no_line_shows_the_kink_is_excused_because_the_derivative_is_not_linear():
    # The median of three tied entries moves at the rate median(v) on both sides along every direction v, so no
    # one-sided test sees a kink; the pullback's e_1 is a valid subgradient (the hull of e_0, e_1, e_2), yet along
    # v = (2, 0, 1) finite differences give median(v) = 1 and the tangent 0. The seeded generic direction u has
    # its median at entry 0: v + u falls in another linear piece than v (median 1.64, not 1 + 0.126).
    found = excuse(middle_rule, [1.0, 1.0, 1.0], [0.0, 1.0, 0.0], v=[2.0, 0.0, 1.0])
    assert found is not None and found.reason == "not linear" and found.problem is None
    # v = (1, 0, 2) has its median at entry 0 as u does, so v + u stays in that piece and agrees; the
    # element-by-element probe shows the kink (each element's derivative is 0 at the tie, median(v) is 1).
    found = excuse(middle_rule, [1.0, 1.0, 1.0], [0.0, 1.0, 0.0], v=[1.0, 0.0, 2.0])
    assert found is not None and found.reason == "not linear" and found.problem is None


def median5(x):
    return np.sort(x)[2]


@rrule(median5, arrays(shape=(5,)))
def median5_shared_rule(x):  # PyTorch's median backward: the cotangent shared among the tied entries
    def pullback(g):
        mask = x == median5(x)
        return (np.where(mask, g / mask.sum(), 0.0),)

    return median5(x), pullback


def test_a_direction_that_moves_the_ties_middle_entry_not_at_all_still_shows_the_kink():
    # PyTorch's median at seed 4 of the real-world corpus: x = [1, 1, 1, 0, 2] ties entries 0 to 2 and v moves the
    # middle of them (entry 0) not at all, so the derivative along v, median(v[:3]) = 0, equals the sum of v's
    # elements times the elements' derivatives (all 0 at the tie): the probe along v alone calls the median
    # linear. The same probe along the generic direction u does not (median(u[:3]) is no sum of zeros).
    v = [0.0, 3.358205, -2.00001, 1.104693, -2.681699]
    shared = np.array([1, 1, 1, 0, 0]) / 3.0
    found = excuse(median5_shared_rule, [1.0, 1.0, 1.0, 0.0, 2.0], shared, v=v)
    assert found is not None and found.reason == "not linear" and found.problem is None
    # Away from the tie the median is differentiable, and a wrong tangent there stays a finding.
    assert excuse(median5_shared_rule, [1.0, 1.5, 1.2, 0.0, 2.0], shared, v=v) is None


def test_a_wrong_tangent_of_the_median_away_from_ties_is_not_excused():
    assert excuse(middle_rule, [0.0, 1.0, 2.0], [1.0, 0.0, 0.0], v=[0.0, 1.0, 0.0]) is None  # it is x[1] here


# ----- float16: ties are common, and the probes that tell a kink round back onto them ---------------------------


def sort(x):
    return np.sort(x)


@rrule(sort, arrays(shape=(5,), dtype="float16"))
def sort16_rule(x):  # autograd's sort: the cotangent unpermuted by the argsort of x
    perm = np.argsort(x)

    def pullback(g):
        out = np.zeros_like(g)
        out[perm] = g
        return (out,)

    return np.sort(x), pullback


@rrule(amax, arrays(shape=(3,), dtype="float16"))
def amax16_rule(x):
    ans = np.max(x)
    return ans, lambda g: (np.full(x.shape, g, dtype=x.dtype) * (x == ans),)


@rrule(relu_sum, arrays(shape=(1,), dtype="float16"))
def relu16_rule(x):
    return relu_sum(x), lambda g: (g * (x > 0),)


def excuse16(rule, x, tangent, v, ybar=1.0):
    """As excuse(), in float16: arguments, cotangent, direction and tangent."""
    half = np.float16
    case = Case(rule, (np.asarray(x, dtype=half),), ReplayDraws([]))
    ybar = np.asarray(ybar, dtype=half) if np.ndim(ybar) else half(ybar)
    v = (np.asarray(v, dtype=half),)
    tangents = (np.asarray(tangent, dtype=half),)
    whole = dot_test(finite_difference(case, ybar, v), tangents, v)
    assert not whole.agrees(case.tol), "the test must start from a failed dot-product test"
    return kink_excuse(case, ybar, v, tangents, whole, CHAINRULES, case.tol)


def test_a_float16_sort_of_three_tied_entries_is_excused_as_in_float64():
    # The float16 corpus at seed 0: autograd's sort at x = [-0.52, 0, 0, 3.11, 0]. Its pullback gives the middle
    # tie the middle weight, -1.9, a piece's value; in float16 the probes a hair from x round back onto the ties, and
    # it was "expected 0.0 (finite differences), got -1.900390625". On float64 copies kinks pass nearer than any step.
    x = [-0.5205, 0.0, 0.0, 3.113, 0.0]
    ybar = [3.164, 0.0, -1.9, 0.0, 1.287]
    tangent = sort16_rule.rrule(np.asarray(x, dtype=np.float16))[1](np.asarray(ybar, dtype=np.float16))[0]
    found = excuse16(sort16_rule, x, tangent, v=[-1.5, 0.0, -3.361, 1.854, 2.832], ybar=ybar)
    assert found is not None and found.reason == "near kinks" and found.problem is None


def test_a_float16_sort_of_four_tied_entries_under_unsorted_weights_is_no_coupled_kink():
    # The same sort at x = [-0.52, 0, 0, 0, 0], weights |ybar| = [3.16, 0, 1.9, 0, 1.29]: no bend bounds its
    # subgradients (neither convex nor concave), but float16's rounding slack at the bend probe's distance read it
    # as convex, and the pullback's own piece (6.62 along u, outside 8.33 and 8.60) was a finding.
    x = np.array([-0.5205, 0, 0, 0, 0], dtype=np.float16)
    case = Case(sort16_rule, (x,), ReplayDraws([]))
    ybar = np.array([3.164, 0.0, -1.9, 0.0, 1.287], dtype=np.float16)
    assert coupled_kink(case, ybar, CHAINRULES, case.tol) is None


def test_float16_ties_each_given_the_whole_cotangent_still_fail_as_a_coupled_kink():
    # Along v = (1, 1, 0) the max moves at rate 1 and the tangent says 2 (float16's differences along (1, 0, 0)
    # blur the kink's 0 and 1 into 0.5 +- 0.09, which admits 1).
    found = excuse16(amax16_rule, [1.0, 1.0, 0.0], [1.0, 1.0, 0.0], v=[1.0, 1.0, 0.0])
    assert found is not None and found.problem is not None
    assert "at a kink that couples entries" in found.problem.message


def test_a_float16_value_outside_the_one_sided_derivatives_is_not_excused():
    assert excuse16(relu16_rule, [0.0], [2.0], v=[1.0]) is None  # relu'(0) = 2 is no subgradient
    assert excuse16(relu16_rule, [0.0], [-0.5], v=[1.0]) is None


# ----- ties that couple entries across windows (a max pool with overlapping windows) ------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_subgradient_at_ties_that_couple_windows_passes_gg201(seed):
    # The rule gives entry (1, 0) window (1, 0)'s cotangent and not window (0, 0)'s: the piece where (0, 1) > (1, 0) >
    # (2, 0), one ordering of six, which no move of one entry reaches (its own one-sided derivatives do not hold the
    # value) and six random points around x missed one time in three: "cotangent for argument 0 (x) at [1, 0]:
    # expected 0.0430325 (finite differences), got -0.50915" at seed 0. Kinks nearer than any step, now.
    from gradguard.checker import check

    assert check(pool_rule(COUPLED_TIES, "pool_coupled"), select=["GG201"], seed=seed).findings == []


def test_ties_that_couple_windows_each_given_the_whole_cotangent_still_fail_gg201():
    from gradguard.checker import check

    [found] = check(pool_rule(COUPLED_TIES, "pool_every_tie", every_tie=True), select=["GG201"], seed=0).findings
    assert "at a kink that couples entries" in found.message

"""Test the tester at kinks: entries that meet at a kink are judged along a direction as a whole (GG201,
GG203), and a NaN tangent where the primal has no derivative is not called a bug (GG206)."""

import re

import numpy as np
import pytest
from hypothesis import strategies as st

from gradguard.checker import arrays, check, rrule

NUM = r"(-?[0-9.e+-]+)"
WHOLE_PROGRAM = ["GG5", "GG6"]

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def findings(rule, check_id, **kwargs):
    report = check(rule, select=[check_id], **kwargs)
    return [f for f in report.findings if f.check_id == check_id]


def assert_passes_every_isolation_check(rule, seeds=(0, 1)):
    for seed in seeds:
        report = check(rule, ignore=WHOLE_PROGRAM, seed=seed)
        assert report.passed, [(f.check_id, f.message) for f in report.findings]


# -- ties at a kink (issue 12, class 6) --------------------------------------------------------------
def amax(x):
    return np.max(x)


TIES = arrays(shape=(4,), elements=st.sampled_from([0.0, 1.0, -2.0]))


@rrule(amax, TIES)
def amax_every_tie_gets_all(x):
    ans = np.max(x)
    return ans, lambda g: (np.full(x.shape, g) * (x == ans),)


@rrule(amax, TIES)
def amax_ties_share(x):
    ans = np.max(x)
    mask = x == ans
    return ans, lambda g: (np.full(x.shape, g) * mask / np.sum(mask),)


KINK_MESSAGE = (
    r"the pullback of {name} disagrees with finite differences of the primal at a kink where entries meet: with "
    r"the cotangent \|ybar\| and a positive direction u, the one-sided derivatives of <\|ybar\|, primal\(x \+ t u\)> "
    rf"at t = 0 are {NUM} \(t < 0\) and {NUM} \(t > 0\) by finite differences, but <pullback\(\|ybar\|\), u> = {NUM} "
    r"lies outside them\. Each tangent element alone lies within its own one-sided derivatives; taken together "
    r"along u they do not\."
)


@pytest.mark.parametrize("check_id", ["GG201", "GG203"])
def test_every_tied_entry_given_the_whole_cotangent_fails(check_id):
    (f,) = findings(amax_every_tie_gets_all, check_id)
    match = re.fullmatch(KINK_MESSAGE.format(name="amax_every_tie_gets_all"), f.message)
    assert match, f.message
    left, right, got = (float(v) for v in match.groups())
    assert got > max(left, right)  # several tied entries, each with the whole rate: the sum overshoots
    assert f.severity == "error" and f.actual == match.group(3)
    assert f.expected.startswith("between ") and "divide by the number of ties" in f.fix


def test_ties_that_share_the_cotangent_pass():
    assert findings(amax_ties_share, "GG201") == [] and findings(amax_ties_share, "GG203") == []
    assert_passes_every_isolation_check(amax_ties_share)


def row_max(x):
    return np.max(x, axis=1)


@rrule(row_max, arrays(shape=(2, 3), elements=st.sampled_from([0.0, 1.0])))
def row_max_ties_share(x):
    ans = np.max(x, axis=1, keepdims=True)
    mask = x == ans
    return ans[:, 0], lambda g: (g[:, None] * mask / np.sum(mask, axis=1, keepdims=True),)


def clip(x):
    return np.clip(x, -1.0, 1.0)


@rrule(clip, arrays(shape=(4,), elements=st.sampled_from([-1.0, 1.0, 0.5])))
def clip_both_bounds(x):
    # At x == -1 the rule takes the right-hand slope, at x == 1 the left-hand one: a valid (sub)gradient of a
    # separable kink, which a whole-direction test along (1, 1, ...) would wrongly reject.
    return clip(x), lambda g: (g * ((x >= -1.0) & (x <= 1.0)),)


def sort_(x):
    return np.sort(x)


@rrule(sort_, arrays(shape=(4,), elements=st.sampled_from([0.0, 1.0])))
def sort_ties(x):
    # Tied entries take the cotangents of their places in a stable order: a (sub)gradient, although a sort of
    # ties under unsorted cotangents is neither convex nor concave (no whole-direction bound holds there).
    order = np.argsort(x, kind="stable")

    def pullback(g):
        t = np.zeros_like(x)
        t[order] = g
        return (t,)

    return x[order], pullback


@pytest.mark.parametrize("rule", [row_max_ties_share, clip_both_bounds, sort_ties], ids=["row-max", "clip", "sort"])
def test_kinks_judged_as_a_whole_only_where_entries_meet(rule):
    assert_passes_every_isolation_check(rule)


# -- NaN where the primal has no derivative (issue 12, class 3) ----------------------------------------
def norm(x):
    return np.sqrt(np.sum(x * x))


ZEROS_FIRST = arrays(shape=(3,), elements=st.sampled_from([0.0, 1.0, -2.0]))


@rrule(norm, ZEROS_FIRST)
def norm_nan_at_zero(x):
    n = norm(x)
    return n, lambda g: (g * x / n,)  # 0/0 at x == 0, a cone point: no derivative there


@rrule(norm, ZEROS_FIRST)
def norm_subgradient_at_zero(x):
    n = norm(x)
    return n, lambda g: (g * np.where(n == 0, 0.0, x / np.where(n == 0, 1.0, n)),)


def row_std(x):
    return np.std(x, axis=1)


@rrule(row_std, arrays(shape=(2, 3), elements=st.sampled_from([0.0, 1.0])))
def row_std_nan_on_constant_rows(x):
    s = row_std(x)
    return s, lambda g: ((g / s)[:, None] * (x - x.mean(axis=1, keepdims=True)) / x.shape[1],)


NO_DERIVATIVE = (
    r"the pullback of {name} returned nan in the tangent for argument 0 at \[[\d, ]+\], where the primal is finite "
    r"but has no derivative along this element: the one-sided derivatives of (the output|the output at \[\d\]) are "
    rf"{NUM} \(from below\) and {NUM} \(from above\) by finite differences; \d+ element\(s\) of this tangent are "
    r"not finite\."
)


@pytest.mark.parametrize("rule", [norm_nan_at_zero, row_std_nan_on_constant_rows], ids=["norm", "std"])
def test_nan_at_a_cone_point_is_a_warning_that_suggests_a_subgradient(rule):
    result = check(rule, select=["GG206"]).rules[0]
    (f,) = result.findings
    match = re.fullmatch(NO_DERIVATIVE.format(name=rule.name), f.message)
    assert match, f.message
    left, right = (float(v) for v in match.groups()[1:])
    assert left < right  # a cone: the slope jumps up across the point
    assert f.severity == "warning" and result.verdict == "pass"
    assert "return a subgradient there" in f.fix and f.expected.startswith("a finite subgradient between ")


def test_a_subgradient_at_the_cone_point_passes():
    assert_passes_every_isolation_check(norm_subgradient_at_zero)


def xabs(x):
    return x * np.abs(x)


@rrule(xabs, arrays(shape=(2,), elements=st.sampled_from([0.0, 1.0])))
def xabs_nan_but_norm_ok(x):
    # Both a cone-free NaN (x * |x| is smooth at 0) and nothing else: the error must win over any warning.
    return xabs(x), lambda g: (2 * x * x / np.abs(x) * g,)


def test_nan_where_the_derivative_exists_stays_an_error():
    (f,) = findings(xabs_nan_but_norm_ok, "GG206")
    assert f.severity == "error" and "has a derivative along this element" in f.message

"""Test the tester on the shapes real-world rules take (issue: verdict precision on real-world rules).

For each defect class a rule that must pass and a rule that must fail, each with the exact finding or its
absence. Rules here are written as public projects write them: outputs that are NamedTuples or nested
tuples, NumPy scalar types, 0-d arrays.
"""

import numpy as np
import pytest

from gradguard.checker import arrays, check, rrule
from gradguard.checker.contexts import safety_matrix


def errors(report):
    return [f for f in report.findings if f.severity == "error"]


# -- exotic outputs: NamedTuples, nested tuples, NumPy scalars, 0-d arrays ----------------------------
WELL_CONDITIONED = arrays(shape=(3, 3), min_value=-1.0, max_value=1.0).map(lambda a: a + 4.0 * np.eye(3))


def slogdet(a):
    return np.linalg.slogdet(a)  # a NamedTuple (sign, logabsdet)


@rrule(slogdet, WELL_CONDITIONED)
def slogdet_ok(a):
    def pullback(ybar):
        _, lbar = ybar
        return (lbar * np.linalg.inv(a).T,)

    return np.linalg.slogdet(a), pullback


@rrule(slogdet, WELL_CONDITIONED)
def slogdet_untransposed(a):
    def pullback(ybar):
        _, lbar = ybar
        return (lbar * np.linalg.inv(a),)  # the transpose is missing

    return np.linalg.slogdet(a), pullback


def nested(x):
    return x * 2.0, (x**2, np.sum(x))


@rrule(nested, arrays(shape=(3,)))
def nested_ok(x):
    def pullback(ybar):
        a, (b, c) = ybar
        return (2.0 * a + 2.0 * x * b + c,)

    return nested(x), pullback


@rrule(nested, arrays(shape=(3,)))
def nested_unscaled(x):
    def pullback(ybar):
        a, (b, c) = ybar
        return (2.0 * a + 2.0 * x * b + 1.0,)  # the scalar output's cotangent is dropped

    return nested(x), pullback


def sumsq_numpy_scalar(x):
    return np.float64(np.sum(x**2))


@rrule(sumsq_numpy_scalar, arrays(shape=(3,)))
def numpy_scalar_ok(x):
    return sumsq_numpy_scalar(x), lambda ybar: (2.0 * x * ybar,)


def sumsq_0d(x):
    return np.array(np.sum(x**2))


@rrule(sumsq_0d, arrays(shape=(3,)))
def zero_d_ok(x):
    return sumsq_0d(x), lambda ybar: (2.0 * x * ybar,)


@rrule(sumsq_0d, arrays(shape=(3,)))
def zero_d_wrong(x):
    return sumsq_0d(x), lambda ybar: (x * ybar,)  # a factor 2 is missing


@pytest.mark.parametrize("rule", [slogdet_ok, nested_ok, numpy_scalar_ok, zero_d_ok], ids=lambda r: r.name)
def test_exotic_outputs_get_a_verdict_and_right_rules_pass(rule):
    report = check(rule, seed=0, ignore=["GG302"])
    (result,) = report.rules
    assert result.error is None, result.error
    assert result.verdict == "pass", errors(report)
    matrix = safety_matrix(rule, seed=0)
    # tape[none] hands None to an unused output's pullback: these rules do not take None (GG302's business)
    wrong = [c for c in matrix["cells"] if c["status"] not in ("right", "skipped") and c["engine"] != "tape[none]"]
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("rule", "location"),
    [(slogdet_untransposed, "argument 0"), (nested_unscaled, "argument 0"), (zero_d_wrong, "argument 0")],
    ids=lambda r: getattr(r, "name", r),
)
def test_wrong_rules_with_exotic_outputs_fail_gg201(rule, location):
    report = check(rule, seed=0, select=["GG201"])
    (result,) = report.rules
    assert result.error is None, result.error
    (f,) = report.findings
    assert f.check_id == "GG201"
    assert f.message.startswith(f"the pullback of {rule.name} disagrees with finite differences of the primal")
    assert f.location.startswith(location)


def test_equal_infinite_outputs_are_the_same_value():
    def logabsdet(a):
        return np.linalg.slogdet(a)[1]

    @rrule(logabsdet, arrays(shape=(2, 2), min_value=0.0, max_value=0.0))  # singular: log|det| = -inf
    def logabsdet_rule(a):
        return logabsdet(a), lambda ybar: (np.zeros_like(a),)

    assert check(logabsdet_rule, seed=0, select=["GG102"]).findings == []

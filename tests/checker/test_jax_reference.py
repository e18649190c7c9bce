"""Test the tester: GG203 uses JAX's reference only where it is the primal's own function around the input
(issue 12, class 2), and never lets it overrule finite differences of the primal."""

import re

import numpy as np
import pytest

from gradguard.checker import arrays, check, rrule

pytest.importorskip("jax")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def top_eig(a):
    """The largest eigenvalue of the symmetric matrix whose lower triangle is a's: np.linalg.eigvalsh reads one
    triangle, while jnp.linalg.eigvalsh (what JAX traces for this primal) symmetrises its argument."""
    return np.linalg.eigvalsh(a)[-1]


SYMMETRIC = arrays(shape=(3, 3)).map(lambda a: ((a + a.T) / 2,))


def _top(a):
    w, v = np.linalg.eigh(a)
    return w[-1], v[:, -1]


@rrule(top_eig, args=SYMMETRIC)
def top_eig_lower(a):
    y, u = _top(a)

    def pullback(g):
        full = g * np.outer(u, u)
        return (np.tril(2 * full) - np.diag(np.diag(full)),)  # the derivative of the lower-triangle reading

    return y, pullback


@rrule(top_eig, args=SYMMETRIC)
def top_eig_symmetric(a):
    y, u = _top(a)
    return y, lambda g: (g * np.outer(u, u),)  # jnp's derivative, not this primal's: the upper triangle counts


NOT_THE_SAME = (
    "JAX's reference is not the same function as the primal around this input: their values differ at a point "
    "0.001 away, so its derivative is no evidence about the primal's; finite differences of the primal (GG201) "
    "judge this input"
)


def test_a_reference_that_is_another_function_is_not_used():
    result = check(top_eig_lower, ignore=["GG5", "GG6"]).rules[0]
    assert result.findings == [] and result.verdict == "pass"
    assert "GG203" not in result.checks_run
    assert {"id": "GG203", "reason": NOT_THE_SAME} in result.checks_skipped


def test_the_primal_itself_still_judges_the_rule():
    (f,) = [f for f in check(top_eig_symmetric, select=["GG201", "GG203"]).findings]
    assert f.check_id == "GG201"
    assert re.fullmatch(
        r"the pullback of top_eig_symmetric disagrees with finite differences of the primal: cotangent for argument 0 "
        r"at \[\d, \d\]: expected (-?[0-9.e+-]+) \(finite differences\), got (-?[0-9.e+-]+) \(dot-product test: "
        r"<ybar, J v> = (-?[0-9.e+-]+) by finite differences, <pullback\(ybar\), v> = (-?[0-9.e+-]+)\)\.",
        f.message,
    ), f.message


def square_sum(a):
    return np.sum(a * a)


@rrule(square_sum, arrays(shape=(3,)))
def square_sum_rrule(a):
    return square_sum(a), lambda g: (2 * g * a,)


def test_a_faithful_reference_is_still_used():
    result = check(square_sum_rrule, select=["GG203"]).rules[0]
    assert result.checks_run == ["GG203"] and result.findings == []


def stair(x):
    return np.floor(x * 1e8) / 1e8  # x to 8 decimals: slope 1 at every scale above 1e-8, while JAX's is 0


@rrule(stair, arrays(shape=(3,), min_value=1.0, max_value=2.0))
def stair_half(x):
    return stair(x), lambda g: (0.5 * g,)


@rrule(stair, arrays(shape=(3,), min_value=1.0, max_value=2.0))
def stair_one(x):
    return stair(x), lambda g: (1.0 * g,)


def test_the_reference_never_overrules_finite_differences_of_the_primal():
    """JAX's derivative of the primal's code (0: floor) is contradicted by finite differences of the primal
    (1): GG203 makes no claim from it; GG201 judges the rule against the primal."""
    (f,) = check(stair_half, select=["GG201", "GG203"]).findings
    assert f.check_id == "GG201" and f.expected == "1" and f.actual == "0.5"
    result = check(stair_one, select=["GG201", "GG203"]).rules[0]
    assert result.findings == [] and result.checks_run == ["GG201", "GG203"]

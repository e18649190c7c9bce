"""GG203 for rules whose primal is a NumPy ufunc or function (np.sin, np.exp): JAX's twin is the reference,
so the check runs instead of being skipped."""

import numpy as np

from gradguard import arrays, check, rrule


@rrule(np.sin, arrays(shape=(3,)))
def sin_rrule(x):
    return np.sin(x), lambda ybar: (ybar * np.cos(x),)


@rrule(np.exp, arrays(shape=(3,)))
def exp_wrong_rrule(x):
    y = np.exp(x)
    return y, lambda ybar: (ybar * y * 1.5,)


def test_gg203_runs_for_a_ufunc_primal_and_passes_a_right_rule():
    (result,) = check(sin_rrule, select="GG203").rules
    assert result.checks_run == ["GG203"] and result.checks_skipped == [] and result.verdict == "pass"


def test_gg203_catches_a_wrong_rule_for_a_ufunc_primal():
    (result,) = check(exp_wrong_rrule, select="GG203").rules
    (finding,) = result.findings
    assert finding.check_id == "GG203" and (finding.expected, finding.actual) == ("1.0", "1.5")

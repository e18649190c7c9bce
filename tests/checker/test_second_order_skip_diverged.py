"""GG204 on a rule that takes another path on the tape's traced arrays than on plain ones."""

from __future__ import annotations

import numpy as np

from gradguard.checker import arrays, check, rrule


def loss(x):
    return np.sum(x ** 2) * np.linalg.det(np.eye(2) + np.outer(x[:2], x[:2]))


def _loss_and_grad(x):
    # hdmm's templates: an operation the tape has no rule for, inside a bare except that returns a fallback
    try:
        d = np.linalg.det(np.eye(2) + np.outer(x[:2], x[:2]))
    except:  # noqa: E722 - as upstream
        return np.inf, np.zeros_like(x)
    s = np.sum(x ** 2)
    g = 2 * x * d
    g[:2] += s * d * 2 * x[:2] / (1 + x[0] ** 2 + x[1] ** 2)
    return s * d, g


@rrule(loss, arrays(shape=(3,), min_value=-1.0, max_value=1.0))
def fallback_rrule(x):
    y, g = _loss_and_grad(x)
    return y, lambda ybar: (ybar * g,)


def test_gg204_skips_a_rule_whose_traced_run_takes_its_fallback() -> None:
    """hdmm's PIdentity: np.linalg.inv raised the tape's TraceError, the rule's bare except returned inf and a zero
    gradient, and GG204 compared that fallback's derivative (0) with finite differences of the real gradient (6.0)."""
    result = check(fallback_rrule, seed=0, select=["GG204"]).rules[0]
    assert result.findings == [], [f.message for f in result.findings]
    (reason,) = [s["reason"] for s in result.checks_skipped if s["id"] == "GG204"]
    assert reason.startswith("fallback_rrule computes other values on the tape's traced arrays than on plain ones "
                             "(output 0: inf where the plain call gives "), reason
    assert reason.endswith("so what the tape differentiates is not its second order, and it is not checked"), reason

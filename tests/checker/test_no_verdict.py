"""GG201 counts an input where finite differences establish no derivative as not judged, and a rule judged at no
input drawn is reported with GG201 skipped and the reason, not as having passed it."""

import pytest
from hypothesis import strategies as st

from gradguard.checker import arrays, check, rrule
from gradguard.checker.checks.numeric import UNRESOLVED
from gradguard.checker.terminal import render_text

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def step(x):
    return (x >= 0).astype(x.dtype)


def step_rule(spec, name):
    # a surrogate's backward: 5 g, not the step's derivative (0 away from the jump, none on it)
    @rrule(step, spec, name=name)
    def step_rrule(x):
        return step(x), lambda ybar: (None,) if ybar is None else (5 * ybar,)

    return step_rrule


def test_a_rule_whose_every_input_sits_on_its_jump_gets_gg201_skipped_with_the_reason():
    on_jump = step_rule(arrays(shape=(4,), elements=st.sampled_from([0.0, -0.0])), "on_jump_rrule")
    result = check(on_jump, select=["GG201"]).rules[0]
    assert result.checks_run == [] and not result.findings
    assert result.checks_skipped == [{"id": "GG201", "reason": UNRESOLVED}]
    text = render_text(check(on_jump, select=["GG201"]), verbose=True)
    assert "no check ran: see the reasons above" in text and "all checks passed" not in text


def test_the_same_rule_off_its_jump_fails_gg201():
    off_jump = step_rule(arrays(shape=(4,), min_value=0.5, max_value=3.0), "off_jump_rrule")
    found = check(off_jump, select=["GG201"]).findings
    assert [f.check_id for f in found] == ["GG201"]
    assert "expected 0.0 (finite differences), got" in found[0].message

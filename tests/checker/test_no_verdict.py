"""GG201 counts an input where finite differences establish no derivative as not judged, and a rule judged at no
input drawn is reported with GG201 skipped and the reason, not as having passed it; a rule judged at some inputs
only is reported with GG201 run and the inputs it was not judged at counted, with their reason."""

import numpy as np
import pytest
from hypothesis import strategies as st

from gradguard.checker import arrays, check, rrule
from gradguard.checker.checks._vjp import NO_FD_HERE
from gradguard.checker.checks.numeric import UNRESOLVED
from gradguard.checker.render import render_junit
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


def test_a_rule_at_its_domains_edge_at_some_inputs_only_says_at_how_many_gg201_judged_it():
    # MyGrad's arccos: its true derivative inside [-1, 1] (0 at the edge, where it has none): judged where no element
    # sits at 1, not where one does (finite differences step outside the domain there)
    @rrule(np.arccos, arrays(shape=(2,), elements=st.one_of(st.just(1.0), st.floats(-0.9, 0.9))), name="arccos_rrule")
    def arccos_rrule(x):
        return np.arccos(x), lambda g: (np.select([np.abs(x) != 1], [-g / np.sqrt(1 - x**2)]),)

    report = check(arccos_rrule, select=["GG201"])
    result = report.rules[0]
    assert result.verdict == "pass" and result.checks_run == ["GG201"] and result.checks_skipped == []
    [partial] = result.checks_partial
    assert partial["id"] == "GG201" and partial["reason"] == NO_FD_HERE
    assert partial["judged"] > 0 and partial["skipped"] > 0 and partial["judged"] + partial["skipped"] == result.examples
    assert (f"GG201 judged at {partial['judged']} of {result.examples} inputs; skipped at {partial['skipped']}, the first "
            f"because {NO_FD_HERE}") in render_text(report, verbose=True)
    junit = render_junit(report)  # the passing test case says it too, in its output
    assert (f'<testcase classname="arccos_rrule" name="GG201"><system-out>judged at {partial["judged"]} of '
            f'{result.examples} inputs; skipped at {partial["skipped"]}, the first because {NO_FD_HERE}</system-out>'
            ) in junit.replace("\n", "").replace("  ", "")


def test_a_check_judged_at_every_input_has_no_partial_record():
    off_jump = step_rule(arrays(shape=(4,), min_value=0.5, max_value=3.0), "off_jump_rrule")
    assert check(off_jump, select=["GG201"]).rules[0].checks_partial == []

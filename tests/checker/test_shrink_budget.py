"""Shrinking has a time and step budget; when it runs out, the best failing input so far is reported, saying so."""

import pickle
import re

import numpy as np
import pytest

from gradguard.checker import _search, arrays, check, reproducer, rrule
from gradguard.checker.checks import numeric
from gradguard.checker.errors import UsageError


def matmul(a, b):
    return a @ b


@rrule(matmul, arrays(shape=(3, 4)), arrays(shape=(4, 2)))
def matmul_scaled_rrule(a, b):
    return a @ b, lambda ybar: (1.5 * ybar @ b.T, a.T @ ybar)


SELECT = ["GG201", "GG202"]


def _finding(report, check_id):
    return next(f for f in report.findings if f.check_id == check_id)


def test_without_a_budget_shrinking_completes_and_says_so():
    report = check(matmul_scaled_rrule, select=SELECT, shrink_budget_s=None, shrink_steps=None)
    found = _finding(report, "GG201")
    assert found.counterexample["shrinking"] == "complete"


def test_a_spent_step_budget_reports_the_best_input_so_far_and_names_the_option():
    unlimited = check(matmul_scaled_rrule, select=SELECT, shrink_budget_s=None, shrink_steps=None)
    cut = check(matmul_scaled_rrule, select=SELECT, shrink_budget_s=None, shrink_steps=1)
    note = _finding(cut, "GG201").counterexample["shrinking"]
    assert note.startswith("stopped by the shrinking budget") and "1 evaluations per check" in note
    assert "shrink_steps=" in note and "smallest failing input found so far" in note
    # The verdict and the checks that fail do not depend on how far shrinking got.
    assert [f.check_id for f in cut.findings] == [f.check_id for f in unlimited.findings]
    assert cut.rules[0].verdict == unlimited.rules[0].verdict == "fail"


def test_a_spent_time_budget_leaves_later_checks_unshrunk_and_says_so():
    report = check(matmul_scaled_rrule, select=["GG201", "GG203"], shrink_budget_s=1e-6)
    notes = [f.counterexample["shrinking"] for f in report.findings]
    assert len(notes) == 2
    assert notes[0].startswith("stopped by the shrinking budget (1e-06 s per rule")
    assert notes[1].startswith("not shrunk: the shrinking budget (1e-06 s per rule")
    assert "shrink_budget_s=" in notes[1] and "earlier checks" in notes[1]


def test_a_zero_budget_reports_the_first_failing_input():
    report = check(matmul_scaled_rrule, select=["GG201", "GG203"], shrink_budget_s=0)
    notes = [f.counterexample["shrinking"] for f in report.findings]
    assert [n.split(" (")[0] for n in notes] == ["stopped by the shrinking budget"] * 2


def test_the_default_budget_still_finds_the_same_checks_as_no_budget():
    default = check(matmul_scaled_rrule, select=["GG1", "GG2", "GG3"])
    unlimited = check(matmul_scaled_rrule, select=["GG1", "GG2", "GG3"], shrink_budget_s=None, shrink_steps=None)
    assert sorted(f.check_id for f in default.findings) == sorted(f.check_id for f in unlimited.findings)
    assert all(f.counterexample.get("shrinking") for f in default.findings if f.counterexample)


def _counting(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_shrinking_steps_ask_for_the_verdict_and_only_the_kept_input_is_localised(monkeypatch):
    """A shrinking step needs only whether GG201 still fails; where the wrong element is (the finite
    differences of localise) is worked out for the survey's first failure and for the input the search keeps."""
    evaluations = _counting(monkeypatch, _search, "_run_one")
    localised = _counting(monkeypatch, numeric, "localise")
    kept = []
    real_script = reproducer.script
    monkeypatch.setattr(reproducer, "script", lambda rule, check_id, case, problem, **kw: (
        kept.append(case), real_script(rule, check_id, case, problem, **kw))[1])
    report = check(matmul_scaled_rrule, select=["GG201"])
    assert len(evaluations) > 10  # the search's evaluations: re-finding the failure, shrinking it, and the kept input
    assert len(localised) == 2
    (found,) = report.findings
    assert "cotangent for argument 0 (a) at [" in found.message and found.location.startswith("argument 0 at [")
    # The message is the one the check gives on that input and those draws with nothing left out: the
    # reproducer's replay meets it.
    (case,) = kept
    with pytest.raises(AssertionError, match=re.escape(found.message)):
        reproducer.replay(matmul_scaled_rrule, "GG201", case.args, [value for _, value in case.record])


def test_a_kept_input_that_does_not_fail_again_keeps_the_problem_its_verdict_established(monkeypatch):
    """Where the check, run again with its evidence on the kept input, does not fail (a nondeterministic rule),
    the shrunk input is still reported, with what the shrinking step established: the dot-product test."""
    state = {"wrong": True}

    @rrule(matmul, arrays(shape=(3, 4)), arrays(shape=(4, 2)))
    def sometimes_scaled_rrule(a, b):
        scale = 1.5 if state["wrong"] else 1.0
        return a @ b, lambda ybar: (scale * ybar @ b.T, a.T @ ybar)

    real_drive = _search._drive

    def drive_then_fix(*args, **kwargs):  # the rule is right from the end of the search on
        try:
            return real_drive(*args, **kwargs)
        finally:
            state["wrong"] = False

    monkeypatch.setattr(_search, "_drive", drive_then_fix)
    (found,) = check(sometimes_scaled_rrule, select=["GG201"]).findings
    assert re.fullmatch(r"the pullback of sometimes_scaled_rrule disagrees with finite differences of the primal: "
                        r"<ybar, J v> = \S+ by finite differences, <pullback\(ybar\), v> = \S+, \S+ apart where the tolerance allows \S+\.", found.message)
    assert found.location is None
    assert found.counterexample["shrinking"].startswith("stopped by the shrinking budget")


def _in_evidence_runs(monkeypatch):
    """A list that is not empty while a search runs its check again on the input it keeps."""
    inside = []
    real = _search._with_evidence

    def with_evidence(*args, **kwargs):
        inside.append(True)
        try:
            return real(*args, **kwargs)
        finally:
            inside.pop()

    monkeypatch.setattr(_search, "_with_evidence", with_evidence)
    return inside


def test_the_kept_input_is_run_again_only_for_a_check_that_asked_to_leave_evidence_out(monkeypatch):
    """GG201 asks (it localises the wrong element only with evidence); GG203 never does, so its verdict-only
    problem is already the whole of it and the input its search keeps is not checked a second time."""
    kept = _in_evidence_runs(monkeypatch)
    again = []
    real = _search._run_one

    def run(info, case):
        if kept:
            again.append(info.id)
        return real(info, case)

    monkeypatch.setattr(_search, "_run_one", run)
    report = check(matmul_scaled_rrule, select=["GG201", "GG203"])
    assert [f.check_id for f in report.findings] == ["GG201", "GG203"]
    assert again == ["GG201"]


def test_an_evaluation_that_repeats_an_earlier_one_value_for_value_is_not_finished_again(monkeypatch):
    """Hypothesis' shrinker tries choice sequences that give the same values as earlier ones (a cotangent element
    shrunk from 0.1 to 0.05 is 0 either way); the search takes the earlier evaluation's outcome instead of
    running GG201's finite differences again, and the report is the same as when every evaluation runs."""
    finished = []
    kept = _in_evidence_runs(monkeypatch)
    real = _search._run_one

    def run(info, case):
        found = real(info, case)  # a repeat stops inside, at its last draw
        if not kept:
            finished.append(pickle.dumps((case.args, case.record)))
        return found

    monkeypatch.setattr(_search, "_run_one", run)
    remembered = check(matmul_scaled_rrule, select=["GG201"])
    assert len(finished) == len(set(finished)) > 5
    finished.clear()
    monkeypatch.setattr(_search, "_value_key", lambda value: None)  # nothing remembered
    every = check(matmul_scaled_rrule, select=["GG201"])
    assert len(finished) > len(set(finished))
    assert ([(f.message, f.counterexample, f.reproducer) for f in remembered.findings]
            == [(f.message, f.counterexample, f.reproducer) for f in every.findings])


def test_values_are_remembered_only_by_keys_that_tell_them_apart():
    a = np.zeros(2)
    assert _search._value_key((a, 1.0, None)) == _search._value_key((np.zeros(2), 1.0, None))
    assert _search._value_key(np.array([0.0])) != _search._value_key(np.array([-0.0]))
    assert _search._value_key(np.zeros(2)) != _search._value_key(np.zeros(2, dtype=np.float32))
    assert _search._value_key((a, a)) != _search._value_key((a, a.copy()))  # aliased arguments differ
    assert _search._value_key((a, object())) is None
    assert _search._value_key(np.array([object()])) is None
    big = np.zeros(_search.REMEMBERED_BYTES // 8 + 1)  # a large input is neither serialised nor kept per evaluation
    assert _search._value_key(big) is None and _search._value_key(big[:-1]) is not None


@pytest.mark.parametrize("option, value", [("shrink_budget_s", -1.0), ("shrink_budget_s", "1"), ("shrink_steps", -1),
                                           ("shrink_steps", 1.5), ("shrink_steps", True)])
def test_bad_budgets_are_usage_errors_quoting_the_value(option, value):
    with pytest.raises(UsageError, match=f"Got {option}={value!r}"):
        check(matmul_scaled_rrule, select=SELECT, **{option: value})

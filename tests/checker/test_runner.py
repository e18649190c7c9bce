"""The survey's shared first call, and the cotangents and directions every check draws.

The survey runs every check on each drawn input and lets them share one forward call and one pullback
(checker.case.Shared); a failure it finds must still replay alone, as its reproducer does.
"""

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradguard.checker import arrays, check, rrule
from gradguard.checker.case import Case, HypothesisDraws

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def softplus(x):
    return np.logaddexp(0.0, x)


def counting_softplus(calls):
    @rrule(softplus, arrays(shape=(5,)))
    def softplus_rrule(x):
        calls["forward"] += 1
        sig = 1.0 / (1.0 + np.exp(-x))

        def pullback(ybar):
            calls["pullback"] += 1
            return (None,) if ybar is None else (ybar * sig,)

        return softplus(x), pullback

    return softplus_rrule


# Checks that only read the first forward call and the first pullback of each drawn input.
READERS = ["GG101", "GG102", "GG103", "GG104", "GG105", "GG106", "GG303", "GG401", "GG402", "GG405"]


def test_the_survey_makes_one_forward_and_one_pullback_per_drawn_input():
    calls = Counter()
    report = check(counting_softplus(calls), select=READERS, max_examples=12)
    result = report.rules[0]
    assert result.verdict == "pass", report.findings
    assert result.checks_run == READERS
    assert calls["forward"] == result.examples == 12
    assert calls["pullback"] == result.examples


def test_checks_that_need_calls_of_their_own_still_make_them():
    calls = Counter()
    result = check(counting_softplus(calls), select=["GG101", "GG406"], max_examples=5).rules[0]
    # GG406 compares the first call with a second one on an identical copy of the input.
    assert calls["forward"] == 2 * result.examples


RULE_MODULE = '''
import numpy as np
from gradguard.checker import arrays, rrule


def scale3(a):
    return 3.0 * a


@rrule(scale3, arrays(shape=(20000,)))
def scale3_ones(a):
    return scale3(a), lambda ybar: (3.0 * np.ones(a.shape),)   # right only for ybar == 1
'''


def test_a_finding_made_with_the_shared_cotangent_replays_alone(tmp_path):
    """Large inputs are not shrunk, so the finding is the survey's own case, whose cotangent another check
    drew; the reproducer runs GG202 alone and must meet the same failure."""
    module = tmp_path / "rules_big.py"
    module.write_text(textwrap.dedent(RULE_MODULE))
    report = check(str(module), select=["GG1", "GG2"])
    assert report.rules[0].examples < 20  # the survey's example cap for large inputs: no shrinking
    (f,) = [f for f in report.findings if f.check_id == "GG202"]
    script = tmp_path / "repro.py"
    script.write_text(f.reproducer)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert f.message in run.stderr


@rrule(softplus, arrays(shape=(3,)))
def any_rule(x):
    return softplus(x), lambda ybar: (ybar / (1.0 + np.exp(-x)),)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.sampled_from([(), (1,), (3,), (2, 2)]))
def test_cotangents_are_never_all_zero_and_never_tiny(data, shape):
    """A zero cotangent makes every comparison trivially true, and a 1e-38 one hides any error below the
    tolerance's absolute part; elements are 0 or between 1/4 and 4 in size."""
    case = Case(any_rule, (np.zeros(3),), HypothesisDraws(data))
    ybar = np.asarray(case.cotangent_like(np.zeros(shape)))
    assert ybar.shape == shape
    assert np.any(ybar != 0)
    sizes = np.abs(ybar[ybar != 0])
    assert np.all((sizes >= 0.25) & (sizes <= 4.0))
    assert case.record == [("cotangent", case.record[0][1])]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "complex128", "complex64"])
def test_a_small_draw_keeps_its_dtype_and_shrinks_element_by_element(dtype):
    """Small cotangents and directions are one float choice per real number: the array's own dtype, and a
    failure shrinks each element on its own, here to a single -1 where the predicate needs a negative one."""
    from hypothesis import find

    from gradguard.checker.case import _like

    like = np.zeros((2, 3), dtype)
    found = find(_like(like, 4.0), lambda a: np.real(a)[1, 2] < 0, settings=settings(database=None))
    assert found.dtype == like.dtype and found.shape == (2, 3)
    want = np.zeros((2, 3), dtype)
    want[1, 2] = -1
    assert np.array_equal(found, want)
    assert np.array_equal(find(_like(like, 4.0), lambda a: True, settings=settings(database=None)), np.ones((2, 3), dtype))


@settings(max_examples=3, deadline=None, database=None)
@given(st.data())
def test_a_large_draw_lives_no_longer_than_the_check_holds_it(data):
    """Hypothesis keeps what each ``map`` returns until the test case (the drawn input) ends. A large
    cotangent or direction is drawn as a seed and made by the case, so once a check lets go of it, it is
    freed while the input's later checks run (a 5000 x 5000 rule drew six such arrays per input), with the
    values the seed gives, recorded for the reproducer."""
    import gc
    import weakref

    case = Case(any_rule, (np.zeros(3),), HypothesisDraws(data))
    like = np.zeros((40, 50))
    ybar = case.cotangent_like(like)
    direction = case.draw_like((like, np.zeros((5, 5))), "direction")
    assert type(ybar) is np.ndarray and ybar.shape == (40, 50) and np.any(ybar != 0)
    assert case.record[0][1] is ybar and case.record[1][1] is direction
    refs = [weakref.ref(ybar), weakref.ref(direction[0]), weakref.ref(direction[1]), weakref.ref(like)]
    del case, ybar, direction, like
    gc.collect()
    assert [r() for r in refs] == [None] * 4  # nor does the cached strategy keep the array it was built from


def test_a_large_draw_replays_to_the_same_values():
    """The seed is the draw: the same choices make the same array, so shrinking and replay are unchanged."""
    from hypothesis import find

    from gradguard.checker.case import _like

    first = find(_like(np.zeros((6, 7)), 4.0), lambda a: True, settings=settings(database=None, max_examples=1))
    again = find(_like(np.zeros((6, 7)), 4.0), lambda a: True, settings=settings(database=None, max_examples=1))
    from gradguard.checker.case import _made

    assert np.array_equal(_made(first), _made(again))


def _without_times(report_json: str) -> list:
    rules = json.loads(report_json)["rules"]
    for rule in rules:
        rule.pop("duration_s")
    return rules


def test_the_same_seed_gives_the_same_report_in_a_fresh_process():
    """Verdicts, counterexamples and reproducers depend on the seed only: not on what ran before in this
    process (Hypothesis' harvested constants, caches on the rule), nor on the process."""
    target = os.path.join(ROOT, "examples", "addone.py")
    here = check(target, select=["GG1", "GG2", "GG3", "GG4"], seed=5)
    again = check(target, select=["GG1", "GG2", "GG3", "GG4"], seed=5)
    code = (
        "import sys, warnings; warnings.simplefilter('ignore'); from gradguard.checker import check; "
        f"sys.stdout.write(check({target!r}, select=['GG1', 'GG2', 'GG3', 'GG4'], seed=5).to_json())"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    fresh = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=True)
    assert any(r["findings"] for r in _without_times(here.to_json()))
    assert _without_times(again.to_json()) == _without_times(here.to_json())
    assert _without_times(fresh.stdout) == _without_times(here.to_json())


def test_memory_running_out_inside_hypothesis_is_a_memory_error_not_a_spec_or_internal_error():
    """Hypothesis wraps an exception it meets once but not on replay in a FlakyFailure group; a MemoryError
    there (a memory limit biting while inputs are drawn) must say memory ran out, so the service's judge
    names the limit, instead of blaming the argument specs or gradguard."""
    from hypothesis import strategies as st

    calls = {"n": 0}

    def tight(x):
        calls["n"] += 1
        if calls["n"] == 1:
            raise MemoryError()
        return x

    @rrule(softplus, st.builds(tight, arrays(shape=(3,))))
    def squeezed_rrule(x):
        sig = 1.0 / (1.0 + np.exp(-x))
        return softplus(x), lambda ybar: (None,) if ybar is None else (ybar * sig,)

    result = check(squeezed_rrule, select=["GG501"], use_cache=False).rules[0]  # the contexts draw first
    assert result.verdict == "error"
    calls["n"] = 0
    survey = check(squeezed_rrule, select=["GG1"], use_cache=False).rules[0]  # the survey draws first
    assert survey.verdict == "error" and survey.error["message"].startswith("MemoryError: memory ran out in the checks")
    assert result.error["type"] == "MemoryError", result.error
    assert result.error["message"] == ("MemoryError: memory ran out in check GG501 on rule squeezed_rrule; check it "
                                       "with smaller inputs or give it more memory")


@rrule(softplus, arrays(shape=(3,), min_value=-30.0, max_value=30.0))
def bounded_softplus_rrule(x):
    sig = 1.0 / (1.0 + np.exp(-x))
    return softplus(x), lambda ybar: (None,) if ybar is None else (ybar * sig,)


def test_a_check_that_crashes_once_and_not_on_replay_is_an_internal_error_not_a_pass(monkeypatch):
    """netket's expect gave GG202 a float0 tangent it could not multiply at 3 of 20 inputs; Hypothesis' replays ended
    in FlakyStrategyDefinition, and the report listed GG202 and GG203 as run and passed, GG203 never called."""
    from gradguard.checker.checks.registry import CHECKS

    info = CHECKS["GG202"]
    real, calls = info.fn, {"n": 0}

    def crashes_once(case):
        calls["n"] += 1
        if calls["n"] == 2:
            raise TypeError("ufunc 'multiply' did not contain a loop with signature matching types")
        return real(case)

    monkeypatch.setattr(info, "fn", crashes_once)
    result = check(bounded_softplus_rrule, select=["GG202"], use_cache=False).rules[0]
    assert calls["n"] >= 2
    assert result.verdict == "error", (result.verdict, result.checks_run)
    assert result.error["message"].startswith("internal error in check GG202 on rule bounded_softplus_rrule: "
                                              "TypeError: ufunc 'multiply'"), result.error


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_every_check_runs_on_every_drawn_input_of_a_passing_rule(monkeypatch, seed):
    """Hypothesis' search copies one draw's choices into another's (its mutations). A draw that asked for more
    choices where its value was rejected (GG202's scale, a filtered float) ran past the end of the copied
    choices and cut the rest of that input's checks short, so that they ran on fewer inputs than the report
    counts (three of twenty at seed 0)."""
    from gradguard.checker import per_rule

    runs: Counter = Counter()
    real = per_rule._run_one

    def counted(info, case):
        runs[info.id] += 1
        return real(info, case)

    monkeypatch.setattr(per_rule, "_run_one", counted)
    result = check(bounded_softplus_rrule, seed=seed, select=["GG1", "GG2", "GG3", "GG4"]).rules[0]
    assert result.verdict == "pass" and result.examples == 20
    assert set(runs.values()) == {result.examples}, runs

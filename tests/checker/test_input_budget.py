"""The input budget: once a rule's checks have taken it, no new input is drawn, and every report says on how many
inputs the rule was checked; large inputs get fewer draws by design, which the result records too."""

from __future__ import annotations

import json
import re
import time

import pytest
from click.testing import CliRunner

from gradguard.checker import UsageError, arrays, check, rrule
from gradguard.checker.cli import main
from gradguard.checker.config import check_kwargs, validate
from gradguard.checker.render import render_markdown
from gradguard.checker.sarif import to_sarif
from gradguard.checker.terminal import render_text

SLEEP_S = 0.06  # per forward call: the first input's checks make one call at least, so they outlast a 0.05 s budget


def double(x):
    return 2.0 * x


@rrule(double, arrays(shape=(3,)))
def slow_double_rrule(x):
    time.sleep(SLEEP_S)
    return 2.0 * x, lambda ybar: (2.0 * ybar,)


@rrule(double, arrays(shape=(2**15,)))
def large_double_rrule(x):
    return 2.0 * x, lambda ybar: (2.0 * ybar,)


def _slow_module(folder, *names):
    """A rule module in ``folder`` (slow_rules.py) with a slow rule of each name."""
    rules = "".join(f"""
@rrule(double, arrays(shape=(3,)))
def {name}(x):
    time.sleep({SLEEP_S})
    return 2.0 * x, lambda ybar: (2.0 * ybar,)
""" for name in names)
    (folder / "slow_rules.py").write_text("import time\nfrom gradguard.checker import rrule, arrays\n\n\n"
                                          "def double(x):\n    return 2.0 * x\n" + rules)


SPENT = ("checked on 1 of 3 inputs: the input budget, 0.05 s of checking per rule (the checker's own time), was spent "
         "before the next input was drawn; raise it with --input-budget SECONDS (check(input_budget_s=), input-budget "
         "in [tool.gradguard]; 0: no limit)")
LARGE = ("checked on 10 of 20 inputs: its first input has 32,768 array elements, and a rule whose inputs have more "
         "than 16,384 gets proportionally fewer (--max-examples raises them in proportion)")


def test_a_spent_budget_stops_the_drawing_and_the_result_says_so():
    cut = check(slow_double_rrule, select=["GG101", "GG201"], max_examples=3, input_budget_s=0.05).rules[0]
    assert cut.verdict == "pass" and cut.examples == 1
    assert cut.examples_cut == {"planned": 3, "reason": "input budget", "message": SPENT}
    assert cut.budget_cut


def test_without_a_budget_every_input_asked_for_is_drawn():
    for budget in (None, 0):
        whole = check(slow_double_rrule, select=["GG101", "GG201"], max_examples=3, input_budget_s=budget).rules[0]
        assert whole.verdict == "pass" and whole.examples == 3 and whole.examples_cut is None


def test_large_inputs_get_fewer_draws_and_the_result_says_why():
    result = check(large_double_rrule, select=["GG101"]).rules[0]
    assert result.examples == 10
    assert result.examples_cut == {"planned": 20, "reason": "input size", "message": LARGE}
    assert not result.budget_cut
    assert check(large_double_rrule, select=["GG101"], max_examples=40).rules[0].examples == 20


def test_every_report_format_shows_a_budget_cut_and_only_verbose_text_a_size_cut():
    report = check([slow_double_rrule, large_double_rrule], select=["GG101"], max_examples=3, input_budget_s=0.05)
    text = render_text(report)
    assert "fewer inputs (each verdict rests on the inputs checked)" in text
    assert f"note slow_double_rrule: {SPENT}" in text
    assert "large_double_rrule: checked on" not in text
    verbose = render_text(report, verbose=True)
    assert f"  inputs: {SPENT}" in verbose
    assert "  inputs: checked on 1 of 3 inputs: its first input has 32,768 array elements" in verbose
    assert render_text(report, quiet=True).count("\n") == 1  # quiet: the summary line only
    assert f"- ℹ️ `slow_double_rrule`: {SPENT}" in render_markdown(report).replace("\\", "")
    (invocation,) = to_sarif(report)["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is True
    assert [n["level"] for n in invocation["toolExecutionNotifications"]] == ["note"]
    assert invocation["toolExecutionNotifications"][0]["message"]["text"] == f"slow_double_rrule: {SPENT}"
    assert json.loads(report.to_json())["rules"][1]["examples_cut"]["reason"] == "input size"


def test_worker_processes_keep_the_budget(tmp_path):
    _slow_module(tmp_path, "a_slow_rrule", "b_slow_rrule")
    report = check(tmp_path / "slow_rules.py", select=["GG101", "GG201"], max_examples=3, input_budget_s=0.05, jobs=2)
    assert [(r.examples, r.examples_cut["reason"]) for r in report.rules] == [(1, "input budget")] * 2


def test_a_verdict_cached_under_one_budget_is_not_reused_under_another(tmp_path):
    _slow_module(tmp_path, "slow_rrule")
    cache = tmp_path / "cache"
    first = check(tmp_path / "slow_rules.py", select=["GG101"], max_examples=3, input_budget_s=0.05, cache_dir=cache)
    again = check(tmp_path / "slow_rules.py", select=["GG101"], max_examples=3, input_budget_s=0.05, cache_dir=cache)
    assert again.rules[0].cached and again.rules[0].examples_cut == first.rules[0].examples_cut is not None
    lifted = check(tmp_path / "slow_rules.py", select=["GG101"], max_examples=3, input_budget_s=None, cache_dir=cache)
    assert not lifted.rules[0].cached and lifted.rules[0].examples == 3 and lifted.rules[0].examples_cut is None


def test_a_budget_must_be_a_number_of_seconds():
    for bad in (-1, True, "30", float("nan"), float("inf")):
        with pytest.raises(UsageError, match=re.escape("must be a number of seconds >= 0 (0 or None: no budget, every "
                                                       "input max_examples asks for)")):
            check(slow_double_rrule, input_budget_s=bad)


def test_the_command_line_option_and_the_config_key_set_the_budget(tmp_path, monkeypatch):
    _slow_module(tmp_path, "slow_rrule")
    monkeypatch.chdir(tmp_path)
    typed = CliRunner().invoke(main, ["check", "slow_rules.py", "--select", "GG101", "--no-cache", "--max-examples", "3",
                                      "--input-budget", "0.05"])
    assert typed.exit_code == 0, typed.output
    assert "note slow_rrule: checked on 1 of 3 inputs: the input budget, 0.05 s of checking per rule" in typed.output
    (tmp_path / "pyproject.toml").write_text("[tool.gradguard]\ninput-budget = 0.05\nmax-examples = 3\ncache = false\n")
    configured = CliRunner().invoke(main, ["check", "slow_rules.py", "--select", "GG101"])
    assert "checked on 1 of 3 inputs: the input budget, 0.05 s" in configured.output, configured.output
    overridden = CliRunner().invoke(main, ["check", "slow_rules.py", "--select", "GG101", "--input-budget", "0"])
    assert overridden.exit_code == 0 and "fewer inputs" not in overridden.output, overridden.output
    assert check_kwargs(validate({"input-budget": 0})) == {"input_budget_s": None}
    assert check_kwargs(validate({"input-budget": 45})) == {"input_budget_s": 45.0}
    refused = CliRunner().invoke(main, ["check", "slow_rules.py", "--input-budget", "-1"])
    assert refused.exit_code == 2 and "Invalid value for '--input-budget'" in refused.output, refused.output


def test_the_budget_counts_the_checkers_own_time_not_waits_for_a_cpu(monkeypatch):
    """The survey's clock is the time limit's (gradguard.checker._deadline): time the process's threads spent waiting
    for a CPU held by other processes is not spent, so worker processes side by side draw what one alone draws."""
    from gradguard.checker import _deadline

    monkeypatch.setattr(_deadline, "_run_delays", lambda: {1: time.monotonic()})  # every second a wait for a CPU
    waited = check(slow_double_rrule, select=["GG101", "GG201"], max_examples=3, input_budget_s=0.01).rules[0]
    # spent = max(wall - waits, wall / WALL_FACTOR): with every second a wait, only wall / 3 is spent (0.02 s at least)
    assert waited.examples == 1 and waited.budget_cut
    monkeypatch.setattr(_deadline, "WALL_FACTOR", 100.0)  # now only wall / 100 is spent
    never = check(slow_double_rrule, select=["GG101", "GG201"], max_examples=3, input_budget_s=0.01).rules[0]
    assert never.examples == 3 and never.examples_cut is None

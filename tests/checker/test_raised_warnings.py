"""Python warnings a rule's code raises while it is checked: kept once each with its result, never printed per call.

The checks call a rule hundreds of times and enter ``warnings.catch_warnings`` blocks between calls, which makes
Python show a warning it has shown before again: bitsandbytes' "inputs will be cast" warning filled a probe's log
4042 times. The report keeps each distinct warning once (category, message, place); the terminal lists them with -v
and says how many rules raised any by default; the pytest plugin and ``assert_rule_ok`` warn once with each.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from gradguard.checker import arrays, check, rrule
from gradguard.checker.errors import RuleCodeWarning
from gradguard.checker.raised_warnings import MAX_DISTINCT
from gradguard.checker.terminal import render_text
from gradguard.checker.testing import assert_rule_ok


def _sine(x):
    warnings.warn("inputs will be cast to float16 during quantization", UserWarning)
    return np.sin(x)


@rrule(_sine, arrays(shape=(3,)))
def warning_sine_rrule(x):
    return _sine(x), lambda g: (np.cos(x) * g,)


@rrule(np.sin, arrays(shape=(3,)))
def quiet_sine_rrule(x):
    return np.sin(x), lambda g: (np.cos(x) * g,)


_CALLS = [0]


def _counting(x):
    _CALLS[0] += 1
    warnings.warn(f"call number {_CALLS[0]}", UserWarning)  # a new message at every call
    return 2 * x


@rrule(_counting, arrays(shape=(2,)))
def many_warnings_rrule(x):
    return _counting(x), lambda g: (2 * g,)


def test_a_rule_s_warning_is_kept_once_with_its_result_and_not_printed(capfd):
    result = check(warning_sine_rrule, select=["GG1", "GG2"]).rules[0]
    out, err = capfd.readouterr()
    assert "inputs will be cast" not in out + err
    (kept,) = result.python_warnings
    assert kept["category"] == "UserWarning"
    assert kept["message"] == "inputs will be cast to float16 during quantization"
    assert kept["where"].endswith("test_raised_warnings.py:24"), kept["where"]
    assert result.verdict == "pass"
    assert check(quiet_sine_rrule, select=["GG1", "GG2"]).rules[0].python_warnings == []


def test_at_most_twenty_distinct_warnings_are_kept_and_the_rest_counted():
    kept = check(many_warnings_rrule, select=["GG1", "GG2"]).rules[0].python_warnings
    assert len(kept) == MAX_DISTINCT + 1
    numbers = [int(w["message"].removeprefix("call number ")) for w in kept[:-1]]
    assert numbers == sorted(set(numbers))  # distinct, in the order raised (calls in a check's silenced block raise none)
    more = int(kept[-1]["message"].split()[0])
    assert kept[-1] == {"category": "", "where": "",
                        "message": f"{more} more distinct warning(s) were raised and not kept"}
    assert more >= 20  # GG1 and GG2 call the forward at least twice per input, 20 inputs


def test_the_terminal_lists_them_with_v_and_counts_the_rules_by_default():
    report = check([warning_sine_rrule, quiet_sine_rrule], select=["GG1"])
    default = render_text(report)
    assert "note: 1 rule raised Python warnings while checked (not findings; -v lists them)" in default
    assert "inputs will be cast" not in default
    verbose = render_text(report, verbose=True)
    assert "  Python warnings raised while checked (each once; not findings):\n    UserWarning at " in verbose
    assert verbose.count("inputs will be cast to float16 during quantization") == 1
    assert "raised Python warnings" not in render_text(report, quiet=True)


def test_assert_rule_ok_warns_once_with_each():
    with pytest.warns(RuleCodeWarning) as caught:
        assert_rule_ok(warning_sine_rrule, select=["GG1"])
    texts = [str(w.message) for w in caught if issubclass(w.category, RuleCodeWarning)]
    assert len(texts) == 1
    assert texts[0].startswith("gradguard: warning_sine_rrule raised UserWarning at ")
    assert texts[0].endswith(": inputs will be cast to float16 during quantization")

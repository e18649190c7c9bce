"""The terminal report: one line per rule, details only for failures, -v for everything, -q for the summary."""

from pathlib import Path

from gradguard.checker.report import Finding, LoadFailure, Report, RuleResult
from gradguard.checker.render import render_junit
from gradguard.checker.terminal import render_text, use_color

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

MATRIX = {
    "contexts": ["output-used", "read-after"], "engines": ["tape[zero]", "jax"],
    "cells": [
        {"context": "output-used", "engine": "tape[zero]", "status": "right"},
        {"context": "output-used", "engine": "jax", "status": "right"},
        {"context": "read-after", "engine": "tape[zero]", "status": "right"},
        {"context": "read-after", "engine": "jax", "status": "skipped",
         "message": "no verdict: a kink lies near the input\n(details)"},
    ],
    "skipped": [{"context": "tied-weights", "reason": "no 2-D argument"}],
}


def _warning(rule):
    return Finding(check_id="GG302", severity="warning", title="absent (None) cotangent is not accepted", rule=rule,
                   message=f"the pullback of {rule} must accept None", expected="zero or None tangents",
                   actual="TypeError", fix="Treat None as a zero cotangent")


def _report():
    passing = RuleResult(name="softplus_rrule", source_file="rules/soft.py", source_lines=[13, 20], verdict="pass",
                         findings=[_warning("softplus_rrule")], checks_run=["GG101", "GG201", "GG302"],
                         checks_skipped=[{"id": "GG205", "reason": "no complex arguments"}], duration_s=1.5,
                         safety_matrix=MATRIX)
    failing = RuleResult(
        name="total_rrule", source_file="rules/total.py", source_lines=[4, 9], verdict="fail", duration_s=0.25,
        checks_run=["GG101", "GG104"],
        findings=[Finding(check_id="GG104", severity="error", title="tangent shape differs", rule="total_rrule",
                          message="the tangent for argument 0 has shape (6,), but argument 0 has shape (2, 3).",
                          expected="shape (2, 3)", actual="shape (6,)", fix="Reshape the tangent to x.shape.",
                          counterexample={"call": "total(x=array([[0., 0., 0.], [0., 0., 0.]]))"}),
                  Finding(check_id="GG101", severity="error", title="not a pair", rule="total_rrule",
                          message="the rule returned 3 values", expected=None, actual="a 3-tuple")],
    )
    return Report(rules=[passing, failing], load_errors=[LoadFailure("rules/broken.py", "Traceback\nRuntimeError: x")],
                  settings={"seed": 0, "max_examples": 20}, environment={"gradguard": "0.1.0"}, duration_s=2.0)


def test_a_passing_rule_is_one_line_and_its_warning_one_more():
    text = render_text(_report())
    lines = text.splitlines()
    (soft,) = [ln for ln in lines if ln.startswith("PASS")]
    assert soft.startswith("PASS  softplus_rrule") and "rules/soft.py:13" in soft and "1.50 s" in soft
    assert "warning GG302 softplus_rrule: absent (None) cotangent is not accepted (gradguard explain GG302)" in lines
    assert "Safety matrix" not in text and "skipped" not in text and "Treat None" not in text


def test_a_failure_shows_the_shrunk_input_expected_actual_and_the_fix():
    text = render_text(_report())
    assert "FAIL  total_rrule" in text and "GG101, GG104" in text
    assert "Failing input: total(x=array([[0., 0., 0.], [0., 0., 0.]]))" in text
    assert "Expected: shape (2, 3)" in text and "Actual:   shape (6,)" in text
    assert "Fix: Reshape the tangent to x.shape." in text
    assert "Expected: None" not in text  # a finding without an expected value says only what it got
    assert "ERROR rules/broken.py: the module failed to import" in text
    assert text.rstrip().endswith("1 failed, 1 passed, 1 module failed to import · 2 findings, 1 warning · 2.00 s")


def test_verbose_adds_the_matrix_skipped_checks_and_warnings_in_full():
    text = render_text(_report(), verbose=True)
    assert "Safety matrix (contexts x engines):" in text
    assert "skipped tied-weights: no 2-D argument" in text and "skipped GG205: no complex arguments" in text
    assert "    - read-after/jax: no verdict: a kink lies near the input" in text.splitlines()  # why a cell is "-"
    assert "Fix: Treat None as a zero cotangent" in text


def test_quiet_prints_only_the_summary():
    text = render_text(_report(), quiet=True)
    assert text.splitlines() == ["1 failed, 1 passed, 1 module failed to import · 2 findings, 1 warning · 2.00 s"]


def test_colour_only_on_a_terminal_and_never_with_no_color():
    class Tty:
        def isatty(self):
            return True

    class Pipe:
        def isatty(self):
            return False

    assert use_color(Tty(), env={}) and not use_color(Pipe(), env={})
    assert not use_color(Tty(), env={"NO_COLOR": "1"})
    assert "\x1b[" in render_text(_report(), color=True) and "\x1b[" not in render_text(_report())


def test_junit_never_makes_a_warning_a_failure():
    xml = render_junit(_report())
    assert '<failure type="GG302"' not in xml and "warning: GG302 absent (None) cotangent" in xml
    assert '<failure type="GG104"' in xml


def test_advice_for_a_rule_that_declares_mutates_does_not_tell_it_to_declare_mutates():
    from gradguard.checker import check
    from gradguard.checker.loader import load_rule

    report = check(load_rule(EXAMPLES / "addone.py", "addone_rrule"), select="GG501")
    fixes = [f.fix for f in report.findings]
    assert fixes and all("declare mutates=" not in fix for fix in fixes)
    assert all("it declares the mutation (mutates=)" in fix for fix in fixes)


def test_a_failure_says_why_an_engine_raised_in_its_matrix():
    """A column of "raised" read as a crash: the engine's reason (a pullback writing into JAX's read-only buffer)
    was in the JSON only. One line per reason, with the engine and the contexts, without -v."""
    raised = {"contexts": ["output-used", "fan-out"], "engines": ["tape[zero]", "jax"],
              "cells": [{"context": "output-used", "engine": "tape[zero]", "status": "wrong", "rel_error": 0.6},
                        {"context": "output-used", "engine": "jax", "status": "raised",
                         "message": "AdapterError: writes in place into a read-only buffer\nTraceback ..."},
                        {"context": "fan-out", "engine": "tape[zero]", "status": "right"},
                        {"context": "fan-out", "engine": "jax", "status": "raised",
                         "message": "AdapterError: writes in place into a read-only buffer"}]}
    report = _report()
    report.rules[1].safety_matrix = raised
    report.rules[1].findings.append(Finding(check_id="GG501", severity="error", title="wrong gradient in a context",
                                            rule="total_rrule", message="in context `output-used` ...", expected="1.0",
                                            actual="1.6"))  # the matrix shows with a context's finding
    lines = render_text(report).splitlines()
    assert "    raised (jax in output-used, fan-out): AdapterError: writes in place into a read-only buffer" in lines
    assert not any("raised (" in ln for ln in render_text(_report()).splitlines())  # no raised cell, no line

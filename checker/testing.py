"""Checking rules inside your own tests.

    from gradguard.testing import assert_rule_ok
    from mylib.rules import softplus_rrule

    def test_softplus_rule():
        assert_rule_ok(softplus_rrule)

:func:`assert_rule_ok` runs every check (or those selected) and raises ``AssertionError`` with the
terminal report's findings when the rule fails. Its keywords are :func:`gradguard.check`'s; the
project's ``[tool.gradguard]`` settings apply unless ``config=False``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gradguard.checker.report import Report

__all__ = ["assert_rule_ok", "settings_for"]

# check() keywords that make no sense for one rule checked inside a test
_NOT_FOR_ONE_RULE = {"jobs"}


def settings_for(start: Path | None = None) -> dict[str, Any]:
    """The check() keywords that the nearest ``[tool.gradguard]`` sets (``paths`` and CLI-only keys left out)."""
    from gradguard.checker.config import check_kwargs, load_config

    kwargs = check_kwargs(load_config(start=start).values)
    return {k: v for k, v in kwargs.items() if k not in _NOT_FOR_ONE_RULE}


def assert_rule_ok(rule: Any, *, config: bool = True, **kwargs: Any) -> Report:
    """Check ``rule`` (a RuleSpec) and raise AssertionError with the findings unless it passes.

    Warnings do not fail it. Returns the report, for further assertions."""
    from gradguard.checker.runner import check
    from gradguard.checker.specs import RuleSpec
    from gradguard.checker.terminal import render_text

    if not isinstance(rule, RuleSpec):
        raise TypeError(f"Got {rule!r}, but assert_rule_ok takes one rule: a function decorated with "
                        "@rrule(...), or what jax_rule(...) or torch_rule(...) returned.")
    merged = {**(settings_for() if config else {}), **kwargs}
    report = check(rule, **merged)
    if not report.passed:
        raise AssertionError(f"gradguard: rule {rule.name} does not pass\n\n" + render_text(report))
    warn_fewer_inputs(report)
    warn_raised(report)
    return report


def warn_fewer_inputs(report: Report) -> None:
    """A :class:`FewerInputsWarning` for each rule of ``report`` whose checks spent the input budget: its verdict
    rests on fewer inputs than asked, which a test run says as the terminal report does."""
    import warnings

    from gradguard.checker.errors import FewerInputsWarning

    for rule in report.rules:
        if rule.budget_cut:
            warnings.warn(FewerInputsWarning(f"gradguard: {rule.name}: {rule.examples_cut['message']}"), stacklevel=3)


def warn_raised(report: Report) -> None:
    """A :class:`RuleCodeWarning` for each Python warning a rule's code raised while checked (each distinct one once:
    the report keeps them instead of printing them at every call)."""
    import warnings

    from gradguard.checker.errors import RuleCodeWarning

    for rule in report.rules:
        for w in rule.python_warnings:
            where = f"{w['category']} at {w['where']}: " if w["category"] else ""
            warnings.warn(RuleCodeWarning(f"gradguard: {rule.name} raised {where}{w['message']}"), stacklevel=3)

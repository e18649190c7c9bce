"""Errors raised by the checker library.

    GradguardError                 base of everything the checker raises on purpose
    ├── SpecError                  a rule spec or option is invalid (raised at decoration time)
    ├── LoadError                  a rule module could not be imported or holds no rules
    └── UsageError                 bad arguments to `check()` or the CLI (unknown check id, ...)

    FewerInputsWarning             a passing rule was checked on fewer inputs than asked: its input budget ran out

Findings about a user's rule are *not* exceptions: checks return them as data.
"""

from __future__ import annotations

__all__ = ["GradguardError", "SpecError", "LoadError", "UsageError", "FewerInputsWarning"]


class GradguardError(Exception):
    """Base class of the errors raised by gradguard's checker."""


class SpecError(GradguardError, ValueError):
    """A rule spec is invalid; the message quotes the bad value and the fix."""


class LoadError(GradguardError):
    """A rule module failed to import; carries the user's traceback."""

    def __init__(self, path: str, traceback_text: str) -> None:
        super().__init__(f"could not import rule module {path}:\n{traceback_text}")
        self.path = path
        self.traceback_text = traceback_text


class UsageError(GradguardError, ValueError):
    """Invalid arguments to `check()` or to the command line."""


class RuleCodeWarning(UserWarning):
    """A Python warning the code a rule's checks called raised (gradguard.checker.raised_warnings keeps each distinct
    one with the rule's result instead of printing it at every call): the pytest plugin and ``assert_rule_ok``
    warn once with each, naming the rule, the warning's category and its place, so pytest's summary lists it."""


class FewerInputsWarning(UserWarning):
    """A rule passed on fewer inputs than asked, because its checks spent the input budget (``--input-budget``):
    the pytest plugin and ``assert_rule_ok`` warn with the report's note, so a test run says it too."""

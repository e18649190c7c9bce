"""Checking rules inside your own tests: ``from gradguard.testing import assert_rule_ok``.

See :mod:`gradguard.checker.testing`."""

from gradguard.checker.testing import assert_rule_ok, settings_for

__all__ = ["assert_rule_ok", "settings_for"]

"""Reproducers: a standalone script per finding that replays the failing input and fails the same way.

The script loads the rule from its module file, rebuilds the shrunk input and
every random draw the check made (cotangents, directions, scales) as exact
literals, and calls :func:`replay`, which runs the same check on that input
and raises ``AssertionError`` with the finding's message.
"""

from __future__ import annotations

import os
from typing import Any

from checker.case import Case, ReplayDraws, RuleRaised
from checker.checks.registry import CHECKS, Problem, Skip
from checker.inputs import literal
from checker.specs import RuleSpec

__all__ = ["script", "replay"]


def replay(rule: RuleSpec, check_id: str, args: tuple[Any, ...], draws: list[Any]) -> list[Problem]:
    """Run check ``check_id`` on ``args`` with the recorded ``draws``; raise AssertionError if it fails."""
    from checker import checks as _register  # noqa: F401

    info = CHECKS[check_id]
    case = Case(rule, tuple(args), ReplayDraws(draws))
    try:
        problems = list(info.fn(case) or ())
    except RuleRaised as exc:
        problems = [exc.problem()]
    except Skip as skip:
        raise AssertionError(f"{check_id} did not apply to this input: {skip}") from None
    if problems:
        raise AssertionError(f"{check_id} {info.title}: " + " | ".join(p.message for p in problems))
    return problems


def script(rule: RuleSpec, check_id: str, case: Case, problem: Problem, *, root: str | None = None) -> str:
    path = rule.source_file or "<unknown>"
    if root and rule.source_file:
        rel = os.path.relpath(rule.source_file, root)
        path = rule.source_file if rel.startswith("..") else rel
    title = CHECKS[check_id].title
    draws = ",\n    ".join(literal(v) for _, v in case.record)
    labels = ", ".join(label for label, _ in case.record) or "none"
    message = problem.message.replace("\n", "\n# ")
    return f'''"""Reproducer for {check_id} ({title}) on rule {rule.name}.

Run it with `python <this file>` from the folder the rule path is relative to.
It replays the shrunk failing input and raises AssertionError while the rule is broken.
"""
import numpy as np

from checker.loader import load_rule
from checker.reproducer import replay

rule = load_rule({path!r}, {rule.name!r})
args = {literal(tuple(case.args))}
# Random draws the check made, in order: {labels}
draws = [
    {draws}
]
# Expected failure:
# {message}
replay(rule, {check_id!r}, args, draws)
print("{check_id} passes on this input: the rule is fixed.")
'''

"""What a check returns: the problems it found (or a :class:`Skip` with the reason it does not apply).

Checks return data and never write results: the runner turns each :class:`Problem` into a
:class:`~gradguard.checker.report.Finding`, with a reproducer script built from the case it failed on
or from the problem's :class:`ContextReplay`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem", "Skip", "ContextReplay"]


@dataclass(frozen=True)
class ContextReplay:
    """How to rerun a safety-matrix context: which program, under which engines."""

    context: str
    engines: tuple[str, ...]


@dataclass
class Problem:
    """What a check found wrong on one input; the runner turns it into a :class:`~checker.report.Finding`."""

    message: str
    location: str | None = None
    expected: str | None = None
    actual: str | None = None
    fix: str | None = None
    # A per-rule check's replay (e.g. a safety-matrix context); the runner alone turns it into a reproducer
    # script. Per-input checks need none: the runner replays their case.
    replay: ContextReplay | None = None
    # A milder severity than the check's own for this problem ("warning" where the check established less,
    # e.g. GG206 at a point without a derivative); None: the check's severity.
    severity: str | None = None


class Skip(Exception):
    """Raised by a check that does not apply to this rule (the reason is reported).

    ``rule_wide``: what this input showed holds for the rule as a whole and voids the verdicts the check reached at
    the rule's earlier inputs (GG204 where the tape's derivative proves not to be the rule's second order: its
    agreement at an earlier input established nothing). The check is then skipped for the rule, with this reason,
    instead of counted as run on the inputs before.

    ``here``: the reason as it holds for this one input, where ``reason`` speaks of every input drawn (it is reported
    as the check's reason only where the check skipped at every input); a check judged at some inputs and skipped at
    others reports this one for the others (``RuleResult.checks_partial``). None: ``reason`` holds at one input too."""

    def __init__(self, reason: str, *, rule_wide: bool = False, here: str | None = None) -> None:
        super().__init__(reason)
        self.rule_wide = rule_wide
        self.here = here if here is not None else reason

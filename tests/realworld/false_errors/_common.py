"""Shared by the reproductions: run gradguard on one rule and report whether the false error is still there."""

from __future__ import annotations

import sys

from gradguard import check


def reproduce(rule: object, checks: set[str] | None, seeds: range = range(10)) -> None:
    """Check ``rule`` at ``seeds`` with only ``checks`` selected (None: every check); exit 1 at the first seed
    with an error finding (or a crash) among them, printing it, and 0 when no seed has one."""
    for seed in seeds:
        result = check(rule, seed=seed, select=None if checks is None else sorted(checks)).rules[0]
        if result.verdict == "error":
            print(f"seed {seed}: gradguard crashed: {result.error}")
            sys.exit(1)
        errors = [f for f in result.findings if f.severity == "error" and (checks is None or f.check_id in checks)]
        for f in errors:
            print(f"seed {seed}: {f.check_id} {f.message}")
        if errors:
            sys.exit(1)
    print(f"no error finding from {'every check' if checks is None else sorted(checks)} at seeds {seeds.start}..{seeds.stop - 1}: fixed")
    sys.exit(0)

"""Reproducers: a standalone script per finding that replays the failing input and fails the same way.

The script loads the rule from its module file, rebuilds the shrunk input and
every random draw the check made (cotangents, directions, scales) as exact
literals, and calls :func:`replay`, which runs the same check on that input
and raises ``AssertionError`` with the finding's message.
"""

from __future__ import annotations

import os
from typing import Any

from gradguard.checker.case import Case, ReplayDraws, RuleRaised
from gradguard.checker.checks.registry import CHECKS, Problem, Skip
from gradguard.checker.foreign import FOREIGN_ARRAYS
from gradguard.checker.inputs import has_literal, literal
from gradguard.checker.specs import DECLARED_IN, RuleSpec, constant_positions

__all__ = ["script", "replay", "context_script", "replay_context", "CONSTANT"]

# An argument the rule declares with constant(value): the script names it instead of writing the value (a NamedTuple
# of parameters, a module, a callable have no exact literal), and replay hands the rule the declared value.
class _Constant:
    def __repr__(self) -> str:
        return "CONSTANT"


CONSTANT = _Constant()


def replay(rule: RuleSpec, check_id: str, args: tuple[Any, ...], draws: list[Any],
           libraries: dict[int, str] | None = None) -> list[Problem]:
    """Run check ``check_id`` on ``args`` with the recorded ``draws``; raise AssertionError if it fails.
    ``libraries``: the argument positions the rule's spec draws as another library's arrays ({0: "jax"}),
    whose NumPy literals the rule gets back in that library, as in the run that found the failure."""
    from gradguard.checker import checks as _register  # noqa: F401

    if libraries and FOREIGN_ARRAYS in rule.extra:
        rule.extra[FOREIGN_ARRAYS].libraries.update(libraries)
    declared = constant_positions(rule.arg_specs)
    args = tuple(declared[i] if a is CONSTANT and i in declared else a for i, a in enumerate(args))
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


def _module_path(rule: RuleSpec, root: str | None) -> str:
    """The rule module a reproducer loads the rule from, relative to ``root`` where it lies inside it: the module
    the rule was found in, which is not always the file of its code (a torch rule whose Function is defined in
    another module: its reproducer looked for the rule there and failed with 'no rule named ...')."""
    where = rule.extra.get(DECLARED_IN) or rule.source_file
    if not where:
        return "<unknown>"
    if root:
        rel = os.path.relpath(where, root)
        return where if rel.startswith("..") else rel
    return where


def script(rule: RuleSpec, check_id: str, case: Case, problem: Problem, *, root: str | None = None) -> str:
    path = _module_path(rule, root)
    title = CHECKS[check_id].title
    draws = ",\n    ".join(literal(v) for _, v in case.record)
    labels = ", ".join(label for label, _ in case.record) or "none"
    message = problem.message.replace("\n", "\n# ")
    declared = constant_positions(rule.arg_specs)
    opaque = {i for i, v in declared.items() if not has_literal(v)}
    written = tuple("CONSTANT" if i in opaque else literal(a) for i, a in enumerate(case.args))
    arguments = f"({written[0]},)" if len(written) == 1 else f"({', '.join(written)})"
    if opaque:
        arguments += "  # CONSTANT: the value the rule declares with constant(...)"
    plain = rule.extra.get(FOREIGN_ARRAYS)
    libraries = f", libraries={dict(plain.libraries)!r}" if plain is not None and plain.libraries else ""
    return f'''"""Reproducer for {check_id} ({title}) on rule {rule.name}.

Run it with `python <this file>` from any directory inside the project.
It replays the shrunk failing input and raises AssertionError while the rule is broken.
"""
import numpy as np

from gradguard.checker.loader import load_rule
from gradguard.checker.reproducer import CONSTANT, replay

rule = load_rule({path!r}, {rule.name!r}, near=globals().get("__file__"))  # the script's place; None in a REPL
args = {arguments}
# Random draws the check made, in order: {labels}
draws = [
    {draws}
]
# Expected failure:
# {message}
replay(rule, {check_id!r}, args, draws{libraries})
print("{check_id} passes on this input: the rule is fixed.")
'''


def replay_context(rule: RuleSpec, context: str, *, seed: int, engines: list[str]) -> None:
    """Rerun one context of the safety matrix under ``engines``; raise AssertionError unless every cell is right."""
    from gradguard.checker.contexts import run_matrix

    outcome = run_matrix(rule, seed=seed, contexts=[context], engines=engines)
    bad = []
    for row in outcome.rows:
        for engine, cell in row.cells.items():
            if cell.status != "right":
                detail = f"relative error {cell.rel_error:.2e}" if cell.rel_error is not None else (cell.message or "")
                bad.append(f"{engine}: {cell.status} ({detail})" + (f"; {cell.diagnosis}" if cell.diagnosis else ""))
    if bad:
        raise AssertionError(f"context {context!r} of {rule.name}: " + " | ".join(bad))


def context_script(rule: RuleSpec, check_id: str, context: str, engines: list[str], *, seed: int, message: str,
                   root: str | None = None) -> str:
    """A standalone script that reruns one safety-matrix context (seeded, so the same program and inputs)."""
    path = _module_path(rule, root)
    title = CHECKS[check_id].title
    quoted = message.replace("\n", "\n# ")
    return f'''"""Reproducer for {check_id} ({title}) on rule {rule.name}, context {context!r}.

Run it with `python <this file>` from any directory inside the project. It rebuilds the context
program with the same seed, differentiates it under {", ".join(engines)} and compares with finite
differences of the whole program; it raises AssertionError while the gradient is wrong.
"""
from gradguard.checker.loader import load_rule
from gradguard.checker.reproducer import replay_context

rule = load_rule({path!r}, {rule.name!r}, near=globals().get("__file__"))  # the script's place; None in a REPL
# Expected failure:
# {quoted}
replay_context(rule, {context!r}, seed={seed!r}, engines={engines!r})
print("{check_id}: context {context} is right under {", ".join(engines)}: the rule is safe there.")
'''

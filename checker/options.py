"""What a run of checks is configured with, and what a per-rule check receives.

Below the runner and the checks alike: :mod:`gradguard.checker.runner` builds an :class:`Options` per
run, :mod:`gradguard.checker.per_rule` hands each per-rule check a :class:`PerRule`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gradguard.checker._memory import default_limit_mb
from gradguard.checker.specs import RuleSpec

__all__ = ["Options", "PerRule", "DEFAULT_MAX_EXAMPLES", "DEFAULT_RULE_TIMEOUT_S", "DEFAULT_MEMORY_LIMIT_MB", "DEFAULT_SHRINK_BUDGET_S",
           "DEFAULT_SHRINK_STEPS", "DEFAULT_INPUT_BUDGET_S", "SAFETY_MATRIX"]

DEFAULT_MAX_EXAMPLES = 20
DEFAULT_RULE_TIMEOUT_S = 120.0
# A safety net for rules that are slow for their size: no new input is drawn once the checks of the inputs drawn
# so far have taken this long (the checker's own time, as for the time limit: waits for a CPU held by other
# processes do not count, so worker processes side by side draw what one process alone draws). Only rules far
# slower than their input size suggests reach it, and their result says how many inputs they were checked on.
DEFAULT_INPUT_BUDGET_S = 30.0
# How much a rule may grow the process's resident memory (gradguard.checker._memory): half the machine's
# physical memory, so that a runaway rule is stopped before the machine swaps, while no rule of the
# corpus comes near it (docs/config.md has the measured growth). None where physical memory is unknown.
DEFAULT_MEMORY_LIMIT_MB = default_limit_mb()
# Shrinking a failure costs far more than finding it (Hypothesis' shrinker on element-by-element arrays).
# The arrays are shrunk once per rule: the later failing checks start from the first one's shrunk input
# and shrink only their own draws. Each check gets at most DEFAULT_SHRINK_STEPS evaluations while
# shrinking (deterministic: the budget that keeps a failing rule's shrinking near a second), and each
# rule DEFAULT_SHRINK_BUDGET_S seconds of shrinking, shared by its failing checks: a safety net, like
# the input budget, set far above what the step budget takes, because a cut by the clock makes
# counterexamples depend on the machine's load, and they depend on the seed only (bench/RESULTS.md has
# the measured trade-off). When either runs out, the smallest failing input found so far is reported
# and its counterexample says so. None: no limit (Hypothesis' own five minutes).
DEFAULT_SHRINK_BUDGET_S = 10.0
DEFAULT_SHRINK_STEPS = 25


@dataclass
class Options:
    seed: int = 0
    max_examples: int = DEFAULT_MAX_EXAMPLES
    rule_timeout_s: float | None = DEFAULT_RULE_TIMEOUT_S
    memory_limit_mb: float | None = DEFAULT_MEMORY_LIMIT_MB  # growth of resident memory per rule; None: no limit
    root: str | None = None  # paths in reports and reproducers are relative to this
    shrink_budget_s: float | None = DEFAULT_SHRINK_BUDGET_S  # shrinking time per rule
    shrink_steps: int | None = DEFAULT_SHRINK_STEPS  # evaluations per check while shrinking
    input_budget_s: float | None = DEFAULT_INPUT_BUDGET_S  # checking time after which no new input is drawn; None: none
    jax_cache_dir: str | None = None  # JAX's persistent compilation cache (None: compile in each process)
    # What an unused output's pullback receives, for rules that declare no convention (specs.UNUSED_COTANGENTS);
    # None: specs.DEFAULT_UNUSED_COTANGENT.
    unused_cotangent: str | None = None
    # How the safety matrix's JAX column runs a context program: "auto", "jit" (compiled once per program),
    # "eager" or "traced" (run with NumPy) (`gradguard.checker.contexts._jax_engine.MODES`); None: "auto". The
    # verdicts are the same.
    jax_column: str | None = None


@dataclass
class PerRule:
    """What a per-rule check (e.g. the safety matrix) receives."""

    rule: RuleSpec
    options: Options
    # Computed once, used by several checks; the runner reads what the checks leave here (the safety
    # matrix, under SAFETY_MATRIX) into the rule's result: checks never write results themselves.
    shared: dict[str, Any] = field(default_factory=dict)


SAFETY_MATRIX = "safety_matrix"  # PerRule.shared key: the contexts' Outcome

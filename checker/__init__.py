"""gradguard's checker: is this custom differentiation rule right, and where is it safe to use?

    from gradguard.checker import rrule, arrays, check

    @rrule(square, arrays(shape=(3,)))
    def square_rrule(x):
        return x * x, lambda ybar: (2 * x * ybar,)

    report = check(square_rrule)
    assert report.passed
"""

from gradguard.checker._version import VERSION as __version__
from gradguard.checker.checks import catalogue
from gradguard.checker.jax_rules import jax_rule
from gradguard.checker.errors import GradguardError, LoadError, SpecError, UsageError
from gradguard.checker.report import Finding, Report, RuleResult
from gradguard.checker.runner import check
from gradguard.checker.specs import RuleSpec, arrays, constant, floats, rrule
from gradguard.checker.torch_rules import torch_rule

__all__ = [
    "rrule",
    "jax_rule",
    "torch_rule",
    "arrays",
    "floats",
    "constant",
    "check",
    "catalogue",
    "RuleSpec",
    "Report",
    "RuleResult",
    "Finding",
    "GradguardError",
    "SpecError",
    "LoadError",
    "UsageError",
]


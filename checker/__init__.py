"""gradguard's checker: is this custom differentiation rule right, and where is it safe to use?

    from checker import rrule, arrays, check

    @rrule(square, arrays(shape=(3,)))
    def square_rrule(x):
        return x * x, lambda ybar: (2 * x * ybar,)

    report = check(square_rrule)
    assert report.passed
"""

from checker.checks import catalogue
from checker.jax_rules import jax_rule
from checker.errors import GradguardError, LoadError, SpecError, UsageError
from checker.report import Finding, Report, RuleResult
from checker.runner import check
from checker.specs import RuleSpec, arrays, constant, floats, rrule

__all__ = [
    "rrule",
    "jax_rule",
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

__version__ = "0.1.0"

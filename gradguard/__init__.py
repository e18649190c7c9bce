"""gradguard: is this custom differentiation rule right, and where is it safe to use?

The public API::

    from gradguard import rrule, arrays, check

    @rrule(square, arrays(shape=(3,)))
    def square_rrule(x):
        return x * x, lambda ybar: (2 * x * ybar,)

    report = check(square_rrule)
    assert report.passed

The distribution installs one top-level package, ``gradguard``; the repository's
``checker/``, ``engines/``, ``service/`` and ``web/`` folders are its subpackages
``gradguard.checker``, ``gradguard.engines``, ``gradguard.service`` and ``gradguard.web``
(``package-dir`` in pyproject.toml). The public names are those of ``gradguard.checker``,
read on first use: importing ``gradguard.service`` or ``gradguard.engines`` alone does not
load the checker.
"""

from __future__ import annotations

import os
from typing import Any

# In a source checkout the subpackages are the repository's top-level folders: let a checkout on
# PYTHONPATH (or a second worktree) import its own code, as the editable install's mapping does.
# An installed wheel has them inside this folder and needs nothing.
_here = os.path.dirname(os.path.abspath(__file__))
if not os.path.isdir(os.path.join(_here, "checker")) and os.path.isfile(
        os.path.join(os.path.dirname(_here), "checker", "__init__.py")):
    __path__.append(os.path.dirname(_here))  # noqa: F821 - a package's __path__
del _here

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


def __getattr__(name: str) -> Any:
    if name in __all__ or name == "__version__":
        from gradguard import checker

        return getattr(checker, name)
    raise AttributeError(f"module 'gradguard' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__, "__version__"])

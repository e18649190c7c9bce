"""The checks, one module per family; importing this package registers every check id.

Find a check by its id in one hop: GG1xx contract.py, GG2xx numeric.py (GG203 and
GG204, which need JAX: numeric_jax.py; GG206: numeric_finite.py; GG204 for NumPy rules: second_order.py;
GG207 and GG208, the jvp of a custom_jvp: forward.py), GG3xx cotangent.py, GG4xx state.py (GG403,
GG404 and GG406, which call a rule again: state_repeat.py), GG5xx context.py, GG6xx compose.py, GG7xx (PyTorch) torch_checks.py, torch_inplace.py and torch_layout.py.
"""

import difflib
from typing import Any

from gradguard.checker.check_ids import split_check_ids
from gradguard.checker.checks import contract  # noqa: F401
from gradguard.checker.checks import numeric  # noqa: F401
from gradguard.checker.checks import numeric_finite  # noqa: F401
from gradguard.checker.checks import cotangent  # noqa: F401
from gradguard.checker.checks import state  # noqa: F401
from gradguard.checker.checks import state_repeat  # noqa: F401
from gradguard.checker.checks import context  # noqa: F401
from gradguard.checker.checks import numeric_jax  # noqa: F401
from gradguard.checker.checks import compose  # noqa: F401
from gradguard.checker.checks import forward  # noqa: F401
from gradguard.checker.checks import torch_checks  # noqa: F401
from gradguard.checker.checks import torch_inplace  # noqa: F401
from gradguard.checker.checks import torch_layout  # noqa: F401
from gradguard.checker.checks.registry import CHECKS, FAMILIES, CheckInfo, Problem, Skip, check


def catalogue() -> list[CheckInfo]:
    """All registered checks, in id order (importing this package registered every check module)."""
    return [CHECKS[k] for k in sorted(CHECKS)]


def check_prefixes(option: str, value: Any, error: type[Exception]) -> list[str]:
    """The check ids or prefixes of ``option`` (`split_check_ids`), each matching a registered check; ``error`` (the
    caller's) naming one that matches none, with the closest ids."""
    known = [c.id for c in catalogue()]
    parts = split_check_ids(option, value, error, form=False)
    for part in parts:
        if not any(k.startswith(part) for k in known):
            close = difflib.get_close_matches(part, known, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else f" Known ids: {known[0]}..{known[-1]}."
            raise error(f"Got {option}={part!r}, which matches no check id.{hint}")
    return parts


__all__ = ["CHECKS", "FAMILIES", "CheckInfo", "Problem", "Skip", "catalogue", "check", "check_prefixes"]

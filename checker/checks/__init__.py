"""The checks, one module per family; importing this package registers every check id.

Find a check by its id in one hop: GG1xx contract.py, GG2xx numeric.py (GG203 and
GG204, which need JAX: numeric_jax.py; GG206: numeric_finite.py; GG204 for NumPy rules: second_order.py;
GG207 and GG208, the jvp of a custom_jvp: forward.py), GG3xx cotangent.py, GG4xx state.py (GG403,
GG404 and GG406, which call a rule again: state_repeat.py), GG5xx context.py, GG6xx compose.py, GG7xx (PyTorch) torch_checks.py and torch_inplace.py.
"""

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
from gradguard.checker.checks.registry import CHECKS, FAMILIES, CheckInfo, Problem, Skip, check


def catalogue() -> list[CheckInfo]:
    """All registered checks, in id order (importing this package registered every check module)."""
    return [CHECKS[k] for k in sorted(CHECKS)]


__all__ = ["CHECKS", "FAMILIES", "CheckInfo", "Problem", "Skip", "catalogue", "check"]

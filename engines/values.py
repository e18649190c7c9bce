"""The values rules exchange, as every layer sees them: which ones carry a tangent.

One definition for the tape, the checker's specs and its contexts (a value the tape differentiates is
a value the checks draw a cotangent for, and the other way round).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["differentiable"]


def differentiable(value: Any) -> bool:
    """Float or complex arrays and scalars are differentiable; ints, bools and the rest are not."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (float, complex, np.floating, np.complexfloating)):
        return True
    return isinstance(value, np.ndarray) and value.dtype.kind in "fc"

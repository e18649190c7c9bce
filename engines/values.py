"""The values rules exchange, as every layer sees them: which ones carry a tangent.

One definition for the tape, the checker's specs and its contexts (a value the tape differentiates is
a value the checks draw a cotangent for, and the other way round).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["differentiable", "is_ml_float"]


def differentiable(value: Any) -> bool:
    """Float or complex arrays and scalars are differentiable; ints, bools and the rest are not."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (float, complex, np.floating, np.complexfloating)):
        return True
    return isinstance(value, np.ndarray) and value.dtype.kind in "fc"


def is_ml_float(dtype: Any) -> bool:
    """Whether ``dtype`` is one of the floats NumPy only knows through ml_dtypes (bfloat16, the float8 types: what JAX's
    low-precision arrays hold), whose NumPy kind is "V" rather than "f"."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        return False
    if dtype.kind != "V" or not getattr(dtype.type, "__module__", "").startswith("ml_dtypes"):
        return False
    try:
        import ml_dtypes

        ml_dtypes.finfo(dtype)  # raises for ml_dtypes' integer types (int4)
    except Exception:  # noqa: BLE001 - not a float type ml_dtypes knows
        return False
    return True


"""Recognise JAX values that are being differentiated, without importing JAX.

`is_jax_differentiation_tracer` is cheap and safe to register with
`gradguard.engines.within_gradient` at import time: it looks JAX up in `sys.modules`
and answers False when JAX was never imported (no JAX value can exist then).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["is_jax_differentiation_tracer"]

# Differentiation tracers (forward mode and the linearize trace that grad/vjp use).
_DIFF_TRACERS = ("JVPTracer", "LinearizeTracer")
# Tracers that only batch: look through them at the value they carry.
_BATCH_TRACERS = ("BatchTracer",)


def is_jax_differentiation_tracer(x: Any) -> bool:
    """True if ``x`` is a JAX value being differentiated (under grad, vjp, jvp, linearize).

    False for concrete arrays and for tracers that are only under ``jit`` or
    ``vmap``. A batched value inside ``grad(vmap(f))`` counts: the batch
    tracer is looked through. Limitation: inside ``grad(jit(f))`` the body of
    ``f`` is traced by ``jit`` before it is differentiated, so it sees a
    plain jit tracer and this returns False (JAX decides differentiation
    after tracing there).
    """
    if "jax" not in sys.modules:
        return False
    core = sys.modules.get("jax._src.core")
    if core is None or not isinstance(x, core.Tracer):
        return False
    for _ in range(64):  # tracers nest at most a few levels; bound the walk anyway
        kind = type(x).__name__
        if kind in _DIFF_TRACERS:
            return True
        if kind in _BATCH_TRACERS and isinstance(getattr(x, "val", None), core.Tracer):
            x = x.val
            continue
        return False
    return False

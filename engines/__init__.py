"""How to differentiate: the tape AD engine, the JAX adapters and finite differences.

This layer knows nothing of checks, reports or services.
"""

from gradguard.engines._within import register_within_gradient, within_gradient
from gradguard.engines.errors import AdapterError, EngineError, PlatformUnavailable, TraceError
from gradguard.engines.jax_engine._tracers import is_jax_differentiation_tracer

# JAX values being differentiated count as "within gradient" even before the JAX engine is
# first used; the predicate looks JAX up in sys.modules and never imports it.
register_within_gradient(is_jax_differentiation_tracer)

__all__ = [
    "within_gradient",
    "register_within_gradient",
    "EngineError",
    "TraceError",
    "AdapterError",
    "PlatformUnavailable",
]

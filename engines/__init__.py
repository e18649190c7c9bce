"""How to differentiate: the tape AD engine, the JAX adapters and finite differences.

This layer knows nothing of checks, reports or services.
"""

from engines._within import register_within_gradient, within_gradient
from engines.errors import AdapterError, EngineError, PlatformUnavailable, TraceError

__all__ = [
    "within_gradient",
    "register_within_gradient",
    "EngineError",
    "TraceError",
    "AdapterError",
    "PlatformUnavailable",
]

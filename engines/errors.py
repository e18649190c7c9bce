"""Errors raised by gradguard's engines.

    EngineError                 base of every error an engine raises on purpose
    ├── TraceError              a program could not be traced (names the unsupported operation)
    ├── AdapterError            a rule could not be adapted to an engine (wrong pytree, untraceable fwd, ...)
    └── PlatformUnavailable     a device was asked for (e.g. GPU) that this process cannot use
"""

from __future__ import annotations

__all__ = ["EngineError", "TraceError", "AdapterError", "PlatformUnavailable"]


class EngineError(Exception):
    """Base class of the errors raised by gradguard's engines."""


class TraceError(EngineError, TypeError):
    """A program called an operation the tape cannot differentiate; the message names it."""


class AdapterError(EngineError, ValueError):
    """A rule could not be turned into a rule of another engine; the message says why and how to fix it."""


class PlatformUnavailable(EngineError, RuntimeError):
    """The requested device platform is not available in this process."""

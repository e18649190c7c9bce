"""Errors raised by gradguard's engines.

    EngineError                 base of every error an engine raises on purpose
    ├── TraceError              a program could not be traced (names the unsupported operation)
    ├── AdapterError            a rule could not be adapted to an engine (wrong pytree, untraceable fwd, ...)
    │   └── ReverseModeError    a custom_jvp runs, but JAX cannot reverse-differentiate it through its jvp rule
    └── PlatformUnavailable     a device was asked for (e.g. GPU) that this process cannot use
    NoNumpyDtype                a tensor of a dtype NumPy has none like (bfloat16, float8): not a user error to
                                catch, a BaseException that stops the rule's check with a verdict of "error"
"""

from __future__ import annotations

__all__ = ["EngineError", "TraceError", "AdapterError", "ReverseModeError", "PlatformUnavailable", "NoNumpyDtype",
           "clause"]


class EngineError(Exception):
    """Base class of the errors raised by gradguard's engines."""


class TraceError(EngineError, TypeError):
    """A program called an operation the tape cannot differentiate; the message names it."""


class AdapterError(EngineError, ValueError):
    """A rule could not be turned into a rule of another engine; the message says why and how to fix it."""


class ReverseModeError(AdapterError):
    """A custom_jvp function runs, but reverse mode through it failed: ``jax.vjp`` linearizes its jvp rule and
    transposes it, and JAX could do neither here. Forward mode, which runs the jvp rule as written, is not
    concerned: the checks of the jvp itself still judge it."""


class PlatformUnavailable(EngineError, RuntimeError):
    """The requested device platform is not available in this process."""


class NoNumpyDtype(BaseException):
    """A rule's tensor has a dtype NumPy has no counterpart for (``torch.bfloat16``, the ``float8`` types), so the
    checks, which compute with NumPy, cannot read it; the message names the dtype. A BaseException, like the
    checker's unsupported-output error it is reported as, so that neither the rule's code nor Hypothesis catches
    it as the rule's own failure."""

    def __init__(self, dtype: str) -> None:
        super().__init__(dtype)
        self.dtype = dtype


def clause(exc: BaseException) -> str:
    """An exception's text to go on with a sentence of ours: without its own closing period (a message that ended
    "(1, 6)." read "(1, 6).. It is called as bwd(...)")."""
    text = str(exc).rstrip()
    return text[:-1] if text.endswith(".") and not text.endswith("..") else text

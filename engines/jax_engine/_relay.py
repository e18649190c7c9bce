"""Carry exceptions raised inside host callbacks back to the caller as themselves.

JAX turns an exception raised inside `jax.pure_callback` into a
`JaxRuntimeError` whose message is the formatted traceback; the exception
object is lost. The callbacks of the adapters therefore wrap what the rule
raised in :class:`RelayedError`, whose message carries a token, and keep the
original under that token. :func:`relaying` (used by `run_under` and by eager
calls of adapted rules) turns a `JaxRuntimeError` carrying a token back into
the original exception. The store is bounded (the newest `_KEEP` entries), so
errors JAX never hands back do not accumulate. A caller outside `relaying`
still gets a readable message: the token is followed by the original text.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import re
import threading
from typing import Iterator, NoReturn

__all__ = ["RelayedError", "relay", "relaying", "install_log_filter", "callbacks_quiet"]

_KEEP = 64
_TOKEN = re.compile(r"\[gradguard-relay:(\d+)\]")
_store: "collections.OrderedDict[str, BaseException]" = collections.OrderedDict()
_lock = threading.Lock()
_counter = itertools.count()


class RelayedError(RuntimeError):
    """Raised inside a host callback in place of the rule's own exception (kept under the token)."""


def relay(exc: BaseException) -> RelayedError:
    """Store ``exc`` and return the exception to raise inside the callback instead."""
    token = str(next(_counter))
    with _lock:
        _store[token] = exc
        while len(_store) > _KEEP:
            _store.popitem(last=False)
    return RelayedError(f"[gradguard-relay:{token}] {type(exc).__name__}: {exc}")


def recover(exc: BaseException) -> BaseException | None:
    """The original exception behind a JAX runtime error, if a callback relayed one."""
    match = _TOKEN.search(str(exc))
    if match is None:
        return None
    with _lock:
        return _store.pop(match.group(1), None)


def raise_original(exc: BaseException) -> NoReturn:
    """Raise the rule's own exception where ``exc`` relays one (XLA's runtime error around a callback's
    `RelayedError`, or that error itself where NumPy ran the callback), else ``exc`` itself."""
    original = recover(exc)
    if original is None:
        raise exc
    raise original from None


@contextlib.contextmanager
def relaying() -> Iterator[None]:
    """Re-raise errors from host callbacks as the exception the rule itself raised."""
    import jax

    try:
        yield
    except jax.errors.JaxRuntimeError as exc:
        raise_original(exc)


_quiet = [0]  # how many `callbacks_quiet` blocks are open


@contextlib.contextmanager
def callbacks_quiet() -> Iterator[None]:
    """Within this block JAX does not log what a rule's own host callback raised ("jax.pure_callback failed"
    and its traceback, once per call): the checker runs the rule on adversarial inputs and judges what it
    raised (the exception reaches the check as JAX's runtime error), and dozens of tracebacks on stderr would
    bury the report. Outside it, a user's own program keeps JAX's log."""
    _quiet[0] += 1
    try:
        yield
    finally:
        _quiet[0] -= 1


class _DropRelayed(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if _quiet[0] > 0:
            return False
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, RelayedError)


def install_log_filter() -> None:
    """Silence JAX's "pure_callback failed" log for errors we relay (they reach the caller anyway), and for any
    callback error inside `callbacks_quiet`."""
    logger = logging.getLogger("jax._src.callback")
    if not any(isinstance(f, _DropRelayed) for f in logger.filters):
        logger.addFilter(_DropRelayed())

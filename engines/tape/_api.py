"""Entry points: `primitive` (a user rule becomes a tape operation), `grad`, `value_and_grad`, `vjp`, `run_backward`.

Each argument slot is its own variable: the gradient for a slot is
d out / d slot with the other slots held fixed, as in a functional AD. The
same array passed in two slots gets one gradient per slot (their sum is the
derivative along the shared array); a view built inside the program (``x.T``)
is an ordinary operation, so its contribution flows back to ``x``.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from gradguard.engines.errors import TraceError
from gradguard.engines.tape._tape import POLICIES, Tape, Tracked, backward, bind, differentiable
from gradguard.engines.tape._watch import MutationDiagnosis, MutationWarning

__all__ = ["primitive", "grad", "value_and_grad", "vjp", "run_backward", "TapeResult"]


def primitive(rrule: Callable[..., Any], *, name: str, nondiff: Sequence[int] = ()) -> Callable[..., Any]:
    """Make ``rrule`` a tape operation called ``name``.

    ``rrule(*raw_args)`` returns ``(output, pullback)``; ``pullback(ybar)``
    returns one tangent per argument (None = zero). Inside a traced program
    the returned callable passes the RAW arrays to ``rrule`` (the very objects,
    so a mutating rule mutates the caller's array) and records the pullback;
    with no Tracked argument it returns ``rrule(*args)[0]``. Arguments at the
    ``nondiff`` positions never receive a gradient.
    """
    if not callable(rrule):
        raise TypeError(f"Got rrule={rrule!r}, but rrule must be a callable returning (output, pullback).")
    if not isinstance(name, str) or not name:
        raise TypeError(f"Got name={name!r}, but name must be a non-empty string (it names the step in reports).")
    nondiff = tuple(nondiff)
    if not all(isinstance(i, int) and i >= 0 for i in nondiff):
        raise TypeError(f"Got nondiff={nondiff!r}, but nondiff must be a tuple of argument positions, e.g. (1,).")

    @functools.wraps(rrule)
    def call(*args: Any) -> Any:
        return bind(name, rrule, args, nondiff=nondiff)

    call.__name__ = name
    return call


@dataclass
class TapeResult:
    """What one forward and backward pass produced.

    ``grads`` has one entry per argument: None where the argument is not
    differentiable or not in ``wrt``, zeros where it does not affect the
    output. ``steps`` names the recorded operations in call order;
    ``unused_nodes`` those whose output received no cotangent.
    """

    value: Any
    grads: tuple
    diagnoses: list[MutationDiagnosis] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    unused_nodes: list[str] = field(default_factory=list)


class _Trace:
    """One forward pass of ``fun`` on the tape; `backward` may be called several times."""

    def __init__(self, fun: Callable[..., Any], args: Sequence[Any], wrt: Sequence[int], watch: bool) -> None:
        if any(isinstance(a, Tracked) for a in args):
            raise TraceError("an argument is already Tracked: nested differentiation (grad of grad) is not "
                             "supported by the tape. Use the JAX engine for higher-order derivatives.")
        self.args = tuple(args)
        self.tape = tape = Tape(watch)
        self.leaves = tuple(tape.track(a) if i in wrt and differentiable(a) else None for i, a in enumerate(args))
        tape.active = True
        try:
            self.out = fun(*(t if t is not None else a for t, a in zip(self.leaves, args)))
        finally:
            tape.active = False
        if tape.watcher:
            tape.watcher.end_forward()
        self.value = _unwrap(self.out)

    @property
    def steps(self) -> list[str]:
        return [n.name for n in self.tape.nodes]

    def backward(self, cotangent: Any, unused: str) -> tuple[tuple, list[str], list[MutationDiagnosis]]:
        outs = self.out if isinstance(self.out, (tuple, list)) else (self.out,)
        cts = cotangent if isinstance(self.out, (tuple, list)) else (cotangent,)
        if not isinstance(cts, (tuple, list)) or len(cts) != len(outs):
            raise ValueError(f"Got a cotangent {cotangent!r:.80} for an output that is a tuple of {len(outs)}; "
                             "pass a tuple with one cotangent per output (None for no cotangent).")
        for i, (o, c) in enumerate(zip(outs, cts)):
            if c is not None and np.shape(c) != np.shape(_unwrap(o)):
                raise ValueError(f"Got a cotangent of shape {np.shape(c)} for output {i}, whose shape is "
                                 f"{np.shape(_unwrap(o))}; a cotangent must be shaped like its output.")
        ct, unused_nodes, diagnoses = backward(self.tape, list(zip(outs, cts)), unused)
        grads = tuple(None if t is None else ct.get(t.slot, _zeros(a)) for t, a in zip(self.leaves, self.args))
        return grads, unused_nodes, diagnoses


def _unwrap(out: Any) -> Any:
    if isinstance(out, (tuple, list)):
        items = [_unwrap(o) for o in out]
        return type(out)(*items) if hasattr(type(out), "_fields") else type(out)(items)
    return out.value if isinstance(out, Tracked) else out


def _zeros(a: Any) -> Any:
    return np.zeros_like(a) if isinstance(a, np.ndarray) else type(a)(0)


def _check_policy(unused: str) -> None:
    if unused not in POLICIES:
        raise ValueError(f"Got unused={unused!r}, but unused must be one of {POLICIES}: 'zero' calls an unused "
                         "output's pullback with zeros, 'none' with None, 'skip' does not call it.")


def _warn(diagnoses: list[MutationDiagnosis]) -> None:
    for d in diagnoses:
        warnings.warn(d.message, MutationWarning, stacklevel=3)


def run_backward(fun: Callable[..., Any], args: Sequence[Any], cotangent: Any, *, wrt: Sequence[int] | int | None = None,
                 unused: str = "zero", watch: bool = False) -> TapeResult:
    """Trace ``fun(*args)``, pull ``cotangent`` back through it, and report what happened.

    ``wrt`` picks the argument positions to differentiate (default: every
    float or complex argument). For a tuple output pass a tuple of
    cotangents. ``unused`` is the policy for outputs that receive no
    cotangent ("zero", the default; "none"; "skip"); with ``watch=True``,
    mutated captures are reported in ``.diagnoses`` instead of being silent.
    """
    _check_policy(unused)
    args = tuple(args)
    wrt = range(len(args)) if wrt is None else (wrt,) if isinstance(wrt, int) else tuple(wrt)
    if any(not isinstance(i, int) or not 0 <= i < len(args) for i in wrt):
        raise ValueError(f"Got wrt={tuple(wrt)!r}, but wrt must hold argument positions 0..{len(args) - 1}.")
    trace = _Trace(fun, args, wrt, watch)
    grads, unused_nodes, diagnoses = trace.backward(cotangent, unused)
    return TapeResult(trace.value, grads, diagnoses, trace.steps, unused_nodes)


def value_and_grad(fun: Callable[..., Any], *args: Any, argnums: int | tuple[int, ...] = 0, unused: str = "zero",
                   watch: bool = False) -> tuple[Any, Any]:
    """``(fun(*args), grad)`` for a ``fun`` that returns a real scalar; see `grad`."""
    _check_policy(unused)
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for i in nums:
        if not isinstance(i, int) or not -len(args) <= i < len(args):
            raise ValueError(f"Got argnums={argnums!r}, but fun is called with {len(args)} argument(s).")
        if not differentiable(args[i]):
            raise TypeError(f"Got argnums={argnums!r}, but argument {i} is {args[i]!r:.60} ({type(args[i]).__name__}); "
                            "only float or complex arrays and scalars can be differentiated.")
    nums = tuple(i % len(args) for i in nums)
    trace = _Trace(fun, args, nums, watch)
    value = trace.value
    if np.ndim(value) != 0 or np.iscomplexobj(value) or not isinstance(value, (int, float, np.number, np.ndarray)):
        raise TypeError(f"grad needs fun to return a real scalar, but it returned {value!r:.80}. Reduce it "
                        "(e.g. tnp.sum), or use vjp / run_backward with a cotangent.")
    grads, _, diagnoses = trace.backward(np.ones_like(value)[()], unused)
    _warn(diagnoses)
    picked = tuple(grads[i] for i in nums)
    return value, picked[0] if isinstance(argnums, int) else picked


def grad(fun: Callable[..., Any], *args: Any, argnums: int | tuple[int, ...] = 0, unused: str = "zero",
         watch: bool = False) -> Any:
    """The gradient of the real scalar ``fun(*args)`` with respect to ``args[argnums]`` (a tuple for a tuple).

    ``unused`` is the policy for outputs no cotangent reaches (default
    "zero"); ``watch=True`` issues a `MutationWarning` for each mutated capture.
    """
    return value_and_grad(fun, *args, argnums=argnums, unused=unused, watch=watch)[1]


def vjp(fun: Callable[..., Any], *args: Any, unused: str = "zero", watch: bool = False) -> tuple[Any, Callable]:
    """``(fun(*args), vjp_fn)``; ``vjp_fn(ybar)`` returns one tangent per argument (None for non-float ones).

    ``vjp_fn`` may be called several times; with ``watch=True`` its latest
    diagnoses are in ``vjp_fn.diagnoses`` (and issued as warnings).
    """
    _check_policy(unused)
    trace = _Trace(fun, args, range(len(args)), watch)

    def vjp_fn(ybar: Any) -> tuple:
        grads, _, diagnoses = trace.backward(ybar, unused)
        vjp_fn.diagnoses = diagnoses
        _warn(diagnoses)
        return grads

    vjp_fn.diagnoses = []
    return trace.value, vjp_fn

"""Second order of a NumPy rule: its rrule and its pullback run on Tracked arrays, and the tape differentiates
``<w, pullback(ybar)>`` with respect to the arguments and to the cotangent.

    d = pullback_derivative(sin_rrule, (x,), ybar, (w,))
    d.wrt_args[0]      # d/dx <w, pullback at x (ybar)>: a Hessian-vector product for a gradient rule
    d.wrt_cotangent    # d/dybar <w, pullback(ybar)>: J w for a linear pullback

The rule is ordinary NumPy: NumPy calls on Tracked values route to the tape's rules through
``__array_ufunc__`` / ``__array_function__``. A NumPy function without a rule raises `TraceError` (the
caller skips the second order with that reason). Reading a Tracked value as a plain one (``np.asarray``,
``np.array``, ``float()``, writing it into a plain buffer) does not raise here: it returns the raw value,
detached from the trace, and is recorded in ``escapes`` with the user's line, because that is exactly how
a residual gets cut off from the input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from gradguard.engines.errors import EngineError
from gradguard.engines.tape._rules import unbroadcast
from gradguard.engines.tape._tape import Escape, Tape, Tracked, backward, bind, differentiable, shape_only

__all__ = ["PullbackDerivative", "pullback_derivative"]


@dataclass
class PullbackDerivative:
    """The tape's derivative of ``<w, pullback(ybar)>``.

    ``wrt_args`` has one entry per argument (None where it was not differentiated), ``wrt_cotangent`` the
    leaves of ``ybar`` in order (None for a leaf that is not a float array). ``output_traced`` says whether
    the rrule's output depends on a traced argument at all (False: the rrule converted its input to a plain
    array first, and nothing it computed is traced); ``untraced_tangents`` the argument positions whose
    tangent came back as a plain value, not a traced one. ``escapes`` lists each Tracked value read as a plain
    one; ``argument_slots`` and ``cotangent_slots`` name the tape slots of the leaves, so a caller can tell
    a converted input from a converted intermediate. ``diverged`` (given the plain run's output and tangents as
    ``plain``): where the traced run computed other values than the plain one, e.g. ``"output 0: inf where the
    plain call gives 3.0"``; '' where it did not (or nothing was given to compare).
    """

    wrt_args: tuple[Any, ...]
    wrt_cotangent: list[Any]
    output_traced: bool
    untraced_tangents: tuple[int, ...] = ()
    escapes: list[Escape] = field(default_factory=list)
    argument_slots: dict[int, int] = field(default_factory=dict)
    cotangent_slots: dict[int, int] = field(default_factory=dict)
    diverged: str = ""


def pullback_derivative(rrule: Callable[..., Any], args: Sequence[Any], ybar_leaves: Sequence[Any],
                        covector: Sequence[Any], *, diff: Sequence[int],
                        rebuild: Callable[[list[Any]], Any] | None = None,
                        plain: tuple[Any, Sequence[Any]] | None = None) -> PullbackDerivative:
    """Trace ``rrule(*args)`` and ``pullback(ybar)`` on one tape and differentiate ``<covector, tangents>``.

    ``diff`` lists the argument positions to trace; ``ybar_leaves`` are the cotangent's leaves and
    ``rebuild(leaves)`` puts them back into the output's structure (default: the single leaf). Real
    arguments only: the objective is the real inner product of real arrays. ``plain``: the rule's output and
    tangents from a plain run at the same input and cotangent, compared with the traced run's (``diverged``).
    """
    args = tuple(args)
    tape = Tape()
    tape.escapes = []
    targs = tuple(tape.track(a) if i in diff and differentiable(a) else a for i, a in enumerate(args))
    tybar = [tape.track(c) if differentiable(c) else c for c in ybar_leaves]
    build = rebuild or (lambda leaves: leaves[0])
    tape.active = True
    try:
        tape.phase = "forward"
        result = rrule(*targs)
        if not (isinstance(result, tuple) and len(result) == 2 and callable(result[1])):
            raise EngineError("the rrule does not return an (output, pullback) pair")
        y, pullback = result
        tape.phase = "pullback"
        tangents = pullback(build(list(tybar)))
        if not isinstance(tangents, (tuple, list)) or len(tangents) != len(args):
            raise EngineError("the pullback does not return one tangent per argument")
        total: Any = 0.0
        for tangent, w in zip(tangents, covector):
            if tangent is not None and w is not None:
                total = total + _inner(tangent, w)
        tangent = None
    finally:
        tape.active = False
    escapes = list(tape.escapes)
    traced = any(isinstance(leaf, Tracked) for leaf in _leaves(y))
    untraced = tuple(i for i in diff if i < len(tangents) and tangents[i] is not None
                     and not isinstance(tangents[i], Tracked))
    diverged = "" if plain is None else _diverged(plain, y, tangents, diff)
    del result, y, pullback, tangents  # what the sweep does not read: the output above all (its node is unused)
    leaves = [t.slot for t in (*targs, *tybar) if isinstance(t, Tracked)]
    ct = (backward(tape, [(total, np.float64(1.0))], "skip", keep=leaves, consume=True)[0]
          if isinstance(total, Tracked) else {})
    # Tracked values refer to the tape and its nodes to their Tracked outputs: a cycle that would keep every
    # intermediate of the trace alive until the garbage collector ran. The trace is done with here.
    tape.nodes.clear()
    wrt_args = tuple(_grad(ct, t, a) for t, a in zip(targs, args))
    wrt_ybar = [_grad(ct, t, c) for t, c in zip(tybar, ybar_leaves)]
    return PullbackDerivative(
        wrt_args, wrt_ybar, traced, untraced, escapes,
        {i: t.slot for i, t in enumerate(targs) if isinstance(t, Tracked)},
        {i: t.slot for i, t in enumerate(tybar) if isinstance(t, Tracked)},
        diverged,
    )


def _diverged(plain: tuple[Any, Sequence[Any]], y: Any, tangents: Sequence[Any], diff: Sequence[int]) -> str:
    """Where the traced run's output or tangents differ from the plain run's (``plain``: output, tangents), in words;
    '' where they agree to rounding (a millionth of the values). The tape runs NumPy's own functions on the raw
    values, so a difference beyond rounding is another path through the rule: hdmm's loss catches the tape's
    TraceError in a bare ``except`` and returns inf and a zero gradient, where the plain call gives 3.0 and the
    gradient."""
    plain_y, plain_t = plain
    pairs = [(f"output {k}", p, t) for k, (p, t) in enumerate(zip(_leaves(plain_y), _leaves(y)))]
    pairs += [(f"the tangent for argument {i}", p, t) for i in diff if i < len(tangents) and i < len(plain_t)
              for p, t in zip(_leaves(plain_t[i]), _leaves(tangents[i]))]
    for what, p, t in pairs:
        t = t.value if isinstance(t, Tracked) else t
        if p is None or t is None:
            if (p is None) != (t is None):
                traced, plain_one = ("None", "a value") if t is None else ("a value", "None")
                return f"{what}: {traced} where the plain call gives {plain_one}"
            continue
        try:
            a, b = np.asarray(p), np.asarray(t)
            if a.shape != b.shape:
                return f"{what}: shape {b.shape} where the plain call gives {a.shape}"
            if a.dtype.kind not in "fc" or b.dtype.kind not in "fc":
                continue
            with np.errstate(all="ignore"):
                # rounding apart at most (a tape rule that computes as NumPy does but in another order, then a
                # cancellation): a path of its own differs by far more
                finite = np.abs(a[np.isfinite(a)])
                apart = ~np.isclose(b, a, rtol=1e-6, atol=1e-6 * float(finite.max()) if finite.size else 0.0,
                                    equal_nan=True)
        except (TypeError, ValueError):
            continue
        if np.any(apart):
            k = int(np.flatnonzero(apart)[0])
            at = "" if a.ndim == 0 else f" at [{', '.join(map(str, np.unravel_index(k, a.shape)))}]"
            return f"{what}{at}: {b.reshape(-1)[k].item()!r} where the plain call gives {a.reshape(-1)[k].item()!r}"
    return ""


def _inner(t: Any, w: Any) -> Any:
    """``sum(t * w)`` for a tangent ``t`` (traced or not) and a plain covector ``w``, as one node whose pullback
    reads ``w`` only: ``tnp.sum(t * w)`` would keep ``t`` and the product for the sweep (two copies of the
    argument, on large inputs) and compute the product's unused tangent for ``w``."""

    def rrule(t_raw: Any, w_raw: Any) -> tuple:
        like, both = shape_only(t_raw), np.broadcast_shapes(np.shape(t_raw), np.shape(w_raw))

        def pullback(g: Any) -> tuple:
            gw = g * w_raw
            if np.shape(gw) != both:
                gw = np.broadcast_to(gw, both).copy()
            return unbroadcast(gw, like), None

        return np.sum(t_raw * w_raw), pullback

    return bind("inner product with the covector", rrule, (t, w), nondiff=(1,), builtin=True)


def _grad(ct: dict[int, Any], tracked: Any, value: Any) -> Any:
    if not isinstance(tracked, Tracked):
        return None
    g = ct.get(tracked.slot)
    if g is None:
        return np.zeros_like(value) if isinstance(value, np.ndarray) else type(value)(0)
    return np.real(g) if not np.iscomplexobj(value) else g


def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in _leaves(item)]
    return [tree]

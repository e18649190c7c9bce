"""The tape: tracked values, one node per primitive call, and the reverse sweep.

A `Tracked` wraps a raw value BY REFERENCE (the very ndarray the user passed
or a rule returned) and remembers its slot on the tape. `bind` calls a rule's
``rrule`` on the raw values, appends a `Node` holding the pullback, and wraps
the outputs. `backward` walks the nodes in reverse, as Zygote does:

* pullbacks read whatever their captured arrays hold *now*, so an in-place
  mutation between the forward and the backward pass gives a silently wrong
  gradient (that is the point: gradguard reproduces the hazard);
* a node whose output receives no cotangent from the result ("unused"),
  directly or because it only feeds unused nodes, follows the policy:
  ``"zero"`` (default) calls its pullback with zeros shaped like the output,
  ``"none"`` calls it with None, ``"skip"`` does not call it. Whatever an
  unused node's pullback returns still flows upstream, as in a real AD.
  Components of a tuple output that receive nothing get zeros (None under
  "none") even when the node is used.

Tangents for a real input are made real (ChainRules' ProjectTo), and a
tangent shaped unlike its argument raises `EngineError` naming the rule.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from gradguard.engines.values import differentiable

from gradguard.engines.errors import EngineError, TraceError
from gradguard.engines.tape._watch import MutationDiagnosis, Watcher, closure_arrays

__all__ = ["Tracked", "Tape", "Node", "Escape", "bind", "backward", "differentiable", "shape_only", "POLICIES"]

POLICIES = ("zero", "none", "skip")


class Tape:
    """The record of one traced call: nodes in call order, and an optional watcher."""

    def __init__(self, watch: bool = False) -> None:
        self.nodes: list[Node] = []
        self.active = False
        self.watcher = Watcher() if watch else None
        # None: converting a Tracked value to a plain one raises. A list (second order, see `_second`):
        # the conversion returns the raw value, detached from the trace, and is recorded here.
        self.escapes: list[Escape] | None = None
        self.phase = ""
        self._slots = itertools.count()
        # Whether nodes hold the values their pullbacks do not read by shape only (`shape_only`): from the
        # first array of SHAPE_ONLY_FROM_BYTES or more the trace tracks; a trace of small arrays never pays
        # for the stand-ins.
        self.lean = False

    def track(self, value: Any) -> "Tracked":
        if not self.lean and type(value) is np.ndarray and value.nbytes >= SHAPE_ONLY_FROM_BYTES:
            self.lean = True
        return Tracked(value, self, next(self._slots))


@dataclass(frozen=True)
class Escape:
    """A Tracked value read as a plain one (np.asarray, float(), a plain output buffer): detached from the trace."""

    slot: int
    how: str  # "np.asarray/np.array" or "float()", ...
    site: str  # "file.py:12" of the user's code that did it, or "" when no frame outside NumPy is found
    phase: str = ""  # what the trace was running: the caller's label (e.g. "forward", "pullback")


def _user_site() -> str:
    """``file.py:line`` of the innermost frame outside the tape and NumPy."""
    import os
    import traceback

    skip = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(np.__file__))
    for frame in reversed(traceback.extract_stack()):
        if not frame.filename.startswith(skip):
            return f"{os.path.basename(frame.filename)}:{frame.lineno}"
    return ""


@dataclass(eq=False)
class Node:
    """One primitive call: its pullback, its Tracked inputs (None = no gradient) and outputs.

    In a lean trace (`Tape.lean`), ``inputs`` and ``outputs`` carry the slots of the call's Tracked values and
    only the shapes and dtypes of their large arrays (`shape_only`): what the pullback reads, its closure holds."""

    name: str
    step: int
    pullback: Callable[[Any], Any]
    inputs: tuple["Tracked | None", ...]
    outputs: tuple[Any, ...]
    is_tuple: bool
    builtin: bool
    structure: Any = None  # the output's tuple structure (its leaves are ``outputs``), None for one array


class Tracked:
    """A value being differentiated: ``.value`` is the raw array itself, not a copy.

    Operators, methods and NumPy calls route to the tape's rules (see `tnp`);
    a NumPy function without a rule raises `TraceError` rather than silently
    dropping the gradient.
    """

    __slots__ = ("value", "tape", "slot")
    __array_priority__ = 100.0

    def __init__(self, value: Any, tape: Tape, slot: int) -> None:
        self.value, self.tape, self.slot = value, tape, slot

    shape = property(lambda self: np.shape(self.value))
    ndim = property(lambda self: np.ndim(self.value))
    size = property(lambda self: np.size(self.value))
    dtype = property(lambda self: np.result_type(self.value))

    def __repr__(self) -> str:
        return f"Tracked({self.value!r})"

    def __len__(self) -> int:
        return len(self.value)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __bool__(self) -> bool:
        return bool(self.value)

    def _escape(self, how: str) -> bool:
        """Whether this trace lets the raw value out (recorded), rather than raising."""
        if self.tape.escapes is None:
            return False
        self.tape.escapes.append(Escape(self.slot, how, _user_site(), self.tape.phase))
        return True

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if self._escape("np.asarray/np.array"):
            return np.asarray(self.value, dtype=dtype)
        raise TraceError(
            "converting a Tracked value to a plain array (np.asarray, np.array or a NumPy function without a rule) "
            "would silently drop its gradient. Use tnp operations on it, or register the computation as a "
            "primitive with engines.tape.primitive(rrule, name=...)."
        )

    def _no_scalar(self, kind: str) -> Any:
        if self._escape(f"{kind}()"):
            return {"float": float, "complex": complex, "int": int}[kind](self.value)
        raise TraceError(
            f"{kind}() of a Tracked value would silently drop its gradient; keep it an array "
            "(e.g. tnp.sum(x) instead of float(x)), or use x.value outside the differentiated path."
        )

    __float__ = lambda self: self._no_scalar("float")  # noqa: E731
    __complex__ = lambda self: self._no_scalar("complex")  # noqa: E731
    __int__ = lambda self: self._no_scalar("int")  # noqa: E731

    def __setitem__(self, index: Any, value: Any) -> None:
        raise TraceError(
            "item assignment into a Tracked array (x[...] = v) is not supported by the tape. Build the result "
            "with tnp.where or tnp.concatenate, or do the assignment inside a registered primitive."
        )


# Arrays from this size up are held by shape only where nothing reads their values (`shape_only`). Smaller
# ones are held as they are: they cost no memory worth saving, and making a stand-in for every argument of
# every operation made a trace of small arrays (the safety matrix's programs) twice as slow.
SHAPE_ONLY_FROM_BYTES = 64 * 1024


def shape_only(value: Any) -> Any:
    """What a node keeps of an array its pullback does not read: a read-only, zero-stride array of the same
    shape and dtype (one element of memory), enough for ``np.shape``, ``np.size``, ``np.result_type`` and
    ``np.zeros_like``. Anything but a plain ndarray of ``SHAPE_ONLY_FROM_BYTES`` or more is returned as it is."""
    if not large(value):
        return value
    return np.broadcast_to(np.zeros((), value.dtype), value.shape)


def _port(value: Any) -> Any:
    """A node's handle on a Tracked input or output: the same slot, its value's shape and dtype only. The
    sweep reads nothing else of them (slots, shapes, dtypes), and the user's own Tracked objects, which hold
    the values, then live no longer than the user's code holds them: holding the values on every node kept
    every intermediate of a trace alive until its sweep ended. Small values are kept (see `shape_only`)."""
    if not isinstance(value, Tracked) or not large(value.value):
        return value
    return Tracked(shape_only(value.value), value.tape, value.slot)


def large(value: Any) -> bool:
    """Whether ``value`` is an ndarray worth holding by shape only (`SHAPE_ONLY_FROM_BYTES`)."""
    return type(value) is np.ndarray and value.nbytes >= SHAPE_ONLY_FROM_BYTES


def bind(name: str, rrule: Callable[..., Any], args: Sequence[Any], *, nondiff: Sequence[int] = (),
         captures: Callable[[tuple, Any, Any], list] | None = None, builtin: bool = False) -> Any:
    """Call ``rrule`` on the raw values of ``args``, record a node, and return Tracked output(s).

    With no Tracked argument this is just ``rrule(*args)[0]``. ``captures``
    lists the arrays the pullback reads, for watch mode (default: the arrays in
    the pullback's closure).
    """
    tracked = [a for a in args if isinstance(a, Tracked)]
    if not tracked:
        return rrule(*args)[0]
    tape = tracked[0].tape
    if not tape.active:
        raise TraceError(f"`{name}` got a Tracked value whose trace has finished; Tracked values must not escape "
                         "the differentiated function. Return them instead of storing them.")
    if any(a.tape is not tape for a in tracked):
        raise TraceError(f"`{name}` mixes Tracked values from two traces; nested differentiation is not supported "
                         "by the tape (use the JAX engine for grad-of-grad).")
    raw = tuple(a.value if isinstance(a, Tracked) else a for a in args)
    step = len(tape.nodes)
    if tape.watcher:
        tape.watcher.before_step(step)
    result = rrule(*raw)
    if not (isinstance(result, tuple) and len(result) == 2 and callable(result[1])):
        raise EngineError(f"the rrule of `{name}` must return a pair (output, pullback), but returned "
                          f"{type(result).__name__} {result!r:.80}. Return `y, pullback`.")
    out, pullback = result
    outs = _flat(out)  # nested tuples, NamedTuples (slogdet, eigh, svd) and dicts are flattened to their leaves
    wrapped = tuple(tape.track(o) if differentiable(o) else o for o in outs)
    inputs = tuple(a if isinstance(a, Tracked) and i not in nondiff else None for i, a in enumerate(args))
    ports = wrapped
    if tape.lean:
        inputs, ports = tuple(_port(a) for a in inputs), tuple(_port(w) for w in wrapped)
    structure = out if isinstance(out, (tuple, list, dict)) else None
    tape.nodes.append(Node(name, step, pullback, inputs, ports, structure is not None, builtin, structure))
    if tape.watcher:
        tape.watcher.after_step(name, step, raw)
        held = captures(raw, out, pullback) if captures else closure_arrays(pullback, raw)
        tape.watcher.capture(name, step, held)
    return _unflat(structure, list(wrapped)) if structure is not None else wrapped[0]


def _keys(tree: dict) -> list[Any]:
    """A dict's keys in the order its leaves are flattened: sorted, as JAX does."""
    try:
        return sorted(tree)
    except TypeError:
        return list(tree)


def _flat(tree: Any) -> list[Any]:
    if isinstance(tree, dict):
        return [leaf for key in _keys(tree) for leaf in _flat(tree[key])]
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in _flat(item)]
    return [tree]


def _unflat(structure: Any, flat: list[Any]) -> Any:
    """``structure``'s tuples, lists, NamedTuples and dicts holding the leaves ``flat`` (consumed in order)."""
    if isinstance(structure, dict):
        by_key = {key: _unflat(structure[key], flat) for key in _keys(structure)}
        return {key: by_key[key] for key in structure}
    if not isinstance(structure, (tuple, list)):
        return flat.pop(0)
    items = [_unflat(s, flat) for s in structure]
    return type(structure)(*items) if hasattr(type(structure), "_fields") else type(structure)(items)


def _cotangent(output: Any, ct: dict[int, Any], policy: str) -> Any:
    """What reached ``output``; if nothing did, zeros shaped like it (None under the "none" policy)."""
    if not isinstance(output, Tracked):
        return None  # a non-differentiable output (an int, a bool array)
    if output.slot in ct:
        return ct[output.slot]
    if policy == "none":
        return None
    zero = np.zeros_like(output.value)
    return zero if isinstance(output.value, np.ndarray) else zero[()]


def _project(tangent: Any, primal: Any) -> Any:
    """A real input's tangent is real (ChainRules' ProjectTo): drop an imaginary part."""
    return np.real(tangent) if np.iscomplexobj(tangent) and not np.iscomplexobj(primal) else tangent


def backward(tape: Tape, seeds: Sequence[tuple[Any, Any]], policy: str,
             keep: Sequence[int] | None = None, consume: bool = False) -> tuple[dict[int, Any], list[str], list[MutationDiagnosis]]:
    """Run the pullbacks in reverse order from ``seeds`` (pairs of Tracked output and cotangent).

    Returns (cotangent per slot, names of the unused nodes in call order, mutation diagnoses). With ``keep``
    (the slots the caller reads, usually its inputs'), the cotangent of any other slot is dropped once the
    pullback of the node that produced it has run: it is complete then, and on large arrays the
    intermediates' cotangents are most of the sweep's memory. With ``consume``, each node leaves the tape
    once its pullback has run, and with it the values that pullback held (a sweep that cannot be repeated).
    """
    kept = None if keep is None else set(keep)
    ct: dict[int, Any] = {}
    live: set[int] = set()
    unused: list[str] = []
    diagnoses: list[MutationDiagnosis] = []
    for t, c in seeds:
        if isinstance(t, Tracked) and c is not None:
            ct[t.slot] = ct[t.slot] + c if t.slot in ct else c
            live.add(t.slot)
    if consume and policy == "skip" and not tape.watcher:
        unused = _prune(tape, set(live))  # their pullbacks would not run: let go of what they hold before the sweep
    for node in _reversed_nodes(tape, consume):
        used = any(isinstance(o, Tracked) and o.slot in live for o in node.outputs)
        if not used:
            unused.append(node.name)
            if policy == "skip":
                continue
        cts = tuple(_cotangent(o, ct, policy) for o in node.outputs)
        if node.builtin and all(c is None for c in cts):
            continue  # built-in pullbacks are linear: a None (zero) cotangent contributes nothing
        if tape.watcher:
            diagnoses += tape.watcher.check(node.step)
        with np.errstate(all="ignore") if node.builtin else contextlib.nullcontext():  # e.g. log(x) for d(x**y)/dy
            tangents = node.pullback(_unflat(node.structure, list(cts)) if node.is_tuple else cts[0])
        if tape.watcher:
            tape.watcher.after_pullback(node.name, node.step)
        _check_tangents(node, tangents)
        for i, (a, t) in enumerate(zip(node.inputs, tangents)):
            if a is None or t is None:
                continue
            if np.shape(t) != np.shape(a.value):
                raise EngineError(f"the pullback of `{node.name}` returned a tangent of shape {np.shape(t)} for "
                                  f"argument {i}, whose shape is {np.shape(a.value)}. Return tangents shaped like "
                                  "their arguments.")
            t = _project(t, a.value)
            ct[a.slot] = ct[a.slot] + t if a.slot in ct else t
            if used:
                live.add(a.slot)
        if kept is not None:
            for o in node.outputs:
                if isinstance(o, Tracked) and o.slot not in kept:
                    ct.pop(o.slot, None)
    unused.reverse()
    return ct, unused, diagnoses


def _prune(tape: Tape, live: set[int]) -> list[str]:
    """Take off the tape the nodes no seed depends on, and return their names, last first (as the sweep
    lists them). Under the "skip" policy their pullbacks never run; a consumed sweep would still hold them,
    and the values their pullbacks read (a rule's output, say, in a derivative of its pullback), until it
    reached them."""
    kept: list[Node] = []
    dropped: list[str] = []
    for node in reversed(tape.nodes):
        if any(isinstance(o, Tracked) and o.slot in live for o in node.outputs):
            kept.append(node)
            live.update(a.slot for a in node.inputs if a is not None)
        else:
            dropped.append(node.name)
    kept.reverse()
    tape.nodes[:] = kept
    return dropped


def _reversed_nodes(tape: Tape, consume: bool) -> Any:
    """The tape's nodes, last first; with ``consume``, each taken off the tape as it is handed out."""
    if not consume:
        yield from reversed(tape.nodes)
        return
    while tape.nodes:
        yield tape.nodes.pop()


def _check_tangents(node: Node, tangents: Any) -> None:
    n = len(node.inputs)
    if not isinstance(tangents, (tuple, list)) or len(tangents) != n:
        got = f"{len(tangents)}" if isinstance(tangents, (tuple, list)) else f"a {type(tangents).__name__}"
        raise EngineError(f"the pullback of `{node.name}` must return one tangent per argument ({n}), but returned "
                          f"{got}. Return a tuple with one entry per argument; use None for non-differentiable ones.")

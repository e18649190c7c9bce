"""A traced JAX program (a closed jaxpr) run with NumPy, primitive by primitive, without XLA.

Eager JAX runs a program primitive by primitive and compiles each primitive once per shape and dtype:
tens of milliseconds a compilation, and a module of NumPy rules meets hundreds of (primitive, shape)
pairs, so eager JAX spends most of its time compiling programs that then run once. The safety
matrix's JAX column for a NumPy rule is such a program: a few `jax.numpy` operations around the rule's
host callbacks. What JAX decides there (which cotangent reaches the rule's pullback, zeros for an unused
output, accumulation over aliased uses) is decided when JAX traces and differentiates the program, and
the jaxpr records it; running the jaxpr's primitives needs no compiler. :func:`evaluate` runs them with
NumPy.

Only primitives whose NumPy meaning is exactly JAX's are known (`KNOWN`, each tested against eager JAX in
tests/engines/test_jax_numpy_eval.py); any other raises :class:`Unsupported` before anything of the
program has run, naming the primitive, and the caller runs the program with JAX instead. Every result is
checked against the shape the jaxpr says it has, and converted to its dtype. Host callbacks
(``pure_callback``) receive read-only, C-contiguous copies of their operands, as JAX hands them: a rule
that writes into its argument fails as it does under JAX, and one that reads its argument's memory
layout sees what it would see there. What a callback returns is copied, as JAX copies it into its own
buffers.

Values computed here round as NumPy rounds, which may differ from XLA's results by a few units in the last
place (XLA fuses and reorders). XLA on CPU computes with the processor's flush-to-zero and
denormals-are-zero modes: its arithmetic reads a subnormal number (below about 2.2e-308 in float64) as zero
and flushes one it would give to zero, while moving values (a reshape, a slice, a select) keeps them. The
arithmetic here does the same. A host callback runs on XLA's thread in those modes too, so the rule's own
NumPy code reads a subnormal argument as zero: its operands' subnormal numbers are zeros here. What is left
different is a subnormal number the rule's own arithmetic makes from normal ones (kept here, zero under
JAX): the processor's modes cannot be set from Python.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["evaluate", "Unsupported", "KNOWN", "primitives_of", "flushed_to_zero"]


class Unsupported(Exception):
    """The program holds a primitive :func:`evaluate` does not run, or one it ran gave a result of another
    shape than the jaxpr's (a gap in this module, never the user's error): run the program with JAX."""


# -- the primitives ------------------------------------------------------------------------------


def _div(a: Any, b: Any, **_: Any) -> Any:
    a, b = np.asarray(a), np.asarray(b)
    if np.result_type(a, b).kind in "iu":  # XLA rounds an integer quotient toward zero, NumPy toward -inf
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) ^ (b < 0), -q, q)
    return np.divide(a, b)


def _broadcast_in_dim(x: Any, shape: Sequence[int], broadcast_dimensions: Sequence[int], **_: Any) -> Any:
    x = np.asarray(x)
    dims = list(broadcast_dimensions)
    placed = np.reshape(x, [x.shape[dims.index(i)] if i in dims else 1 for i in range(len(shape))])
    return np.broadcast_to(placed, tuple(shape))


def _reshape(x: Any, new_sizes: Sequence[int], dimensions: Any = None, **_: Any) -> Any:
    if dimensions is not None:
        raise Unsupported("reshape with dimensions")
    return np.reshape(x, tuple(new_sizes))


def _slice(x: Any, start_indices: Sequence[int], limit_indices: Sequence[int], strides: Any = None, **_: Any) -> Any:
    strides = strides or (1,) * len(start_indices)
    return np.asarray(x)[tuple(slice(s, e, k) for s, e, k in zip(start_indices, limit_indices, strides))]


def _pad(x: Any, padding_value: Any, padding_config: Sequence[tuple[int, int, int]], **_: Any) -> Any:
    """lax.pad: ``lo`` and ``hi`` values before and after each dimension (negative: that many removed), and
    ``interior`` values between neighbouring elements."""
    x = np.asarray(x)
    inner = [n + max(n - 1, 0) * it for n, (_, _, it) in zip(x.shape, padding_config)]
    full = np.full([max(lo, 0) + m + max(hi, 0) for m, (lo, hi, _) in zip(inner, padding_config)],
                   padding_value, dtype=x.dtype)
    full[tuple(slice(max(lo, 0), max(lo, 0) + m, it + 1) for m, (lo, _, it) in zip(inner, padding_config))] = x
    return full[tuple(slice(-min(lo, 0), full.shape[d] + min(hi, 0)) for d, (lo, hi, _) in enumerate(padding_config))]


def _dot_general(x: Any, y: Any, dimension_numbers: Any, preferred_element_type: Any = None, **_: Any) -> Any:
    """lax.dot_general as one batched matmul: batch dimensions first, then x's free dimensions, then y's."""
    (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
    x, y = np.asarray(x), np.asarray(y)
    x_free = [i for i in range(x.ndim) if i not in x_batch and i not in x_contract]
    y_free = [j for j in range(y.ndim) if j not in y_batch and j not in y_contract]
    size = lambda a, dims: int(np.prod([a.shape[d] for d in dims], dtype=np.int64))  # noqa: E731
    b, f, k, g = size(x, x_batch), size(x, x_free), size(x, x_contract), size(y, y_free)
    dtype = preferred_element_type if preferred_element_type is not None else np.result_type(x, y)
    xt = np.transpose(x, [*x_batch, *x_free, *x_contract]).astype(dtype, copy=False).reshape(b, f, k)
    yt = np.transpose(y, [*y_batch, *y_contract, *y_free]).astype(dtype, copy=False).reshape(b, k, g)
    shape = [x.shape[d] for d in (*x_batch, *x_free)] + [y.shape[d] for d in y_free]
    return np.matmul(xt, yt).reshape(shape)


def _reduce(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda x, axes, **_: fn(np.asarray(x), axis=tuple(axes))


def _convert(x: Any, new_dtype: Any, **_: Any) -> Any:
    x = np.asarray(x)
    if x.dtype.kind == "c" and np.dtype(new_dtype).kind != "c":
        raise Unsupported("convert_element_type from complex to real")
    if x.dtype.kind == "f" and np.dtype(new_dtype).kind in "iub":
        raise Unsupported("convert_element_type from float to integer")  # XLA saturates, NumPy does not
    return x.astype(new_dtype)


def _select_n(which: Any, *cases: Any) -> Any:
    which = np.asarray(which)
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0]) if len(cases) == 2 else cases[0]
    return np.choose(which, cases)


def _integer_pow(x: Any, y: int, **_: Any) -> Any:
    """x ** y by squaring and multiplying, in the order JAX's lowering multiplies (the same roundings), each product
    flushed as XLA flushes it: x ** -2 at x = 1.4e-154 squares to a subnormal 2e-308, zero under XLA, so JAX gives
    inf where the unflushed product gave 4.9e307."""
    x = np.asarray(x)
    if y == 0:
        return np.ones_like(x)
    n, acc = abs(y), None
    while n > 0:
        if n & 1:
            acc = x if acc is None else _flushed(acc * x)
        n >>= 1
        if n > 0:
            x = _flushed(x * x)
    return np.ones_like(acc) / acc if y < 0 else acc


def _concatenate(*xs: Any, dimension: int, **_: Any) -> Any:
    return np.concatenate([np.asarray(x) for x in xs], axis=dimension)


def _iota(dtype: Any, shape: Sequence[int], dimension: int, **_: Any) -> Any:
    index = [1] * len(shape)
    index[dimension] = shape[dimension]
    return np.broadcast_to(np.arange(shape[dimension], dtype=dtype).reshape(index), tuple(shape))


def _cumulative(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(x: Any, axis: int, reverse: bool = False, **_: Any) -> Any:
        x = np.asarray(x)
        if reverse:
            return np.flip(fn(np.flip(x, axis), axis=axis), axis)
        return fn(x, axis=axis)

    return run


def _split(x: Any, sizes: Sequence[int], axis: int, **_: Any) -> list[Any]:
    return np.split(np.asarray(x), np.cumsum([int(n) for n in sizes])[:-1], axis=axis)


def _unary(fn: Callable[[Any], Any]) -> Callable[..., Any]:
    return lambda x, **_: fn(np.asarray(x))


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    return lambda a, b, **_: fn(np.asarray(a), np.asarray(b))


KNOWN: dict[str, Callable[..., Any]] = {
    "add": _binary(np.add),
    "add_any": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _div,
    "max": _binary(np.maximum),
    "min": _binary(np.minimum),
    "pow": _binary(np.power),
    "atan2": _binary(np.arctan2),
    "eq": _binary(np.equal),
    "ne": _binary(np.not_equal),
    "lt": _binary(np.less),
    "le": _binary(np.less_equal),
    "gt": _binary(np.greater),
    "ge": _binary(np.greater_equal),
    "and": _binary(np.bitwise_and),
    "or": _binary(np.bitwise_or),
    "neg": _unary(np.negative),
    "sign": _unary(np.sign),
    "abs": _unary(np.abs),
    "exp": _unary(np.exp),
    "exp2": _unary(np.exp2),
    "log": _unary(np.log),
    "log1p": _unary(np.log1p),
    "expm1": _unary(np.expm1),
    "sqrt": _unary(np.sqrt),
    "rsqrt": _unary(lambda x: 1 / np.sqrt(x)),
    "sin": _unary(np.sin),
    "cos": _unary(np.cos),
    "tan": _unary(np.tan),
    "asin": _unary(np.arcsin),
    "acos": _unary(np.arccos),
    "atan": _unary(np.arctan),
    "sinh": _unary(np.sinh),
    "cosh": _unary(np.cosh),
    "tanh": _unary(np.tanh),
    "asinh": _unary(np.arcsinh),
    "acosh": _unary(np.arccosh),
    "atanh": _unary(np.arctanh),
    "cumsum": _cumulative(np.cumsum),
    "cumprod": _cumulative(np.cumprod),
    "cummax": _cumulative(np.maximum.accumulate),
    "cummin": _cumulative(np.minimum.accumulate),
    "split": _split,
    "tile": lambda x, reps, **_: np.tile(np.asarray(x), tuple(reps)),
    "stop_gradient": _unary(np.copy),
    "logistic": _unary(lambda x: 1 / (1 + np.exp(-x))),
    "floor": _unary(np.floor),
    "ceil": _unary(np.ceil),
    "is_finite": _unary(np.isfinite),
    "not": _unary(lambda x: np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)),
    "square": _unary(np.square),
    "integer_pow": _integer_pow,
    "real": _unary(np.real),
    "imag": _unary(np.imag),
    "conj": _unary(np.conj),
    "complex": _binary(lambda a, b: a + 1j * b),
    "copy": _unary(np.copy),
    "convert_element_type": _convert,
    "select_n": _select_n,
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce(np.max),
    "reduce_min": _reduce(np.min),
    "reduce_prod": _reduce(np.prod),
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape,
    "squeeze": lambda x, dimensions, **_: np.squeeze(np.asarray(x), axis=tuple(dimensions)),
    "transpose": lambda x, permutation, **_: np.transpose(np.asarray(x), tuple(permutation)),
    "rev": lambda x, dimensions, **_: np.flip(np.asarray(x), axis=tuple(dimensions)),
    "concatenate": _concatenate,
    "pad": _pad,
    "slice": _slice,
    "dot_general": _dot_general,
    "iota": _iota,
}

# Primitives holding a jaxpr that is run in their place (their own parameters change nothing of the values).
_CALLS = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
          "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "remat": "jaxpr", "checkpoint": "jaxpr"}
_CALLBACK = "pure_callback"


def primitives_of(jaxpr: Any) -> set[str]:
    """The names of the primitives in ``jaxpr`` (a Jaxpr or ClosedJaxpr) and in the jaxprs its calls hold."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    found: set[str] = set()
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        found.add(name)
        if name in _CALLS:
            found |= primitives_of(_called(eqn))
    return found


def _called(eqn: Any) -> Any:
    key = _CALLS[eqn.primitive.name]
    inner = eqn.params.get(key)
    if inner is None:
        raise Unsupported(f"{eqn.primitive.name} without {key}")
    return inner


def _unsupported(jaxpr: Any) -> list[str]:
    return sorted(p for p in primitives_of(jaxpr) if p not in KNOWN and p not in _CALLS and p != _CALLBACK)


def evaluate(closed: Any, args: Sequence[Any]) -> list[Any]:
    """The outputs of the closed jaxpr ``closed`` on the flat ``args``, each a NumPy array (or scalar array).

    Raises :class:`Unsupported` before running anything if the program holds a primitive that is not in
    `KNOWN`. What a host callback raises propagates as it was raised."""
    plan = _plan_of(closed.jaxpr)
    with np.errstate(all="ignore"):
        return plan.run(closed.consts, args)


class _Step:
    """One equation, resolved once: what runs, on which slots, into which slots, with what flushing."""

    __slots__ = ("name", "kind", "fn", "params", "ins", "flush_in", "outs", "avals", "multiple", "inner", "clean_out")

    def __init__(self, **fields: Any) -> None:
        for key, value in fields.items():
            setattr(self, key, value)


_CALLBACK_STEP, _CALL_STEP, _MOVE_STEP, _ARITHMETIC_STEP = range(4)


class _Plan:
    """A jaxpr made ready to run many times: each variable a slot of a list, each literal made once (and its
    flushed twin, for arithmetic), and known once which operands may hold subnormal numbers.

    An arithmetic step's results are flushed here (as XLA flushes them), and a step that only moves such values
    keeps them clean: flushing a clean operand again would give the same array, so only the program's inputs,
    constants, callbacks' and calls' results (and what moves them) are tested when arithmetic reads them.
    A result cast to a narrower dtype than NumPy computed it in can gain subnormal numbers: it is marked
    unclean for the run (`dirty`) and tested where it is read."""

    def __init__(self, jaxpr: Any) -> None:
        missing = _unsupported(jaxpr)
        if missing:
            raise Unsupported(f"the program holds primitives run here only by JAX: {', '.join(missing)}")
        slot_of: dict[Any, int] = {}
        template: list[Any] = []
        clean: set[int] = set()  # slots statically known to hold no subnormal number

        def new_slot(value: Any = None) -> int:
            template.append(value)
            return len(template) - 1

        for var in (*jaxpr.constvars, *jaxpr.invars):
            slot_of[var] = new_slot()
        self.const_slots = [slot_of[v] for v in jaxpr.constvars]
        self.in_slots = [slot_of[v] for v in jaxpr.invars]
        literals: dict[int, tuple[int, int]] = {}  # id(literal) -> (raw slot, flushed slot)

        def literal(v: Any) -> tuple[int, int]:
            if id(v) not in literals:
                raw = np.asarray(v.val, dtype=v.aval.dtype)
                raw.flags.writeable = False
                flushed = _flushed(raw)
                if flushed is not raw:
                    flushed.flags.writeable = False
                raw_slot = new_slot(raw)
                flushed_slot = raw_slot if flushed is raw else new_slot(flushed)
                literals[id(v)] = (raw_slot, flushed_slot)
                clean.add(flushed_slot)
            return literals[id(v)]

        steps = []
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name == _CALLBACK:
                kind = _CALLBACK_STEP
            elif name in _CALLS:
                kind = _CALL_STEP
            elif name in _MOVES:
                kind = _MOVE_STEP
            else:
                kind = _ARITHMETIC_STEP
            ins, flush_in = [], []
            for v in eqn.invars:
                if type(v).__name__ == "Literal":
                    raw_slot, flushed_slot = literal(v)
                    slot = flushed_slot if kind == _ARITHMETIC_STEP else raw_slot
                else:
                    slot = slot_of[v]
                ins.append(slot)
                flush_in.append(kind == _ARITHMETIC_STEP and slot not in clean)
            inner = None
            if kind == _CALL_STEP:
                called = _called(eqn)
                inner = (_plan_of(getattr(called, "jaxpr", called)), getattr(called, "consts", ()))
            outs = []
            for var in eqn.outvars:
                outs.append(-1 if type(var).__name__ == "DropVar" else new_slot())
                if type(var).__name__ != "DropVar":
                    slot_of[var] = outs[-1]
            clean_out = kind == _ARITHMETIC_STEP or (kind == _MOVE_STEP and all(i in clean for i in ins))
            if clean_out:
                clean.update(o for o in outs if o >= 0)
            steps.append(_Step(name=name, kind=kind, fn=KNOWN.get(name), params=eqn.params, ins=tuple(ins),
                               flush_in=tuple(flush_in) if any(flush_in) else None, outs=tuple(outs),
                               avals=tuple(v.aval for v in eqn.outvars), multiple=eqn.primitive.multiple_results,
                               inner=inner, clean_out=clean_out))
        self.steps = steps
        self.n_in = len(jaxpr.invars)
        self.out_slots = []
        for v in jaxpr.outvars:
            self.out_slots.append(literal(v)[0] if type(v).__name__ == "Literal" else slot_of[v])
        self.template = template

    def run(self, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
        if len(args) != self.n_in:
            raise Unsupported(f"the program takes {self.n_in} arguments, {len(args)} were given")
        env = list(self.template)
        for slot, value in zip(self.const_slots, consts):
            env[slot] = np.asarray(value)
        for slot, value in zip(self.in_slots, args):
            env[slot] = np.asarray(value)
        dirty: set[int] = set()  # clean by the plan, but cast into a narrower dtype in this run
        for step in self.steps:
            operands = [env[i] for i in step.ins]
            kind = step.kind
            if kind == _ARITHMETIC_STEP:  # XLA reads subnormal operands as zero and flushes subnormal results
                flush_in = step.flush_in
                if flush_in is not None or dirty:
                    operands = [_flushed(x) if (flush_in is not None and flush_in[k]) or step.ins[k] in dirty else x
                                for k, x in enumerate(operands)]
                out = step.fn(*operands, **step.params)
                results = [_flushed(np.asarray(r)) for r in (out if step.multiple else [out])]
            elif kind == _MOVE_STEP:
                out = step.fn(*operands, **step.params)
                results = list(out) if step.multiple else [out]
            elif kind == _CALL_STEP:
                plan, inner_consts = step.inner
                results = plan.run(inner_consts, operands)
            else:
                # JAX copies what a callback returns into buffers of its own: a rule that hands out a buffer it
                # overwrites on its next call does not change the values an earlier call gave.
                results = [np.array(r, copy=True) for r in step.params["callback"](*(_as_jax_hands_it(x) for x in operands))]
            if len(results) != len(step.outs):
                raise Unsupported(f"{step.name} gave {len(results)} results where the program has {len(step.outs)}")
            for slot, value, aval in zip(step.outs, results, step.avals):
                if slot >= 0:
                    env[slot] = conformed = _conformed(step.name, value, aval)
                    if step.clean_out and conformed.dtype != np.asarray(value).dtype:
                        dirty.add(slot)
                    elif kind == _MOVE_STEP and dirty and any(i in dirty for i in step.ins):
                        dirty.add(slot)
        # A result that is a plan's literal (or a view of one) is read-only and shared by every run: a copy.
        return [x if x.flags.writeable else np.array(x) for x in (np.asarray(env[i]) for i in self.out_slots)]


_PLANS: "weakref.WeakKeyDictionary[Any, _Plan]" = weakref.WeakKeyDictionary()
_PLANS_LOCK = threading.Lock()


def _plan_of(jaxpr: Any) -> _Plan:
    """The plan of ``jaxpr`` (a Jaxpr), made on its first run and kept as long as the jaxpr lives."""
    plan = _PLANS.get(jaxpr)
    if plan is None:
        plan = _Plan(jaxpr)
        with _PLANS_LOCK:
            _PLANS[jaxpr] = plan
    return plan


# Primitives that move, pick or relabel values, or read only their class: XLA leaves subnormal values as they
# are there (tests/engines/test_jax_numpy_eval.py draws subnormal inputs for every primitive, compared with XLA).
_MOVES = frozenset({"broadcast_in_dim", "reshape", "squeeze", "transpose", "rev", "concatenate", "pad", "slice", "copy",
                    "select_n", "neg", "abs", "real", "imag", "conj", "complex", "iota", "is_finite", "and", "or", "not",
                    "split", "tile", "stop_gradient"})


def _flushed(x: np.ndarray) -> np.ndarray:
    """``x`` with its subnormal numbers replaced by zeros of the same sign (XLA on CPU computes with the
    processor's flush-to-zero and denormals-are-zero modes on)."""
    if x.dtype.kind == "c":
        real, imag = np.real(x), np.imag(x)
        flushed_real, flushed_imag = _flushed(real), _flushed(imag)
        if flushed_real is real and flushed_imag is imag:
            return x  # as for real arrays: no subnormal part, no copy
        out = np.empty_like(x)
        out.real, out.imag = flushed_real, flushed_imag
        return out
    dtype = x.dtype
    if dtype.kind != "f":
        return x
    tiny = _TINY.get(dtype)
    if tiny is None:
        tiny = _TINY[dtype] = np.finfo(dtype).tiny
    sub = np.abs(x) < tiny
    if not sub.any():  # the common case, decided in two operations (every operand and result of the program)
        return x
    sub &= x != 0
    return np.where(sub, np.copysign(np.zeros((), dtype), x), x) if sub.any() else x


_TINY: dict[np.dtype, Any] = {}  # the smallest normal number per float dtype (np.finfo per call cost more than the test)


def flushed_to_zero(x: Any) -> Any:
    """``x`` (an array or a Python or NumPy number) as XLA on CPU reads it: subnormal numbers replaced by zeros
    of the same sign; anything that is not a float or complex array or number comes back as it is."""
    if isinstance(x, (float, complex)) or (isinstance(x, np.ndarray) and x.dtype.kind in "fc") \
            or isinstance(x, (np.floating, np.complexfloating)):
        a = np.asarray(x)
        out = _flushed(a)
        if out is a:
            return x
        return type(x)(out) if not isinstance(x, np.ndarray) else out
    return x


def _conformed(name: str, value: Any, aval: Any) -> np.ndarray:
    out = np.asarray(value)
    if out.shape != tuple(aval.shape):
        raise Unsupported(f"{name} gave shape {out.shape} where the program has {tuple(aval.shape)}")
    # C-contiguous and owning its memory: what a later callback sees is laid out as JAX lays it out.
    return out.astype(aval.dtype, order="C", copy=False)


def _as_jax_hands_it(x: np.ndarray) -> np.ndarray:
    """A read-only C-contiguous copy: JAX hands host callbacks read-only buffers of its own. Its subnormal
    numbers are zeros: a callback runs on XLA's thread, in its denormals-are-zero mode, so the rule's NumPy
    code reads them as zero there."""
    out = np.array(_flushed(np.asarray(x)), order="C", copy=True)
    out.flags.writeable = False
    return out

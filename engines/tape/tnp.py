"""A NumPy-like namespace over the tape: ``tnp.dot(x, x)``.

Each function records a node when an argument is `Tracked` and is plain NumPy
otherwise. The same operations are `Tracked` operators and methods, and NumPy
calls on Tracked values (``np.sin(x)``, ``np.dot(x, w)``) route here through
``__array_ufunc__`` / ``__array_function__``; a NumPy function without a rule
raises `TraceError` naming it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy import arange, eye, linspace, newaxis, ones, pi, zeros  # noqa: F401  (constants, for convenience)

from gradguard.engines.errors import TraceError
from gradguard.engines.tape._rules import RULES
from gradguard.engines.tape._tape import Tracked, bind, large, shape_only

__all__ = [
    "add", "subtract", "multiply", "divide", "power", "negative", "exp", "log", "sin", "cos", "tanh", "sqrt",
    "abs", "maximum", "conj", "real", "imag", "where", "dot", "matmul", "sum", "mean", "reshape", "transpose",
    "getitem", "concatenate", "stack", "copy", "square", "log1p", "expm1", "minimum", "logaddexp", "outer",
    "broadcast_to", "ascontiguousarray",
]  # fmt: skip


def _ieee(value: Any) -> Any:
    """A Python float or complex as NumPy's scalar of it, whose arithmetic gives inf and NaN where Python's raises:
    the rules' pullbacks are NumPy expressions (``y * x ** (y - 1)``), and on a Python float argument (pyadjoint's
    AdjFloat) ``0.0 ** -1`` raised ZeroDivisionError and ``1e-300 ** -2`` OverflowError inside the tape, which the
    checks then reported as the rule's own code failing to trace."""
    if type(value) is float:
        return np.float64(value)
    if type(value) is complex:
        return np.complex128(value)
    return value


def _apply(name: str, *args: Any, **static: Any) -> Any:
    """Run the built-in rule ``name``: plain NumPy without Tracked arguments, a recorded node with them."""
    forward, vjp, reads = RULES[name]
    tape = next((a.tape for a in args if isinstance(a, Tracked)), None)
    if tape is None:
        return forward(*args, **static)

    def rrule(*raw: Any) -> tuple:
        ans = forward(*raw, **static)
        held, kept = raw, ans
        if tape.lean or large(ans):
            # The pullback holds, by reference, the values its rule reads (``reads``); of the others, only
            # their shapes and dtypes (what `unbroadcast` and friends need): the trace does not keep them alive.
            held = tuple(r if i in reads else shape_only(r) for i, r in enumerate(raw))
            kept = ans if "ans" in reads else shape_only(ans)
        return ans, lambda g: vjp(_ieee(g), _ieee(kept), *map(_ieee, held), **static)

    def captures(raw: tuple, ans: Any, _pullback: Any) -> list:
        held = [(None, "its output", ans) if r == "ans" else (r, f"argument {r}", raw[r]) for r in reads]
        return [h for h in held if isinstance(h[2], np.ndarray)]

    return bind(name, rrule, args, captures=captures, builtin=True)


# fmt: off
def add(x, y): return _apply("add", x, y)
def subtract(x, y): return _apply("subtract", x, y)
def multiply(x, y): return _apply("multiply", x, y)
def divide(x, y): return _apply("divide", x, y)
def power(x, y): return _apply("power", x, y)
def negative(x): return _apply("negative", x)
def exp(x): return _apply("exp", x)
def log(x): return _apply("log", x)
def sin(x): return _apply("sin", x)
def cos(x): return _apply("cos", x)
def tanh(x): return _apply("tanh", x)
def sqrt(x): return _apply("sqrt", x)
def abs(x): return _apply("abs", x)
def maximum(x, y): return _apply("maximum", x, y)
def conj(x): return _apply("conj", x)
def real(x): return _apply("real", x)
def imag(x): return _apply("imag", x)
def where(condition, x, y): return _apply("where", _raw(condition), x, y)
def matmul(x, y): return _apply("matmul", x, y)
def sum(x, axis=None, keepdims=False): return _apply("sum", x, axis=_axis(axis), keepdims=keepdims)
def mean(x, axis=None, keepdims=False): return _apply("mean", x, axis=_axis(axis), keepdims=keepdims)
def reshape(x, shape): return _apply("reshape", x, shape=shape)
def getitem(x, index): return _apply("getitem", x, _raw(index))
def concatenate(arrays, axis=0): return _apply("concatenate", *arrays, axis=axis)
def stack(arrays, axis=0): return _apply("stack", *arrays, axis=axis)
def copy(x): return _apply("copy", x)
def ascontiguousarray(x): return _apply("ascontiguousarray", x)  # always a new C-ordered array
def square(x): return _apply("square", x)
def log1p(x): return _apply("log1p", x)
def expm1(x): return _apply("expm1", x)
def minimum(x, y): return _apply("minimum", x, y)
def logaddexp(x, y): return _apply("logaddexp", x, y)
def outer(x, y): return _apply("outer", x, y)
def broadcast_to(x, shape): return _apply("broadcast_to", x, shape=tuple(shape) if not isinstance(shape, int) else (shape,))
# fmt: on


def dot(x: Any, y: Any) -> Any:
    """``np.dot`` for operands of up to 2 dimensions (use `matmul` for stacks of matrices)."""
    if np.ndim(x) > 2 or np.ndim(y) > 2:
        raise TraceError(f"tnp.dot supports operands of up to 2 dimensions, got shapes {np.shape(x)} and "
                         f"{np.shape(y)}. Use tnp.matmul (batched) or reshape first.")
    return _apply("dot", x, y)


def transpose(x: Any, axes: Any = None) -> Any:
    axes = None if axes is None else tuple(int(a) % max(np.ndim(x), 1) for a in axes)
    return _apply("transpose", x, axes=axes)


def _axis(axis: Any) -> Any:
    return axis if axis is None or isinstance(axis, int) else tuple(axis)


def _raw(x: Any) -> Any:
    if isinstance(x, tuple):
        return tuple(_raw(i) for i in x)
    return x.value if isinstance(x, Tracked) else x


def _unsupported(name: str) -> TraceError:
    short = name.rsplit(".", 1)[-1]
    return TraceError(
        f"{name} is not supported on Tracked values: the tape has no rule for it, and converting to a plain "
        f"array would silently drop the gradient. Use a tnp operation, or register a rule with "
        f"engines.tape.primitive(rrule, name={short!r})."
    )


# NumPy entry points that route to a rule, and those whose result is constant (zero gradient).
_UFUNCS = {np.add: add, np.subtract: subtract, np.multiply: multiply, np.true_divide: divide, np.power: power,
           np.negative: negative, np.exp: exp, np.log: log, np.sin: sin, np.cos: cos, np.tanh: tanh,
           np.sqrt: sqrt, np.absolute: abs, np.maximum: maximum, np.conjugate: conj, np.matmul: matmul,
           np.square: square, np.log1p: log1p, np.expm1: expm1, np.minimum: minimum, np.logaddexp: logaddexp}
_CONSTANT_UFUNCS = {np.greater, np.greater_equal, np.less, np.less_equal, np.equal, np.not_equal, np.isfinite,
                    np.isnan, np.isinf, np.sign, np.floor, np.ceil, np.logical_not, np.logical_and, np.logical_or}
_FUNCTIONS = {np.dot: dot, np.sum: sum, np.mean: mean, np.reshape: reshape, np.transpose: transpose,
              np.where: where, np.concatenate: concatenate, np.stack: stack, np.copy: copy, np.real: real,
              np.imag: imag, np.outer: outer, np.broadcast_to: broadcast_to}
_CONSTANT_FUNCTIONS = {np.shape, np.ndim, np.size, np.zeros_like, np.ones_like, np.empty_like}


def _array_ufunc(self: Tracked, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
    if method == "__call__" and not kwargs:
        if ufunc in _UFUNCS:
            return _UFUNCS[ufunc](*inputs)
        if ufunc in _CONSTANT_UFUNCS:
            return ufunc(*(_raw(i) for i in inputs))
    suffix = "" if method == "__call__" else f".{method}"
    extra = f" with {', '.join(f'{k}=' for k in kwargs)}" if kwargs else ""
    raise _unsupported(f"np.{ufunc.__name__}{suffix}{extra}")


def _array_function(self: Tracked, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
    if func in _FUNCTIONS:
        return _FUNCTIONS[func](*args, **kwargs)
    if func in _CONSTANT_FUNCTIONS:
        return func(*(_raw(a) for a in args), **kwargs)
    module = getattr(func, "__module__", "numpy") or "numpy"
    raise _unsupported(f"{module.replace('numpy', 'np', 1)}.{func.__name__}")


def _inplace(name: str):
    """``x += y`` on a Tracked ndarray writes into the very same buffer (NumPy semantics) and records a node.

    Pullbacks that captured ``x`` earlier then read the new values, exactly as
    with any other in-place mutation.
    """
    forward, vjp, reads = RULES[name]

    def op(self: Tracked, other: Any) -> Any:
        if not isinstance(self.value, np.ndarray):  # an immutable scalar: rebind, as Python does
            return _apply(name, self, other)

        def rrule(a: np.ndarray, b: Any) -> tuple:
            old = a.copy() if 0 in reads else shape_only(a)  # x's values before the write, where the rule reads them
            forward(a, b, out=a)
            kept, other = (a if "ans" in reads else shape_only(a)), (b if 1 in reads else shape_only(b))
            return a, lambda g: vjp(_ieee(g), kept, old, _ieee(other))

        def captures(raw: tuple, ans: Any, _pullback: Any) -> list:
            return [(1, "argument 1", raw[1])] if 1 in reads and isinstance(raw[1], np.ndarray) else []

        return bind(f"{name} (in place)", rrule, (self, other), captures=captures, builtin=True)

    return op


def _wire_tracked() -> None:
    """Attach operators and methods to `Tracked` (as autograd does for its boxes)."""
    flip = lambda f: lambda self, other: f(other, self)  # noqa: E731
    for dunder, f in {"add": add, "sub": subtract, "mul": multiply, "truediv": divide, "pow": power,
                      "matmul": matmul}.items():
        setattr(Tracked, f"__{dunder}__", f)
        setattr(Tracked, f"__r{dunder}__", flip(f))
    for dunder, name in {"iadd": "add", "isub": "subtract", "imul": "multiply", "itruediv": "divide"}.items():
        setattr(Tracked, f"__{dunder}__", _inplace(name))
    for dunder, ufunc in {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
                          "eq": np.equal, "ne": np.not_equal}.items():
        setattr(Tracked, f"__{dunder}__", lambda self, other, u=ufunc: u(self.value, _raw(other)))
    Tracked.__hash__ = None
    Tracked.__neg__, Tracked.__pos__, Tracked.__abs__ = negative, lambda self: self, abs
    Tracked.__getitem__ = getitem
    Tracked.__array_ufunc__, Tracked.__array_function__ = _array_ufunc, _array_function
    Tracked.sum, Tracked.mean, Tracked.dot, Tracked.copy, Tracked.conj = sum, mean, dot, copy, conj
    Tracked.reshape = lambda self, *shape: reshape(self, shape[0] if len(shape) == 1 else shape)
    Tracked.transpose = lambda self, *axes: transpose(self, (axes[0] if len(axes) == 1 else axes) or None)
    Tracked.T = property(transpose)
    Tracked.real, Tracked.imag = property(real), property(imag)


_wire_tracked()

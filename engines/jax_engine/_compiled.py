"""A JAX function called on concrete values, compiled once per (fixed arguments, shapes, dtypes).

Called eagerly, JAX runs a function primitive by primitive, and a function that builds new closures on
every call (a `lax.while_loop`, `lax.scan` or `lax.cond` in a solver, a fixed-point iteration) is traced
and compiled again on every call: about 30 ms a call for a fixed-point rule's primal, which finite
differences call hundreds of times per check. :class:`Compiled` calls it under `jax.jit` instead:

* arguments at the positions it is told are fixed, and every argument that is not a float or complex
  value (an int, a bool, None, a string, a function), are jit's static arguments, as are keyword
  arguments; the others are traced, so one compilation serves every value of the same shapes and dtypes;
* a fixed argument that holds arrays (a grid of nodes, a matrix, a mask given at a ``nondiff_argnums``
  position, alone or in a container) is keyed by its contents (:func:`by_value`): one compilation per
  value, the function given the argument itself, as eagerly;
* where jit cannot run the function as eager JAX does (a Python branch on a traced value, NumPy or
  ``float()`` applied to a tracer, a fixed argument neither hashable nor made of arrays and hashable
  values), it runs eagerly, and that key is remembered, so it is never traced again;
* the first compiled run of each key is compared with an eager run of the same arguments; where they
  disagree beyond rounding (a function that takes another path on jit's tracers), that key runs eagerly
  from then on. So the values are eager JAX's wherever the two differ, and a call is never slower than
  eager by more than one trace and compilation per key.

`eager_keys` says which keys ran eagerly and why (tests and benchmarks read it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Sequence

import numpy as np

from gradguard.engines.jax_engine._runtime import load

__all__ = ["Compiled", "agree", "by_value", "ByValue"]

# Compiled against eager, relative to the larger of 1 and the eager value's magnitude, in units of the
# output dtype's machine epsilon: compiled programs fuse and may round differently, by a few ulps.
_ROUNDING_ULPS = 1024


def agree(a: Any, b: Any) -> bool:
    """Whether two results (pytrees of arrays and numbers) have the same structure, shapes and dtypes, and values
    equal to rounding (NaN equal to NaN)."""
    jax = load()
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    if ta != tb or len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.dtype.kind not in "fc":
            if not np.array_equal(x, y):
                return False
            continue
        eps = float(np.finfo(x.dtype).eps)
        finite = np.abs(y[np.isfinite(y)])
        scale = max(1.0, float(np.max(finite, initial=0.0)))
        if not np.allclose(x, y, rtol=_ROUNDING_ULPS * eps, atol=_ROUNDING_ULPS * eps * scale, equal_nan=True):
            return False
    return True


@dataclass
class _State:
    verified: set[Any] = field(default_factory=set)
    eager: dict[Any, str] = field(default_factory=dict)


class Compiled:
    """``fun`` called as ``compiled(args, fixed=positions, kwargs=...)``: compiled per key, eager where it must be.

    ``fun`` must be a function of its arguments only (a JAX function: the user's primal, a transform of a
    custom rule); its results are returned as JAX returns them.
    """

    def __init__(self, fun: Callable[..., Any], name: str | None = None) -> None:
        self.fun = fun
        self.name = name or getattr(fun, "__name__", "function")
        self._state = _State()
        self._lock = threading.Lock()
        self._jitted: Callable[..., Any] | None = None

    @property
    def eager_keys(self) -> dict[Any, str]:
        return dict(self._state.eager)

    def __call__(self, args: Sequence[Any], fixed: Collection[int] = (), kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = dict(kwargs or {})
        static = tuple(i for i, a in enumerate(args) if i in fixed or not _traceable(a))
        dynamic = [a for i, a in enumerate(args) if i not in static]
        try:
            statics = tuple((i, by_value(args[i])) for i in static) + (
                ("kwargs", tuple((k, by_value(v)) for k, v in sorted(kwargs.items()))),)
            key = (len(args), statics, _avals(dynamic))
            hash(key)
        except TypeError:  # a fixed argument neither hashable nor made of arrays: jit cannot key on it
            return self.fun(*args, **kwargs)
        if key in self._state.eager:
            return self.fun(*args, **kwargs)
        try:
            result = self._compiled()(statics, *dynamic)
        except Exception as exc:  # noqa: BLE001 - jit could not run it: eager JAX decides (and raises its own error)
            result = self.fun(*args, **kwargs)
            self._state.eager[key] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            return result
        if key in self._state.verified:
            return result
        eager = self.fun(*args, **kwargs)
        with self._lock:
            if agree(result, eager):
                self._state.verified.add(key)
            else:
                self._state.eager[key] = "its first compiled run disagreed with eager JAX"
        return eager

    def _compiled(self) -> Callable[..., Any]:
        if self._jitted is None:
            jax = load()
            fun = self.fun

            def run(statics: tuple, *dynamic: Any) -> Any:
                nargs = len(statics) - 1 + len(dynamic)
                fixed = {i: unwrapped(v) for i, v in statics[:-1]}
                kwargs = {k: unwrapped(v) for k, v in statics[-1][1]}
                it = iter(dynamic)
                return fun(*(fixed[i] if i in fixed else next(it) for i in range(nargs)), **kwargs)

            run.__name__ = run.__qualname__ = self.name
            self._jitted = jax.jit(run, static_argnums=0)
        return self._jitted


class ByValue:
    """A fixed argument holding arrays, as jit's static argument: hashed and compared by its tree structure and
    each leaf's type, dtype, shape and bytes (an array) or value (any other, hashable, leaf). ``value`` is the
    argument itself, which the function is given."""

    __slots__ = ("value", "_key", "_hash")

    def __init__(self, value: Any, key: tuple) -> None:
        self.value = value
        self._key = key
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByValue) and self._hash == other._hash and self._key == other._key

    def __repr__(self) -> str:
        return f"ByValue({type(self.value).__name__})"


# The most array bytes one fixed argument may hold to be keyed by its contents: each key (and the argument) stays
# in jit's cache, one per value; a larger one runs eagerly, as an unhashable argument does.
KEYED_BYTES = 1 << 20


def by_value(value: Any) -> Any:
    """``value`` itself where it is hashable; else, where its leaves are arrays (KEYED_BYTES in all at most) and
    hashable values, a :class:`ByValue` keyed by its contents (two arrays of equal bytes are one key; ``-0.0``
    and ``0.0`` are two). Raises TypeError for a value that is neither (jit cannot key on it)."""
    try:
        hash(value)
        return value
    except TypeError:
        pass
    jax = load()
    leaves, tree = jax.tree_util.tree_flatten(value)
    parts = []
    size = 0
    for leaf in leaves:
        if isinstance(leaf, (np.ndarray, jax.Array)) and not isinstance(leaf, jax.core.Tracer):
            size += leaf.nbytes
            if size > KEYED_BYTES:
                raise TypeError(f"arrays of more than {KEYED_BYTES} bytes are not keyed by their contents")
            arr = np.asarray(leaf)
            if arr.dtype.hasobject:
                raise TypeError(f"an array of Python objects ({arr.dtype}) has no contents jit can key on")
            parts.append((type(leaf), arr.dtype.str, arr.shape, arr.tobytes()))
        else:
            hash(leaf)  # TypeError: nothing jit can key on
            parts.append((type(leaf), leaf))
    return ByValue(value, (tree, tuple(parts)))


def unwrapped(value: Any) -> Any:
    """The argument a :func:`by_value` key stands for."""
    return value.value if isinstance(value, ByValue) else value


def _traceable(a: Any) -> bool:
    """Whether jit traces an argument: arrays and float or complex numbers (NumPy's or Python's); containers of
    them and registered pytree classes holding them too. Everything else (ints, bools, None, strings, functions) is fixed."""
    if isinstance(a, bool):
        return False
    if isinstance(a, (float, complex, np.ndarray, np.generic)):
        return True
    jax = load()
    if isinstance(a, jax.Array):
        return True
    if a is None or isinstance(a, str):
        return False
    leaves, tree = jax.tree_util.tree_flatten(a)
    if jax.tree_util.treedef_is_leaf(tree):  # an object JAX does not take apart: fixed
        return False
    # a container, or a class registered as a pytree (a flax struct of parameters): traced where its leaves are
    return bool(leaves) and all(_traceable(x) for x in leaves)


def _avals(values: Sequence[Any]) -> tuple:
    """What jit keys a compilation on for traced values: tree structure, shapes, dtypes, weak types."""
    jax = load()
    leaves, tree = jax.tree_util.tree_flatten(list(values))
    return (tree, tuple((np.shape(x), _dtype(x).str, type(x) in (float, complex)) for x in leaves))


def _dtype(x: Any) -> np.dtype:
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.result_type(x)

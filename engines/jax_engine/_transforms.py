"""Run a JAX function under a transform, for the composition checks (GG601 jit, GG602 vmap).

    run_under(f, (x,), transform="jit")        # f's value under jit, as NumPy
    run_under(f, (x,), transform="jit_grad")   # its gradient under jit

Transformed functions are cached per (function, transform, non-differentiable
positions, static positions) in a bounded LRU; `jax.jit` then caches one
compilation per argument shapes and dtypes, so a check that runs many inputs
of one shape compiles once. Arguments that are not arrays or numbers are
static: passed as they are, never differentiated.
"""

from __future__ import annotations

import collections
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from gradguard.engines.errors import AdapterError
from gradguard.engines.jax_engine import _relay
from gradguard.engines.jax_engine._runtime import cotangent_like, load

__all__ = ["TRANSFORMS", "NotByNumpy", "run_under", "run_traced", "cache_info", "clear_cache"]

TRANSFORMS = ("none", "jit", "grad", "jit_grad", "vmap")

_MAX_CACHED = 256
_COMPILE_AFTER = 8  # run_traced: runs of one trace by XLA, primitive by primitive, before it is compiled whole
_cache: "collections.OrderedDict[Any, Callable[..., Any]]" = collections.OrderedDict()
# run_traced's traces: per (transformed function, static arguments, argument shapes and dtypes), the closed
# jaxpr and its output tree.
_traces: "collections.OrderedDict[Any, Any]" = collections.OrderedDict()
# run_traced's families (its ``family=``, transform, static values, shapes): how many traces each has made.
_families: "collections.OrderedDict[Any, int]" = collections.OrderedDict()
_stats = {"hits": 0, "misses": 0}


def run_under(
    fn: Callable[..., Any],
    args: Sequence[Any],
    *,
    transform: str,
    cotangent: Any = None,
    nondiff: Sequence[int] = (),
) -> Any:
    """``fn(*args)`` under ``transform``, returned as NumPy.

    - "none", "jit": the value.
    - "grad", "jit_grad": one tangent per argument (None at ``nondiff`` and
      static positions) of ``vjp(fn)(cotangent)``; ``cotangent`` defaults to
      1 for a scalar output and must be given otherwise.
    - "vmap": the value with ``fn`` mapped over the leading axis of every
      argument not in ``nondiff`` (compare with a per-example loop).

    Errors raised by a NumPy rule inside a host callback come back as the
    rule's own exception (e.g. `AdapterError` for a mutating rule).
    """
    if transform not in TRANSFORMS:
        raise ValueError(f"Got transform={transform!r}, but transform must be one of {TRANSFORMS}.")
    jax = load()
    nondiff = tuple(sorted(set(nondiff)))
    static = tuple(i for i, a in enumerate(args) if not _numeric(a))
    args = tuple(a if i in static else jax.numpy.asarray(a) for i, a in enumerate(args))
    call = _transformed(fn, transform, nondiff, static, len(args))
    with _relay.relaying():
        if transform in ("grad", "jit_grad"):
            ct = None if cotangent is None else jax.tree_util.tree_map(jax.numpy.asarray, cotangent)
            result = _by_position(call(*args, ct), nondiff, static, len(args))
        else:
            result = call(*args)
        result = jax.block_until_ready(result)
    return jax.tree_util.tree_map(np.asarray, result)


def run_traced(
    fn: Callable[..., Any],
    args: Sequence[Any],
    *,
    transform: str,
    cotangent: Any = None,
    nondiff: Sequence[int] = (),
    family: Any = None,
    xla: bool = True,
) -> Any:
    """What ``run_under`` gives under "jit" or "jit_grad", without compiling: JAX traces the function (or its
    ``vjp``) once per (function, static arguments, argument shapes and dtypes) and the trace runs with NumPy
    (`gradguard.engines.jax_engine._numpy_eval`; XLA's treatment of subnormal numbers included). Where the trace
    holds a primitive NumPy does not run here, ``run_under`` compiles it and runs it; where JAX cannot trace it,
    what JAX raised is raised (for that key, without tracing again). The values are XLA's up to rounding (a few
    units in the last place).

    ``family``: a hashable key shared by functions that are one function with other values bound into it (GG203
    binds a rule's fixed arguments, and a drawn label array binds new values at every input). Each binding is a
    trace of its own; where a family's traces keep changing, one that NumPy does not run is run by XLA
    primitive by primitive (`_Trace`), which compiles nothing new once its primitives have run on those
    shapes, instead of being compiled whole for each binding.

    ``xla`` False: only NumPy runs the trace; where it cannot, `NotByNumpy` is raised and nothing is compiled (for
    a caller with a cheaper way to the same values, such as one trace per point instead of one for many)."""
    if transform not in ("jit", "jit_grad"):
        raise ValueError(f"Got transform={transform!r}, but run_traced runs 'jit' or 'jit_grad'.")
    from gradguard.engines.jax_engine._numpy_eval import Unsupported, evaluate

    jax = load()
    nondiff = tuple(sorted(set(nondiff)))
    static = tuple(i for i, a in enumerate(args) if not _numeric(a))
    nargs = len(args)
    base = _transformed(fn, "none" if transform == "jit" else "grad", nondiff, static, nargs)
    grad = transform == "jit_grad"
    values = tuple(a if i in static else np.asarray(a) for i, a in enumerate(args))
    if grad:
        values += (None if cotangent is None else jax.tree_util.tree_map(np.asarray, cotangent),)
    try:
        dynamic = [v for i, v in enumerate(values) if i not in static]
        flat, tree = jax.tree_util.tree_flatten(dynamic)
        key = (base, tuple(values[i] for i in static), tree, tuple((np.shape(x), np.result_type(x).str) for x in flat))
        hash(key)
    except TypeError:  # an unhashable static argument: nothing to key a trace on
        return run_under(fn, args, transform=transform, cotangent=cotangent, nondiff=nondiff)
    kin = None if family is None else (family, transform, key[1:])  # the family's traces of this shape
    found = _traces.get(key)
    if isinstance(found, _Untraced):
        raise found.again()  # JAX could not trace it for this key before: jit cannot either
    if found is None:
        try:
            closed, shape = jax.make_jaxpr(base, static_argnums=static, return_shape=True)(*values)
        except (MemoryError, RecursionError):
            raise
        except Exception as exc:  # jit traces as make_jaxpr does, so it would raise the same: no compiling to try
            _keep(key, _Untraced(exc))
            raise
        found = _keep(key, _Trace(closed, jax.tree_util.tree_structure(shape)))
        if kin is not None:
            _families[kin] = _families.pop(kin, 0) + 1
            while len(_families) > _MAX_CACHED:
                _families.popitem(last=False)
    if found.by_xla < 0:
        try:
            result = jax.tree_util.tree_unflatten(found.tree, evaluate(found.closed, flat))
        except _relay.RelayedError as exc:
            _relay.raise_original(exc)
        except Unsupported as exc:  # XLA runs it from now on: compiled, unless its family keeps making new traces
            if not xla:
                raise NotByNumpy(str(exc)) from None
            found.by_xla = 0 if kin is not None and _families.get(kin, 0) > 1 else _COMPILE_AFTER
        except Exception as exc:  # noqa: BLE001 - NumPy could not run it: XLA runs it, and raises what it raises
            if not xla:
                raise NotByNumpy(f"{type(exc).__name__}: {exc}") from None
            return run_under(fn, args, transform=transform, cotangent=cotangent, nondiff=nondiff)
    elif not xla:
        raise NotByNumpy("the trace holds primitives NumPy does not run here")
    if found.by_xla >= _COMPILE_AFTER:  # run often enough that compiling it once costs less than primitive by primitive
        return run_under(fn, args, transform=transform, cotangent=cotangent, nondiff=nondiff)
    if found.by_xla >= 0:
        from jax.extend.core import jaxpr_as_fun

        found.by_xla += 1
        with _relay.relaying():
            outs = jaxpr_as_fun(found.closed)(*flat)
        result = jax.tree_util.tree_unflatten(found.tree, [np.asarray(o) for o in outs])
    if grad:
        result = _by_position(result, nondiff, static, nargs)
    return jax.tree_util.tree_map(np.asarray, result)


class NotByNumpy(RuntimeError):
    """`run_traced` with ``xla=False``: NumPy cannot run the trace here."""


class _Trace:
    """A traced program: its closed jaxpr, its output tree, and how it runs: with NumPy (``by_xla`` < 0), or,
    where NumPy does not run one of its primitives, by XLA: primitive by primitive while ``by_xla`` (the runs
    so far) is under `_COMPILE_AFTER`, compiled whole (`run_under`) from then on.

    A primitive run alone is compiled once per (primitive, shapes, parameters) and kept by JAX for every later
    program, so a trace made afresh for new bound values compiles nothing new after the first; compiling the
    whole program again for each binding is what a family of changing traces avoids this way. A trace that
    keeps being run is compiled after all (a binding that comes back at every input)."""

    __slots__ = ("closed", "tree", "by_xla")

    def __init__(self, closed: Any, tree: Any) -> None:
        self.closed, self.tree, self.by_xla = closed, tree, -1


class _Untraced:
    """What JAX raised tracing a function for a key: raised again for that key, without tracing it again.

    Kept as its type and arguments only: the exception itself holds the frames it passed through, and with them
    the arguments of the call (a drawn input of 10**6 elements, at every input of a family)."""

    __slots__ = ("kind", "args")

    def __init__(self, error: Exception) -> None:
        self.kind, self.args = type(error), error.args

    def again(self) -> Exception:
        """An exception of the same type and arguments, made without calling its ``__init__`` (JAX's take a tracer)."""
        made = self.kind.__new__(self.kind)
        made.args = self.args
        return made


def _keep(key: Any, entry: Any) -> Any:
    _traces[key] = entry
    while len(_traces) > _MAX_CACHED:
        _traces.popitem(last=False)
    return entry


def _transformed(
    fn: Callable[..., Any], transform: str, nondiff: tuple[int, ...], static: tuple[int, ...], nargs: int
) -> Callable[..., Any]:
    """The transformed ``fn``, built once per key and kept in a bounded LRU cache."""
    key = (fn, transform, nondiff, static, nargs)
    if key in _cache:
        _stats["hits"] += 1
        _cache.move_to_end(key)
        return _cache[key]
    _stats["misses"] += 1
    built = _cache[key] = _build(_weakly_referable(fn), transform, nondiff, static, nargs)
    while len(_cache) > _MAX_CACHED:
        _cache.popitem(last=False)
    return built


def _weakly_referable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, or a plain function calling it where ``fn`` cannot be weakly referenced (a NumPy ufunc).

    ``jax.jit`` keys its C++ function cache on a weak reference to the function. Given ``np.sin``, calling
    the result raises "cannot create weak reference to 'numpy.ufunc' object", and after that has happened a
    few hundred times in one process the next ``jax.jit(np.sin)`` crashes the interpreter (a segmentation
    fault in ``_cpp_pjit``): GG203 tries a NumPy primal under ``jit`` first, so a long check run did exactly
    that. A wrapper is an ordinary function: JAX traces it (and fails on the ufunc as before, cleanly)."""
    try:
        weakref.ref(fn)
    except TypeError:

        def call(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        call.__name__ = getattr(fn, "__name__", "fn")
        return call
    return fn


def _build(
    fn: Callable[..., Any], transform: str, nondiff: tuple[int, ...], static: tuple[int, ...], nargs: int
) -> Callable[..., Any]:
    jax = load()
    if transform == "none":
        return fn
    if transform == "jit":
        return jax.jit(fn, static_argnums=static)
    if transform == "vmap":
        return jax.vmap(fn, in_axes=tuple(None if i in nondiff or i in static else 0 for i in range(nargs)))
    diff = _diff(nondiff, static, nargs)

    def grad(*args_and_ct: Any) -> tuple[Any, ...]:
        args, ct = args_and_ct[:-1], args_and_ct[-1]

        def call(*xs: Any) -> Any:
            full = list(args)
            for i, x in zip(diff, xs):
                full[i] = x
            return fn(*full)

        out, pullback = jax.vjp(call, *[args[i] for i in diff])
        if ct is None:
            if getattr(out, "shape", None) != ():
                raise AdapterError(
                    f"transform={transform!r} needs cotangent= for a function whose output is not a scalar "
                    f"(output shape: {getattr(out, 'shape', type(out).__name__)})."
                )
            ct = jax.numpy.ones_like(out)
        return pullback(cotangent_like(ct, out))

    return grad if transform == "grad" else jax.jit(grad, static_argnums=static)


def _by_position(grads: Sequence[Any], nondiff: tuple[int, ...], static: tuple[int, ...], nargs: int) -> tuple[Any, ...]:
    """One tangent per argument: the gradients at the differentiated positions, None elsewhere."""
    by_pos = dict(zip(_diff(nondiff, static, nargs), grads))
    return tuple(by_pos.get(i) for i in range(nargs))


def _diff(nondiff: tuple[int, ...], static: tuple[int, ...], nargs: int) -> list[int]:
    return [i for i in range(nargs) if i not in nondiff and i not in static]


def cache_info() -> dict[str, int]:
    """Cache statistics: transformed functions held, hits, misses, and compilations `jax.jit` holds for them."""
    compiled = sum(f._cache_size() for f in _cache.values() if hasattr(f, "_cache_size"))
    return {"transformed": len(_cache), "hits": _stats["hits"], "misses": _stats["misses"], "compiled": compiled}


def clear_cache() -> None:
    """Drop the cached transformed functions (and with them their compilations) and run_traced's traces."""
    _cache.clear()
    _traces.clear()
    _families.clear()
    _stats.update(hits=0, misses=0)


def _numeric(a: Any) -> bool:
    if isinstance(a, (np.ndarray, np.generic, int, float, complex)):
        return True
    return hasattr(a, "shape") and hasattr(a, "dtype")  # JAX arrays and tracers

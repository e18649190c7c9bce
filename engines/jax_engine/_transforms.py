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
from gradguard.engines.jax_engine._runtime import load

__all__ = ["TRANSFORMS", "run_under", "run_traced", "cache_info", "clear_cache"]

TRANSFORMS = ("none", "jit", "grad", "jit_grad", "vmap")

_MAX_CACHED = 256
_cache: "collections.OrderedDict[Any, Callable[..., Any]]" = collections.OrderedDict()
# run_traced's traces: per (transformed function, static arguments, argument shapes and dtypes), the closed
# jaxpr and its output tree.
_traces: "collections.OrderedDict[Any, Any]" = collections.OrderedDict()
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
) -> Any:
    """What ``run_under`` gives under "jit" or "jit_grad", without compiling: JAX traces the function (or its
    ``vjp``) once per (function, static arguments, argument shapes and dtypes) and the trace runs with NumPy
    (`gradguard.engines.jax_engine._numpy_eval`; XLA's treatment of subnormal numbers included). Where the trace
    holds a primitive NumPy does not run here, or JAX cannot trace it this way, ``run_under`` runs it. The
    values are XLA's up to rounding (a few units in the last place)."""
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
    found = _traces.get(key)
    if found is False:  # an earlier call found that NumPy does not run this trace
        return run_under(fn, args, transform=transform, cotangent=cotangent, nondiff=nondiff)
    try:
        if found is None:
            closed, shape = jax.make_jaxpr(base, static_argnums=static, return_shape=True)(*values)
            found = _traces[key] = (closed, jax.tree_util.tree_structure(shape))
            while len(_traces) > _MAX_CACHED:
                _traces.popitem(last=False)
        result = jax.tree_util.tree_unflatten(found[1], evaluate(found[0], flat))
    except _relay.RelayedError as exc:
        _relay.raise_original(exc)
    except Unsupported:
        _traces[key] = False
        return run_under(fn, args, transform=transform, cotangent=cotangent, nondiff=nondiff)
    except Exception:  # noqa: BLE001 - not traceable this way: XLA runs it, and raises what it raises
        return run_under(fn, args, transform=transform, cotangent=cotangent, nondiff=nondiff)
    if grad:
        result = _by_position(result, nondiff, static, nargs)
    return jax.tree_util.tree_map(np.asarray, result)


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
        return pullback(ct)

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
    _stats.update(hits=0, misses=0)


def _numeric(a: Any) -> bool:
    if isinstance(a, (np.ndarray, np.generic, int, float, complex)):
        return True
    return hasattr(a, "shape") and hasattr(a, "dtype")  # JAX arrays and tracers

"""JAX plumbing shared by the JAX checks (GG203, GG204, GG601, GG602).

- :func:`jax_ready`: load JAX (float64) on the requested device, or Skip with the reason.
- :func:`bind_nondiff`: a rule's function with its non-differentiable arguments fixed, cached, so
  `jax.jit` never sees a constant as a tracer and compiles once per shape.
- :func:`second_order_compiled`: the jvp of the vjp (GG204's JAX side), compiled once per rule and shape.
- :func:`batched_directional`: finite differences with every Richardson probe point ``x + t_k v`` evaluated
  in one jitted ``vmap`` call, then extrapolated as `gradguard.engines.fd.directional` does. GG204 uses it on a GPU
  (``--device gpu``), where one batched call over a 10**7-element input costs about what one call costs,
  and on the CPU for inputs of 10**5 elements or more; ``GRADGUARD_BATCHED_FD=1`` (or ``0``) forces it on
  (or off) anywhere.

Nothing here imports JAX at module import.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Sequence

import numpy as np

from gradguard.checker.case import Case
from gradguard.checker.checks.registry import Skip
from gradguard.checker.trees import tree_map
from gradguard.engines import fd

__all__ = ["jax_ready", "use_batched_fd", "bind_nondiff", "spread", "first_line", "second_order_compiled", "batched_directional"]

BATCHED_VARIABLE = "GRADGUARD_BATCHED_FD"
BATCHED_MIN_SIZE = 10**5  # elements from which the CPU batches too (15 copies of the input live at once)


# -- JAX on demand ----------------------------------------------------------------------------------
def jax_ready(case: Case) -> Any:
    """Load JAX on the requested device; Skip (with the reason) where that device does not exist."""
    from gradguard.checker.jax_rules import ensure_device
    from gradguard.engines.errors import PlatformUnavailable
    from gradguard.engines.jax_engine._runtime import load

    try:
        ensure_device()
    except PlatformUnavailable as exc:
        raise Skip(str(exc)) from None
    return load()


def use_batched_fd(size: int = 0) -> bool:
    """Batched finite differences for an input of ``size`` elements: on a GPU, and on the CPU from
    ``BATCHED_MIN_SIZE`` elements on (measured: 2.3x faster at 10**6, 6.5x at 10**7); ``GRADGUARD_BATCHED_FD``
    set to 1 or 0 forces them on or off."""
    from gradguard.checker.jax_rules import is_batched_device

    flag = os.environ.get(BATCHED_VARIABLE, "").strip()
    if flag in ("0", "1"):
        return flag == "1"
    return is_batched_device() or size >= BATCHED_MIN_SIZE


_bound_cache: dict[Any, Callable[..., Any]] = {}
_MAX_BOUND = 256


def bind_nondiff(fn: Callable[..., Any], case: Case) -> tuple[Callable[..., Any], tuple[int, ...]]:
    """``fn`` with the arguments that carry no tangent fixed to this case's values, and the positions left.

    A custom_vjp's ``nondiff_argnums`` must never be traced (JAX refuses a
    tracer there), so the transforms see only the differentiable arguments.
    The bound function is cached per (function, constants), so that the
    engine's transform cache and `jax.jit`'s compilations are reused.
    """
    diff = tuple(case.diff_positions)
    nargs = case.nargs
    consts = tuple((i, case.args[i]) for i in range(nargs) if i not in diff)
    if not consts:
        return fn, diff
    by_value = not case.rule.mutates  # a rule that writes into its arguments keeps getting the case's own
    key: Any = (fn, nargs, tuple((i, _const_key(v) if by_value else v) for i, v in consts), _types(v for _, v in consts))
    try:
        hit = _bound_cache.get(key)
    except TypeError:  # an unhashable constant: bind afresh (JAX retraces; correct, slower)
        key, hit = None, None
    if hit is not None and not all(held.tobytes() == raw for held, raw in getattr(hit, "held", ())):
        hit = None  # a rule wrote into a held copy (without declaring `mutates`): its key no longer says its values
    if hit is None:
        held: list[tuple[np.ndarray, bytes]] = []
        if key is not None and by_value:
            # The function outlives this case in the cache: it holds copies of array constants, which later
            # cases with the same values share; a copy that a rule changes is not used again (checked above).
            consts = tuple((i, _private_copy(v) if _keyed_array(v) else v) for i, v in consts)
            held = [(v, v.tobytes()) for _, v in consts if _keyed_array(v)]

        def hit(*xs: Any) -> Any:
            full: list[Any] = [None] * nargs
            for i, v in consts:
                full[i] = v
            for i, x in zip(diff, xs):
                full[i] = x
            return fn(*full)

        hit.__name__ = hit.__qualname__ = getattr(fn, "__name__", "rule")
        hit.held = held  # type: ignore[attr-defined]
        if key is not None:
            _bound_cache[key] = hit
            while len(_bound_cache) > _MAX_BOUND:
                _bound_cache.pop(next(iter(_bound_cache)))
    return hit, diff


# Array constants (index arrays, masks) up to this size are cached by value: each drawn input brings new array
# objects, and without a key that sees their values every call bound them afresh, so that jax.jit traced and
# compiled the same program again for every call of GG203's reference (its values and its vjp at one input).
_KEYED_ARRAY_BYTES = 1 << 14


def _keyed_array(v: Any) -> bool:
    return type(v) is np.ndarray and v.dtype.kind in "biufc" and v.nbytes <= _KEYED_ARRAY_BYTES


def _private_copy(v: np.ndarray) -> np.ndarray:
    """A copy of an array constant, read-only where the original is (a rule writing into it fails as before)."""
    held = np.array(v, copy=True)
    held.flags.writeable = bool(v.flags.writeable)
    return held


def _const_key(v: Any) -> Any:
    """A constant as a cache key: small plain arrays and small JAX arrays (a grid of nodes given as a custom_jvp's
    nondiff argument) by their exact bytes, dtype and shape, others as they are."""
    if not (_keyed_array(v) or _small_jax_array(v)):
        return v
    held = np.asarray(v)
    return (type(v), held.dtype.str, held.shape, held.tobytes())


def _small_jax_array(v: Any) -> bool:
    """A concrete JAX array of at most _KEYED_ARRAY_BYTES (immutable: the bound function may hold it as it is)."""
    jax = sys.modules.get("jax")
    return (jax is not None and isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer)
            and v.dtype.kind in "biufc" and v.nbytes <= _KEYED_ARRAY_BYTES)


def _types(values: Any) -> tuple[Any, ...]:
    """Types inside a cache key: 2, 2.0 and True are equal as keys but are different constants to JAX."""
    return tuple(type(v) for v in values)


def spread(values: Sequence[Any], diff: Sequence[int], nargs: int) -> tuple[Any, ...]:
    """One entry per argument: ``values`` at the ``diff`` positions, None elsewhere."""
    by_pos = dict(zip(diff, values))
    return tuple(by_pos.get(i) for i in range(nargs))


def _conj(tree: Any) -> Any:
    return tree_map(lambda x: np.conj(x) if x is not None and np.iscomplexobj(x) else x, tree)


def first_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` with the message's first line; where that line opens a bracket a later line closes (a value's
    repr, such as a tracer holding an array, printed over several lines), those lines too, joined, up to ``limit``
    characters: diffcp's GG203 skip reason ended mid-array at "GradTracer(primal=[[-1.10980586 -0.3 -0.3 ]"."""
    lines = str(exc).strip().splitlines()
    head, k = (lines[0] if lines else ""), 1
    while k < len(lines) and _unclosed(head) and len(head) < limit:
        head += " " + " ".join(lines[k].split())
        k += 1
    if len(head) > limit:
        head = head[:limit - 3] + "..."
    return f"{type(exc).__name__}: {head}".rstrip(": ")


def _unclosed(text: str) -> bool:
    return sum(text.count(c) for c in "([{") > sum(text.count(c) for c in ")]}")


# -- batched finite differences ------------------------------------------------------------------------
_batched_cache: dict[Any, Callable[..., Any]] = {}
_MAX_BATCHED = 64


def _batched_fn(fn: Callable[..., Any], mode: str, nargs: int, diff: tuple[int, ...], statics: tuple[Any, ...]) -> Callable[..., Any]:
    """``(ts, ss, xs, v, p, ct, w) -> (<w, g(x + t v + s p)>, sum |w| |g|)`` for every (t, s), jitted.

    ``g`` is ``fn`` itself (mode "value") or its vjp with cotangent ``ct`` (mode "pullback").
    """
    key = (fn, mode, nargs, diff, statics, _types(statics))
    try:
        cached = _batched_cache.get(key)
    except TypeError:  # unhashable non-differentiable arguments: build, do not cache
        key, cached = None, None
    if cached is not None:
        return cached
    from gradguard.engines.jax_engine._runtime import cotangent_for, load

    jax = load()
    jnp = jax.numpy
    static_pos = [i for i in range(nargs) if i not in diff]

    def full(xs: Sequence[Any]) -> list[Any]:
        out: list[Any] = [None] * nargs
        for i, v in zip(static_pos, statics):
            out[i] = v
        for i, x in zip(diff, xs):
            out[i] = x
        return out

    def contract(w: Any, out: Any) -> tuple[Any, Any]:
        pairs = [(a, b) for a, b in zip(jax.tree_util.tree_leaves(w), jax.tree_util.tree_leaves(out))]
        value = sum(jnp.sum(jnp.real(jnp.conj(a) * b)) for a, b in pairs)
        noise = sum(jnp.sum(jnp.abs(a) * jnp.abs(b)) for a, b in pairs)
        return value, noise

    def at(t: Any, s: Any, xs: Any, v: Any, p: Any, ct: Any, w: Any) -> Any:
        moved = []
        for x, vi, pi in zip(xs, v, p):
            wide = jnp.complex128 if jnp.iscomplexobj(x) else jnp.float64
            moved.append((x.astype(wide) + t * vi.astype(wide) + s * pi.astype(wide)).astype(x.dtype))
        if mode == "value":
            out = fn(*full(moved))
        else:
            out, vjp = jax.vjp(lambda *m: fn(*full(m)), *moved)
            out = vjp(cotangent_for(ct, out))
        return contract(w, out)

    built = jax.jit(jax.vmap(at, in_axes=(0, 0, None, None, None, None, None)))
    if key is not None:
        _batched_cache[key] = built
        while len(_batched_cache) > _MAX_BATCHED:
            _batched_cache.pop(next(iter(_batched_cache)))
    return built


def batched_directional(
    fn: Callable[..., Any],
    args: Sequence[Any],
    direction: Sequence[Any],
    covector: Any,
    *,
    cotangent: Any = None,
    mode: str = "value",
) -> fd.Derivative:
    """``d/dt <covector, g(args + t direction)>`` at 0, every probe point in one jitted vmap call.

    ``g`` is the JAX function ``fn`` (mode "value") or its pullback for
    ``cotangent`` (mode "pullback": ``covector`` then has one entry per
    differentiable argument). ``direction`` has one entry per argument, None
    for those that do not move (they are passed as they are). Richardson
    extrapolation and the error estimate follow `gradguard.engines.fd.directional`
    (six levels, rounding priced from the output precision and two probes
    along a random-sign rescaling of the arguments). Raises ValueError when a
    probe value is not finite (the caller falls back to the sequential path).
    """
    from gradguard.engines.jax_engine._runtime import load

    jax = load()
    jnp = jax.numpy
    if mode not in ("value", "pullback"):
        raise ValueError(f"Got mode={mode!r}, but mode must be 'value' or 'pullback'.")
    diff = tuple(i for i, v in enumerate(direction) if v is not None)
    if not diff:
        raise ValueError("Got a direction that is None everywhere; at least one argument must move.")
    statics = tuple(args[i] for i in range(len(args)) if i not in diff)
    xs = [jnp.asarray(args[i]) for i in diff]
    v = [jnp.asarray(direction[i], dtype=x.dtype) for i, x in zip(diff, xs)]
    in_eps = max(float(jnp.finfo(x.dtype).eps) for x in xs)
    reach = max(float(np.max(np.abs(np.asarray(args[i])), initial=0.0)) for i in diff)
    size = max(float(np.max(np.abs(np.asarray(direction[i])), initial=0.0)) for i in diff)
    rng = np.random.default_rng(0)
    p = [jnp.asarray(np.asarray(args[i]) * rng.choice([-1.0, 1.0], size=np.shape(args[i])) * (size / reach if reach else 0.0), dtype=x.dtype) for i, x in zip(diff, xs)]
    out_eps = in_eps
    h0 = max(in_eps, out_eps) ** (1.0 / 9)  # engines.fd's default: order 4 tuned, six levels refine it
    levels = fd._LEVELS
    steps = [h0 / fd._RATIO**k for k in range(levels)]
    ts = [t for h in steps for t in (h, -h)] + [0.0, 0.0, 0.0]
    ss = [0.0] * (2 * levels) + [0.0, h0, -h0]
    call = _batched_fn(fn, mode, len(args), diff, statics)
    ct = None if cotangent is None else jax.tree_util.tree_map(jnp.asarray, cotangent)
    w = jax.tree_util.tree_map(jnp.asarray, covector)
    values, noises = call(jnp.asarray(ts, dtype=jnp.float64), jnp.asarray(ss, dtype=jnp.float64), xs, v, p, ct, w)
    values, noises = np.asarray(values, dtype=np.float64), np.asarray(noises, dtype=np.float64)
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(noises))):
        raise ValueError("a probe point gave a non-finite value")
    table = {t: (values[k], out_eps * noises[k]) for k, t in enumerate(ts[: 2 * levels])}
    slope = abs(values[2 * levels + 1] - values[2 * levels + 2]) / (2 * h0) * (reach / size if size else 0.0)
    value, error = fd._richardson(lambda t: table[t], h0, levels, in_eps * slope)
    return fd.Derivative(float(value), float(error), len(ts), "richardson-batched", h0)


def second_order_compiled(case: Case, ybar: Any, u: tuple[Any, ...], *, reverse: bool = False) -> tuple[Any, ...]:
    """`gradguard.engines.jax_engine.second_order_vjp` compiled once per rule and shapes (jvp of vjp under jit), or with
    ``reverse`` `second_order_vjp_reverse` (reverse over reverse, where JAX's forward mode cannot enter the rule)."""
    from gradguard.engines.jax_engine._reference import check_reverse_size, reverse_over_reverse
    from gradguard.engines.jax_engine._runtime import cotangent_for, load

    jax = load()
    jnp = jax.numpy
    fn, nargs, diff = case.rule.jax_fn, case.nargs, tuple(case.diff_positions)
    statics = tuple(case.args[i] for i in range(nargs) if i not in diff)
    if reverse:
        check_reverse_size([case.args[i] for i in diff])
    key = ("second order", reverse, fn, nargs, diff, statics, _types(statics))
    built = _batched_cache.get(key)
    if built is None:
        static_pos = [i for i in range(nargs) if i not in diff]

        def call(*xs: Any) -> Any:
            full: list[Any] = [None] * nargs
            for i, v in zip(static_pos, statics):
                full[i] = v
            for i, x in zip(diff, xs):
                full[i] = x
            return fn(*full)

        def derivative(xs: Any, ct: Any, us: Any) -> Any:
            def pulled(*m: Any) -> Any:
                out, vjp = jax.vjp(call, *m)
                return vjp(cotangent_for(ct, out))

            if reverse:
                return reverse_over_reverse(pulled, tuple(xs), tuple(us))
            return jax.jvp(pulled, tuple(xs), tuple(us))[1]

        built = _batched_cache[key] = jax.jit(derivative)
    xs = [jnp.asarray(case.args[i]) for i in diff]
    us = [jnp.asarray(u[i], dtype=x.dtype) for i, x in zip(diff, xs)]
    out = built(xs, jax.tree_util.tree_map(jnp.asarray, ybar), us)
    by_pos = dict(zip(diff, out))
    return tuple(np.asarray(by_pos[i]) if i in by_pos else None for i in range(nargs))



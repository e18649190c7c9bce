"""JAX rules: a `jax.custom_vjp` or `jax.custom_jvp` function as a checker rule, and the JAX device the checks run on.

    @jax.custom_vjp
    def softplus(x):
        return jnp.logaddexp(0.0, x)

    softplus.defvjp(softplus_fwd, softplus_bwd)
    softplus_rule = jax_rule(softplus, arrays(shape=(5,)))

`jax_rule` takes ``fwd`` and ``bwd`` from the function itself (through
`gradguard.engines.jax_engine.rrule_from_custom_vjp`), so every check written for
NumPy rrules applies unchanged; the JAX-only checks (GG204, GG601, GG602)
find the custom_vjp in ``RuleSpec.jax_fn`` and the traceable primal in
``RuleSpec.extra["jax_primal"]``.

Devices. `ensure_device` places JAX on the device named by the
``GRADGUARD_DEVICE`` environment variable (``gradguard check --device``;
"cpu" when unset), once per value. A GPU asked for where JAX sees none raises
`gradguard.engines.errors.PlatformUnavailable`; the runner turns that into the verdict
"error" for each JAX rule (with the message) while NumPy rules still run.

Nothing here imports JAX at module import: `import gradguard` stays JAX-free.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import threading
from typing import Any, Callable, Iterable

from hypothesis.strategies import SearchStrategy

from hypothesis import strategies as st

from gradguard.checker.errors import SpecError
from gradguard.checker.pytree_args import flattening
from gradguard.checker.pytree_outputs import plain_outputs, plain_rule
from gradguard.checker.specs import RuleSpec, build_spec, constant_positions, structures_of, with_kwargs
from gradguard.checker.structure import structured_primal

__all__ = ["jax_rule", "ensure_device", "requested_device", "is_batched_device", "CUSTOM_JVP"]

CUSTOM_JVP = "custom_jvp"  # RuleSpec.extra key: set for a jax.custom_jvp rule (the forward checks GG207, GG208 apply)

DEVICE_VARIABLE = "GRADGUARD_DEVICE"

_device_lock = threading.Lock()
_configured: str | None = None


def requested_device() -> str:
    """The JAX platform asked for: ``GRADGUARD_DEVICE`` ("cpu" or "gpu"), "cpu" when unset."""
    return (os.environ.get(DEVICE_VARIABLE) or "cpu").strip().lower()


def ensure_device() -> str:
    """Load JAX (float64 on) and place it on :func:`requested_device`; returns the device name.

    Raises `gradguard.engines.errors.PlatformUnavailable` when the device does not
    exist here or the name is not a device.
    """
    global _configured
    device = requested_device()
    if _configured == device:
        return device
    from gradguard.engines import jax_engine
    from gradguard.engines.errors import PlatformUnavailable

    if device not in jax_engine.DEVICES:
        raise PlatformUnavailable(f"{DEVICE_VARIABLE}={device!r} names no device JAX can use here: use cpu or gpu.")

    with _device_lock:
        if _configured != device:
            jax_engine.configure(device)
            try:
                _warm_up()
            except Exception as exc:  # noqa: BLE001 - the device is there but runs nothing: no JAX rule can be checked
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                hint = ("Check the installation of JAX's GPU backend (the CUDA toolkit it compiles with), or use "
                        "--device cpu." if device == "gpu" else "Check JAX's installation.")
                raise PlatformUnavailable(
                    f"{device.upper()} requested, and JAX sees it, but JAX cannot run a program on it "
                    f"({type(exc).__name__}: {first}). {hint}"
                ) from exc
            _configured = device
    return device


def _warm_up() -> None:
    """Compile one tiny vjp: JAX's first compilation in a process is slow, and it should not count as a rule's."""
    from gradguard.engines.jax_engine._runtime import load

    jax = load()
    jax.block_until_ready(jax.jit(jax.grad(lambda x: jax.numpy.sin(x) * x))(1.0))


def is_batched_device() -> bool:
    """True where the JAX checks take finite differences batched (vmap over the steps): on a GPU."""
    return requested_device() == "gpu"


def jax_rule(
    fn: Any,
    *arg_specs: SearchStrategy,
    args: SearchStrategy | None = None,
    mutates: Iterable[int] | int = (),
    nondiff: Iterable[int] | int = (),
    name: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    kwargs: dict[str, Any] | None = None,
    unused_cotangent: str = "zeros",
    ignore: Any = None,
    nondiff_outputs: Iterable[int] | int = (),
) -> RuleSpec:
    """Declare a `jax.custom_vjp` or `jax.custom_jvp` function ``fn`` as a rule to check; returns a :class:`RuleSpec`.

    A custom_jvp has no pullback of its own: its pullback is the transpose JAX derives from the jvp rule
    (what ``jax.grad`` runs), so every reverse-mode check judges that, and the forward checks (GG207,
    GG208) judge the jvp rule itself.

    The options are those of `gradguard.checker.rrule`. ``fn``'s ``nondiff_argnums`` are
    added to ``nondiff``; the primal is the function underneath the
    custom_vjp (its own ``jax.numpy`` code), and findings point at its
    definition (the lines through its ``fwd`` and ``bwd`` where they follow it). Every signature ``jax.custom_vjp`` accepts can be declared:
    parameters with defaults may be left without a spec (``f(a, axis=None)`` with
    ``nondiff_argnums=(1,)`` takes one spec, or two with ``constant(...)`` for ``axis``), and
    ``kwargs={"axis": 1}`` passes keyword arguments as JAX resolves them. A pytree argument (a NamedTuple,
    dict, tuple or list of arrays, drawn e.g. by ``st.builds(Point, arrays(...), arrays(...))``) is checked
    leaf by leaf, each leaf an argument named by its path (`gradguard.checker.pytree_args`); pytree outputs
    need nothing (a registered class, such as a flax struct, is read as the dict of its leaves keyed by their
    paths: `gradguard.checker.pytree_outputs`). ``unused_cotangent`` is
    ``"zeros"`` by default: JAX hands an unused output's ``bwd`` zeros, never None. ``ignore`` leaves checks out of
    this rule's runs, and ``nondiff_outputs`` names outputs of a tuple that programs never differentiate, as for
    `rrule`.
    """
    from gradguard.engines.errors import AdapterError
    from gradguard.engines.jax_engine import custom_jvp_parts, custom_vjp_parts, is_custom_jvp

    forward_mode = is_custom_jvp(fn)
    try:
        parts: Any = custom_jvp_parts(fn) if forward_mode else custom_vjp_parts(fn)
    except AdapterError as exc:
        if "custom_vjp-decorated" in str(exc):
            raise SpecError(f"jax_rule: Got {fn!r}, but jax_rule takes a jax.custom_vjp or jax.custom_jvp function "
                            "with its rule defined (defvjp or defjvp).") from None
        raise SpecError(f"jax_rule: {exc}") from None
    if isinstance(nondiff, int) and not isinstance(nondiff, bool):
        nondiff = (nondiff,)
    if not isinstance(nondiff, Iterable) or isinstance(nondiff, (str, bytes)):
        raise SpecError(f"Got nondiff={nondiff!r}, but nondiff must be a tuple of argument positions, e.g. nondiff=(1,).")
    # nondiff_argnums past the declared arguments name parameters left to their defaults (or to kwargs)
    declared = len(arg_specs) if arg_specs else None
    # constant(...) specs are nondiff as build_spec reads them; the adapter must know them too, or JAX's
    # transpose hands back its zeros for them and GG106 read those as a tangent the rule returned
    merged = (*nondiff, *constant_positions(arg_specs),
              *(i for i in parts.nondiff_argnums if declared is None or i < declared))
    # registered pytree outputs (flax structs, netket's Stats) are read as dicts of their leaves by all three
    rule = plain_rule(_adapted(fn, forward_mode, merged))
    primal = plain_outputs(_numpy_primal(parts.fun, parts.nondiff_argnums))
    user = _user_function(parts.fun)
    if user is not parts.fun:  # jax.custom_gradient: the user's function names the rule, its parameters and its lines
        primal.__name__ = primal.__qualname__ = user.__name__
        try:
            primal.__signature__ = inspect.signature(user)  # type: ignore[attr-defined]
        except (TypeError, ValueError):
            pass
    jax_fn, jax_primal = plain_outputs(with_kwargs(fn, kwargs or {})), plain_outputs(with_kwargs(parts.fun, kwargs or {}))
    flat = flattening(parts.fun, arg_specs, args, merged)
    if flat is not None:  # pytree arguments: checked leaf by leaf (see checker.pytree_args)
        if isinstance(mutates, int) and not isinstance(mutates, bool):
            mutates = (mutates,)
        strategy = st.tuples(*arg_specs) if arg_specs else args
        assert strategy is not None
        rule, primal = flat.rule(rule), flat.function(primal)
        jax_fn, jax_primal = flat.function(jax_fn), flat.function(jax_primal)
        arg_specs, args = (), strategy.map(flat.flatten)
        merged, mutates = tuple(flat.flat_positions(merged)), tuple(flat.flat_positions(mutates))
    spec = build_spec(
        rule,
        primal,
        arg_specs,
        args=args,
        mutates=mutates,
        nondiff=merged,
        name=name or (user.__name__ if user is not parts.fun else parts.name),
        rtol=rtol,
        atol=atol,
        kind="jax",
        jax_fn=jax_fn,
        kwargs=kwargs,
        unused_cotangent=unused_cotangent,
        ignore=ignore,
        nondiff_outputs=nondiff_outputs,
    )
    structures = structures_of(arg_specs)
    spec.extra["jax_primal"] = structured_primal(jax_primal, structures) if structures else jax_primal
    if forward_mode:
        spec.extra[CUSTOM_JVP] = True
    spec.module = getattr(user, "__module__", None)
    rules = (parts.jvp,) if forward_mode else (parts.fwd, parts.bwd)
    spec.source_file, spec.source_lines = _source_span(user, *(() if user is not parts.fun else rules))
    return spec


def _user_function(fun: Callable[..., Any]) -> Callable[..., Any]:
    """The function the user wrote under ``fun``: for ``jax.custom_gradient(f)``, a custom_vjp whose function is
    JAX's own ``wrapped_fun`` (its source lies in JAX, its parameters are ``*args``), ``f`` itself, which returns
    ``(value, vjp)`` (rlax's ``clip_gradient``); ``fun`` otherwise."""
    if getattr(fun, "__qualname__", "") != "custom_gradient.<locals>.wrapped_fun":
        return fun
    try:
        inner = inspect.getclosurevars(fun).nonlocals.get("fun")
    except (TypeError, ValueError):
        return fun
    return inner if callable(inner) else fun


def custom_kind(rule: RuleSpec) -> str:
    """"custom_jvp" or "custom_vjp": the decorator of a jax rule's function, for messages that name it."""
    return "custom_jvp" if rule.extra.get(CUSTOM_JVP) else "custom_vjp"


def _adapted(fn: Any, forward_mode: bool, nondiff: Iterable[int]) -> Callable[..., Any]:
    from gradguard.engines.jax_engine import rrule_from_custom_jvp, rrule_from_custom_vjp

    return rrule_from_custom_jvp(fn, tuple(nondiff)) if forward_mode else rrule_from_custom_vjp(fn)


def _numpy_primal(fun: Callable[..., Any], fixed: Iterable[int]) -> Callable[..., Any]:
    """``fun`` returning NumPy for concrete inputs (what the checks compare); traced values pass through.

    Concrete calls are compiled once per (fixed arguments, shapes, dtypes) and checked against eager JAX
    (`gradguard.engines.jax_engine.Compiled`): finite differences call the primal hundreds of times per
    check, and a primal built on `lax.while_loop` or `lax.scan` is traced and compiled again on every eager
    call. The arguments at ``fixed`` (the function's ``nondiff_argnums``, which JAX never traces) are jit's static
    arguments."""
    import numpy as np

    from gradguard.engines.jax_engine import Compiled
    from gradguard.engines.jax_engine._runtime import load

    jax = load()
    compiled = Compiled(fun)
    fixed = frozenset(fixed)

    def leaf(x: Any) -> Any:
        if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
            return np.asarray(x)
        return x

    def as_jax(x: Any) -> Any:
        return jax.numpy.asarray(x) if isinstance(x, np.ndarray) and x.dtype.kind in "biufc" else x

    @functools.wraps(fun)
    def primal(*args: Any, **kwargs: Any) -> Any:
        traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((args, kwargs)))
        if traced:
            return jax.tree_util.tree_map(leaf, fun(*args, **kwargs))
        # JAX code gets JAX arrays, as in every program that calls it (`x.at[0].set(...)` on an input): the eager
        # run that `Compiled` checks its compiled one against would otherwise hand it the NumPy arrays themselves
        given = tuple(a if i in fixed else jax.tree_util.tree_map(as_jax, a) for i, a in enumerate(args))
        return jax.tree_util.tree_map(leaf, compiled(given, fixed, kwargs))

    primal.compiled = compiled  # type: ignore[attr-defined]
    return primal


def _source_span(primal: Callable[..., Any], *rules: Callable[..., Any]) -> tuple[str | None, tuple[int, int] | None]:
    """The primal's file, and the lines from its jvp, fwd or bwd to the last of them, where they are defined there
    after the primal or right above it (nothing but blank lines and comments between).

    A part defined further up is often shared (one straight-through jvp that a helper attaches to floor and round
    alike): a span from there gave every rule of the module one location."""
    spans = []
    for fn in (primal, *rules):
        try:
            fn = inspect.unwrap(fn)
            where = inspect.getsourcefile(fn)
            lines, start = inspect.getsourcelines(fn)
        except (TypeError, OSError):
            spans.append(None)
            continue
        spans.append((where, start, start + len(lines) - 1))
    if spans[0] is None:  # no source for the primal: the first part that has one
        found = next((s for s in spans if s is not None), None)
        return (None, None) if found is None else (found[0], (found[1], found[2]))
    path, first, last = spans[0]
    parts = [span[1:] for span in spans[1:] if span is not None and span[0] == path]
    for start, end in parts:
        if start >= first:
            last = max(last, end)
    for start, end in sorted((p for p in parts if p[0] < first), key=lambda p: -p[1]):
        between = (linecache.getline(path, n).strip() for n in range(end + 1, first))
        if all(not text or text.startswith("#") for text in between):
            first = min(first, start)
    return path, (first, last)

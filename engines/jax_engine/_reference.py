"""Independent reference derivatives from JAX for primals written in `jax.numpy`.

`reference_vjp` is the GG203 reference: `jax.vjp` of the primal itself (never
of the rule under test). `second_order_vjp` is the GG204 quantity: the
derivative of the pullback along a direction in input space, computed as JAX
forward mode over JAX reverse mode; the checker compares it with finite
differences of the pullback. `second_order_vjp_reverse` is the same quantity by
reverse over reverse, for a rule JAX's forward mode cannot enter.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from gradguard.engines.errors import AdapterError
from gradguard.engines.jax_engine._runtime import cotangent_for, load

__all__ = ["reference_vjp", "second_order_vjp", "second_order_vjp_reverse"]


def reference_vjp(
    primal: Callable[..., Any], args: Sequence[Any], cotangent: Any, *, nondiff: Sequence[int] = ()
) -> tuple[Any, ...]:
    """Tangents ``J(args)^T cotangent`` of ``primal`` by `jax.vjp` (float64); None at ``nondiff`` positions.

    Raises `AdapterError` when JAX cannot trace ``primal`` (e.g. it calls
    NumPy on a traced value).
    """
    jax = load()
    call, diff = _partial(primal, args, nondiff)
    try:
        out, vjp = jax.vjp(call, *[jax.numpy.asarray(args[i]) for i in diff])
        grads = vjp(cotangent_for(cotangent, out))
    except jax.errors.JAXTypeError as exc:
        raise _untraceable(exc) from exc
    return _spread(grads, diff, len(args))


def second_order_vjp(
    fn: Callable[..., Any],
    args: Sequence[Any],
    cotangent: Any,
    direction: Sequence[Any],
    *,
    nondiff: Sequence[int] = (),
) -> tuple[Any, ...]:
    """``d/dt [vjp(fn at args + t*direction)(cotangent)]`` at t=0, by `jax.jvp` of `jax.vjp`.

    ``fn`` is a JAX-traceable function or a `jax.custom_vjp` (then its
    ``bwd`` is what gets differentiated). ``direction`` has one entry per
    argument (ignored at ``nondiff`` positions). Returns one array per
    argument, None at ``nondiff`` positions.
    """
    jax = load()
    diff, primals, tangents, pulled = _pullback_along(fn, args, cotangent, direction, nondiff)
    try:
        _, dgrads = jax.jvp(pulled, primals, tangents)
    except jax.errors.JAXTypeError as exc:
        raise _untraceable(exc) from exc
    return _spread(dgrads, diff, len(args))


def _pullback_along(fn: Callable[..., Any], args: Sequence[Any], cotangent: Any, direction: Sequence[Any],
                    nondiff: Sequence[int]) -> tuple[list[int], list[Any], list[Any], Callable[..., Any]]:
    """What both second-order derivatives differentiate: the differentiable positions, their primals and directions as
    JAX arrays, and the pullback at ``cotangent`` as a function of the primals."""
    jax = load()
    jnp = jax.numpy
    if len(direction) != len(args):
        raise AdapterError(
            f"direction has {len(direction)} entries, but there are {len(args)} arguments: give one per argument."
        )
    call, diff = _partial(fn, args, nondiff)
    primals = [jnp.asarray(args[i]) for i in diff]
    tangents = [jnp.asarray(direction[i], dtype=p.dtype) for i, p in zip(diff, primals)]

    def pulled(*xs: Any) -> Any:
        out, vjp = jax.vjp(call, *xs)
        return vjp(cotangent_for(cotangent, out))

    return diff, primals, tangents, pulled


REVERSE_MAX_SIZE = 4096  # the most tangent elements `second_order_vjp_reverse` takes a Jacobian row for


def second_order_vjp_reverse(
    fn: Callable[..., Any],
    args: Sequence[Any],
    cotangent: Any,
    direction: Sequence[Any],
    *,
    nondiff: Sequence[int] = (),
) -> tuple[Any, ...]:
    """`second_order_vjp`'s derivative by reverse over reverse: the Jacobian of the pullback (`jax.jacrev`, one reverse
    pass per element of the tangents it returns) contracted with ``direction``. For a rule JAX's forward mode cannot
    enter while its reverse mode can (a fwd that calls its own custom_vjp: jaxls's differentiable solves, whose grad of
    grad is right). Real arguments of at most `REVERSE_MAX_SIZE` elements in all; `AdapterError` otherwise."""
    jax = load()
    diff, primals, tangents, pulled = _pullback_along(fn, args, cotangent, direction, nondiff)
    try:
        dgrads = reverse_over_reverse(pulled, primals, tangents)
    except jax.errors.JAXTypeError as exc:
        raise _untraceable(exc) from exc
    return _spread(dgrads, diff, len(args))


def reverse_over_reverse(pulled: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any]) -> list[Any]:
    """The derivative of ``pulled`` (the pullback as a function of the arguments: one tangent per argument) along
    ``tangents``, by its Jacobian from `jax.jacrev` (reverse over reverse), traceable under jit."""
    jax = load()
    check_reverse_size(primals)
    jac = jax.jacrev(pulled, argnums=tuple(range(len(primals))))(*primals)  # jac[i][j]: tangent i by argument j
    return [sum(jax.numpy.tensordot(jac[i][j], t, axes=t.ndim) for j, t in enumerate(tangents))
            for i in range(len(primals))]


def check_reverse_size(primals: Sequence[Any]) -> None:
    """`AdapterError` where `reverse_over_reverse` does not apply: a complex argument (its Jacobian needs holomorphy),
    or more than `REVERSE_MAX_SIZE` argument elements in all (a reverse pass each)."""
    if any(np.iscomplexobj(p) for p in primals):
        raise AdapterError("reverse over reverse takes real arguments only (a complex Jacobian needs holomorphy)")
    if sum(int(np.size(p)) for p in primals) > REVERSE_MAX_SIZE:
        raise AdapterError(f"reverse over reverse takes at most {REVERSE_MAX_SIZE} argument elements in all")


def _partial(
    fn: Callable[..., Any], args: Sequence[Any], nondiff: Sequence[int]
) -> tuple[Callable[..., Any], list[int]]:
    for i in nondiff:
        if not 0 <= i < len(args):
            raise AdapterError(f"Got nondiff={tuple(nondiff)!r}, but there are only {len(args)} arguments.")
    diff = [i for i in range(len(args)) if i not in nondiff]

    def call(*xs: Any) -> Any:
        full = list(args)
        for i, x in zip(diff, xs):
            full[i] = x
        return fn(*full)

    return call, diff


def _spread(grads: Sequence[Any], diff: list[int], nargs: int) -> tuple[Any, ...]:
    by_pos = dict(zip(diff, grads))
    return tuple(np.asarray(by_pos[i]) if i in by_pos else None for i in range(nargs))


def _untraceable(exc: BaseException) -> AdapterError:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return AdapterError(
        f"primal is not traceable by JAX: {reason} Write it with jax.numpy (not numpy) to get a JAX reference gradient."
    )

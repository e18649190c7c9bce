"""Structured domains: matrices that are symmetric, positive definite, triangular, diagonal or rotations.

Many real rules (Cholesky, ``eigh``, triangular solves) are defined only on structured matrices and
return gradients projected onto that structure, as ChainRules' ``ProjectTo`` does: for a symmetric
input, any gradient with the right symmetric part is right. Checked with generic directions and
element-by-element comparisons, such a rule looks wrong although it follows a convention.

``arrays(shape=(n, n), structure="symmetric")`` declares it. The checker then reads the rule through the
linear projection ``P`` onto the structure's tangent space (``P`` is self-adjoint and ``P(P(a)) = P(a)``):
it checks ``x -> primal(P(x))`` and the rule ``x -> rule(P(x))`` with pullback ``ybar -> P(pullback(ybar))``.
On the drawn inputs, which already have the structure, ``P`` is the identity and hands the rule the very
same array (mutation and aliasing checks still see it); finite differences along a direction ``v`` move the
input along ``P(v)``, inside the structure; and a tangent is compared only by its projection, so a rule
may return the symmetric gradient or one triangle of it, whichever its convention.

=============  =======================================  ==============================================
structure      inputs drawn                             tangent space (``P``)
=============  =======================================  ==============================================
symmetric      ``(a + a.T) / 2``                        symmetric part
psd            ``a @ a.H / n + I`` (positive definite)   Hermitian part (an open cone in the Hermitian)
lower, upper   ``tril(a)``, ``triu(a)``                 the same triangle
diagonal       ``diag(diag(a))``                        the diagonal
rotation       the Cayley transform of ``a``'s skew      ``R skew(R.T g)`` at the rotation ``R``
               part (in SO(n); the identity for 0)      (the tangent space of SO(n) there)
=============  =======================================  ==============================================

Arrays with more than two axes are stacks of matrices (the last two axes).

Rotations are a curved domain, not a linear one: its ``P`` is the Newton-Schulz step
``x -> x (3 I - x.T x) / 2``, which is the identity on SO(n) and whose derivative there is the orthogonal
projection onto the tangent space, ``v -> R skew(R.T v)`` (so finite differences along any direction measure
the derivative along its tangent part, to second order), and a tangent is pulled back through that step's
exact adjoint, ``g -> (3 g - g x.T x - x g.T x - x x.T g) / 2``, which is ``R skew(R.T g)`` at a rotation:
a Lie-group library's Riemannian gradient (theseus' SO(3) ``Log`` returns ``R hat(w)``) is right as it is,
and a Euclidean one is judged by its tangent part.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import numpy as np

__all__ = ["STRUCTURES", "project", "make_structured", "project_tangent", "structured_rule", "structured_primal"]

STRUCTURES = ("symmetric", "psd", "lower", "upper", "diagonal", "rotation")


def _projection(kind: str, xp: Any) -> Callable[[Any], Any]:
    """``P`` for ``kind`` written against the array namespace ``xp`` (NumPy, or jax.numpy when the JAX
    reference traces the primal)."""
    if kind == "symmetric":
        return lambda a: (a + xp.swapaxes(a, -1, -2)) / 2
    if kind == "psd":
        return lambda a: (a + xp.swapaxes(a, -1, -2).conj()) / 2
    if kind == "rotation":  # the Newton-Schulz step (module docstring)
        return lambda a: (3 * a - a @ xp.swapaxes(a, -1, -2) @ a) / 2
    if kind == "lower":
        return xp.tril
    if kind == "upper":
        return xp.triu
    return lambda a: a * xp.eye(a.shape[-1], dtype=bool)


def _jax_array(value: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(value, jax.Array)


def project(kind: str, value: Any) -> Any:
    """``value`` projected onto ``kind``'s tangent space (for an argument: onto the structure); ``value`` itself
    (the same object) when it already lies there, so identity and aliasing survive; ``None`` and non-arrays
    pass through."""
    if _jax_array(value) and value.ndim >= 2:  # traced by the JAX reference (GG203): no equality test
        return _projection(kind, sys.modules["jax.numpy"])(value)
    if not isinstance(value, np.ndarray) or value.ndim < 2:
        return value
    projected = _projection(kind, np)(value)
    return value if _same(kind, projected, value) else projected.astype(value.dtype, copy=False)


def _same(kind: str, projected: np.ndarray, value: np.ndarray) -> bool:
    """Whether ``value`` already lies in the structure: bit for bit for the linear ones; within rounding for
    rotations, which no floating-point matrix is exactly (a drawn rotation is orthogonal to a few ulps)."""
    if kind != "rotation":
        return np.array_equal(projected, value)
    with np.errstate(all="ignore"):
        gap = np.max(np.abs(projected - value), initial=0.0)
        size = np.max(np.abs(value), initial=0.0)
    return bool(gap <= 16 * value.shape[-1] * np.finfo(value.dtype).eps * max(float(size), 1.0))


def project_tangent(kind: str, tangent: Any, arg: Any) -> Any:
    """A pullback's tangent for an argument ``arg`` declared ``kind``, pulled back through ``P`` at ``arg``:
    the projection onto the tangent space for the linear structures; for rotations the adjoint of the
    Newton-Schulz step's derivative at ``arg`` (``R skew(R.T g)`` at a rotation ``R``). ``tangent`` itself where
    that changes nothing (within rounding for rotations)."""
    if kind != "rotation":
        return project(kind, tangent)
    if not isinstance(tangent, np.ndarray) or tangent.ndim < 2 or not isinstance(arg, np.ndarray) \
            or tangent.shape != arg.shape:
        return tangent
    x, g = arg.astype(np.result_type(arg, tangent), copy=False), tangent
    xt, gt = np.swapaxes(x, -1, -2), np.swapaxes(g, -1, -2)
    pulled = (3 * g - g @ (xt @ x) - x @ gt @ x - (x @ xt) @ g) / 2
    return tangent if _same(kind, pulled, tangent) else pulled.astype(tangent.dtype, copy=False)


def make_structured(kind: str, a: np.ndarray) -> np.ndarray:
    """A drawn array turned into an input with the structure (see the table above)."""
    if kind == "rotation":  # Cayley: (I - S)^-1 (I + S) is in SO(n) for every skew S, and I for S = 0
        skew = (a - np.swapaxes(a, -1, -2)) / 2
        eye = np.broadcast_to(np.eye(a.shape[-1], dtype=a.dtype), a.shape)
        return np.linalg.solve(eye - skew, eye + skew).astype(a.dtype)
    if kind == "psd":
        n = a.shape[-1]
        eye = np.eye(n, dtype=a.dtype)
        return (a @ np.swapaxes(a, -1, -2).conj() / max(n, 1) + eye).astype(a.dtype)
    return _projection(kind, np)(a).astype(a.dtype)


def _project_args(structures: dict[int, str], args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(project(structures[i], a) if i in structures else a for i, a in enumerate(args))


def structured_primal(primal: Callable[..., Any], structures: dict[int, str]) -> Callable[..., Any]:
    """``x -> primal(P(x))``."""

    @functools.wraps(primal)
    def on_structure(*args: Any) -> Any:
        return primal(*_project_args(structures, args))

    return on_structure


def structured_rule(rule: Callable[..., Any], structures: dict[int, str]) -> Callable[..., Any]:
    """``x -> rule(P(x))`` with pullback ``ybar -> DP(x)^T pullback(ybar)`` (``P(pullback(ybar))`` for the linear
    structures; an output that is not a pair is returned as it is: GG101 reports it)."""

    @functools.wraps(rule)
    def on_structure(*args: Any) -> Any:
        result = rule(*_project_args(structures, args))
        if not (isinstance(result, tuple) and len(result) == 2 and callable(result[1])):
            return result
        y, pullback = result

        @functools.wraps(pullback)
        def projected_pullback(ybar: Any) -> Any:
            tangents = pullback(ybar)
            if not isinstance(tangents, (tuple, list)):
                return tangents
            out = [project_tangent(structures[i], t, args[i]) if i in structures and i < len(args) else t
                   for i, t in enumerate(tangents)]
            return type(tangents)(out) if isinstance(tangents, list) else tuple(out)

        return y, projected_pullback

    return on_structure

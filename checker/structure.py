"""Structured domains: matrices that are symmetric, positive definite, triangular, diagonal or rotations, and unit
vectors.

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
unit           ``a / |a|`` along the last axis (a unit   ``g - q (q . g)`` at the unit vector ``q``
               quaternion, a direction; ``e0`` for 0)    (the tangent space of the sphere there)
=============  =======================================  ==============================================

Arrays with more than two axes are stacks of matrices (the last two axes); for ``unit``, arrays with more
than one axis are stacks of vectors (the last axis).

Rotations are a curved domain, not a linear one: its ``P`` is the Newton-Schulz step
``x -> x (3 I - x.T x) / 2``, which is the identity on SO(n) and whose derivative there is the orthogonal
projection onto the tangent space, ``v -> R skew(R.T v)`` (so finite differences along any direction measure
the derivative along its tangent part, to second order), and a tangent is pulled back through that step's
exact adjoint, ``g -> (3 g - g x.T x - x g.T x - x x.T g) / 2``, which is ``R skew(R.T g)`` at a rotation:
a Lie-group library's Riemannian gradient (theseus' SO(3) ``Log`` returns ``R hat(w)``) is right as it is,
and a Euclidean one is judged by its tangent part.

Unit vectors are the same construction on the sphere: ``P`` is the step ``q -> q (3 - |q|^2) / 2`` along the
last axis, the identity on the sphere, whose derivative at a unit ``q`` is ``v -> v - q (q . v)``, the
orthogonal projection onto the tangent space; its exact adjoint at any ``q``, ``g -> g (3 - |q|^2) / 2 - q (q . g)``,
is that projection at a unit ``q``. A rule that returns the gradient projected on the tangent space (jax-md's
quaternion rotation: ``dq - (q . dq) q``) is right as it is, and a Euclidean one is judged by its tangent part.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import numpy as np

__all__ = ["STRUCTURES", "project", "project_tensor", "make_structured", "project_tangent", "structured_rule",
           "structured_primal"]

STRUCTURES = ("symmetric", "psd", "lower", "upper", "diagonal", "rotation", "unit")
CURVED = ("rotation", "unit")  # structures whose projection depends on the point (module docstring)


def min_ndim(kind: str) -> int:
    """The fewest axes an array of ``kind`` has: a vector for ``unit``, a matrix for the others."""
    return 1 if kind == "unit" else 2


def _swap(a: Any, xp: Any = np) -> Any:
    """The last two axes swapped, with ``xp.transpose``: the one operation NumPy, jax.numpy and the tape's traced
    arrays (through NumPy's dispatch) all run."""
    axes = list(range(a.ndim))
    axes[-2:] = axes[-1], axes[-2]
    return xp.transpose(a, axes)


def _projection(kind: str, xp: Any) -> Callable[[Any], Any]:
    """``P`` for ``kind`` written against the array namespace ``xp`` (NumPy, or jax.numpy when the JAX
    reference traces the primal; NumPy for the tape's traced arrays too, but for the triangles:
    `_traced_projection`)."""
    if kind == "symmetric":
        return lambda a: (a + _swap(a, xp)) / 2
    if kind == "psd":
        return lambda a: (a + _swap(a, xp).conj()) / 2
    if kind == "rotation":  # the Newton-Schulz step (module docstring)
        return lambda a: (3 * a - a @ _swap(a, xp) @ a) / 2
    if kind == "unit":  # the same step on the sphere (module docstring)
        return lambda a: a * (3 - xp.sum(a * a, axis=-1, keepdims=True)) / 2
    if kind == "lower":
        return xp.tril
    if kind == "upper":
        return xp.triu
    return lambda a: a * xp.eye(a.shape[-1], dtype=bool)


def _curved_adjoint(kind: str, g: Any, x: Any) -> Any:
    """The adjoint of a curved structure's step at ``x``, applied to ``g`` (module docstring), in operations NumPy and
    the tape's traced arrays both run."""
    if kind == "unit":
        return g * (3 - np.sum(x * x, axis=-1, keepdims=True)) / 2 - x * np.sum(x * g, axis=-1, keepdims=True)
    return (3 * g - g @ (_swap(x) @ x) - x @ _swap(g) @ x - (x @ _swap(x)) @ g) / 2


def project_tensor(kind: str, t: Any) -> Any:
    """``P(t)`` for a PyTorch tensor, in differentiable tensor operations: the safety matrix's torch column runs a
    torch rule as ``Function.apply(P(x))``, so that autograd pulls the Function's gradient back through ``P`` as
    the checker's own reading of the rule does (``structured_rule``). Its value is :func:`project`'s, bit for bit
    (``t`` itself where it lies on the structure): the formula moves a unit row that has norm 1 to rounding by an
    ulp, and transformers' YOSO, ``acos`` of two such rows' inner product, read 1 + 2.2e-16 (NaN) in the plain run
    and 1 - 1.1e-16 in the torch column, a false GG503."""
    import torch

    if t.dim() < min_ndim(kind):
        return t
    formula = _projection_tensor(kind, t)
    exact = torch.as_tensor(np.asarray(project(kind, t.detach().cpu().numpy())), dtype=t.dtype, device=t.device)
    return formula + (exact - formula.detach())  # exact: the two differ by rounding, so the sum is `exact` itself


def _projection_tensor(kind: str, t: Any) -> Any:
    if kind == "symmetric":
        return (t + t.mT) / 2
    if kind == "psd":
        return (t + t.mT.conj()) / 2
    if kind == "rotation":
        return (3 * t - t @ t.mT @ t) / 2
    if kind == "unit":
        return t * (3 - (t * t).sum(-1, keepdim=True)) / 2
    if kind == "lower":
        return t.tril()
    if kind == "upper":
        return t.triu()
    return t.diagonal(dim1=-2, dim2=-1).diag_embed()


def _jax_array(value: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(value, jax.Array)


def _traced(value: Any) -> bool:
    """Whether ``value`` is one of the tape's traced arrays: GG204 runs a NumPy rule and its pullback on them, and
    differentiates them against finite differences of the same rule, ``P`` included."""
    tape = sys.modules.get("gradguard.engines.tape._tape")
    return tape is not None and isinstance(value, tape.Tracked)


def _traced_projection(kind: str, a: Any) -> Any:
    """``P(a)`` for a traced array: `_projection` on NumPy's dispatch, but a triangle as a product with a constant
    mask (the tape has no rule for tril and triu; the same values, but for the sign of a zero)."""
    if kind not in ("lower", "upper"):
        return _projection(kind, np)(a)
    n = a.shape[-1]
    return a * {"lower": np.tril, "upper": np.triu}[kind](np.ones((n, n)))


def project(kind: str, value: Any) -> Any:
    """``value`` projected onto ``kind``'s tangent space (for an argument: onto the structure); ``value`` itself
    (the same object) when it already lies there, so identity and aliasing survive; ``None`` and non-arrays
    pass through."""
    if _jax_array(value) and value.ndim >= min_ndim(kind):  # traced by the JAX reference (GG203): no equality test
        return _projection(kind, sys.modules["jax.numpy"])(value)
    if _traced(value) and value.ndim >= min_ndim(kind):  # GG204's tape: no equality test either
        return _traced_projection(kind, value)
    if not isinstance(value, np.ndarray) or value.ndim < min_ndim(kind):
        return value
    projected = _projection(kind, np)(value)
    return value if _same(kind, projected, value) else projected.astype(value.dtype, copy=False)


def _same(kind: str, projected: np.ndarray, value: np.ndarray) -> bool:
    """Whether ``value`` already lies in the structure: bit for bit for the linear ones; within rounding for
    rotations and unit vectors, which no floating-point array is exactly (a drawn rotation is orthogonal to a few
    ulps, a drawn unit vector has norm 1 to a few ulps)."""
    if kind not in CURVED:
        return np.array_equal(projected, value)
    with np.errstate(all="ignore"):
        gap = np.max(np.abs(projected - value), initial=0.0)
        size = np.max(np.abs(value), initial=0.0)
    return bool(gap <= 16 * value.shape[-1] * np.finfo(value.dtype).eps * max(float(size), 1.0))


def project_tangent(kind: str, tangent: Any, arg: Any) -> Any:
    """A pullback's tangent for an argument ``arg`` declared ``kind``, pulled back through ``P`` at ``arg``:
    the projection onto the tangent space for the linear structures; for rotations and unit vectors the adjoint of
    the step's derivative at ``arg`` (``R skew(R.T g)`` at a rotation ``R``, ``g - q (q . g)`` at a unit vector
    ``q``). ``tangent`` itself where that changes nothing (within rounding for the curved ones)."""
    if (_traced(tangent) or _traced(arg)) and np.ndim(tangent) >= min_ndim(kind) \
            and np.shape(tangent) == np.shape(arg):
        return _curved_adjoint(kind, tangent, arg) if kind in CURVED else _traced_projection(kind, tangent)
    if kind not in CURVED:
        return project(kind, tangent)
    if not isinstance(tangent, np.ndarray) or tangent.ndim < min_ndim(kind) or not isinstance(arg, np.ndarray) \
            or tangent.shape != arg.shape:
        return tangent
    pulled = _curved_adjoint(kind, tangent, arg.astype(np.result_type(arg, tangent), copy=False))
    return tangent if _same(kind, pulled, tangent) else pulled.astype(tangent.dtype, copy=False)


def make_structured(kind: str, a: np.ndarray) -> np.ndarray:
    """A drawn array turned into an input with the structure (see the table above)."""
    if kind == "unit":  # scaled by its largest element first, so that no tiny vector's squares underflow
        big = np.max(np.abs(a), axis=-1, keepdims=True)
        with np.errstate(all="ignore"):
            scaled = np.where(big > 0, a / np.where(big > 0, big, 1), 0)
            unit = scaled / np.linalg.norm(scaled, axis=-1, keepdims=True)
        first = np.zeros(a.shape[-1], dtype=a.dtype)
        first[:1] = 1
        return np.where(big > 0, unit, first).astype(a.dtype)
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
    def on_structure(*args: Any, **kwargs: Any) -> Any:  # kwargs: the rule's fixed keyword arguments (specs.with_kwargs)
        return primal(*_project_args(structures, args), **kwargs)

    return on_structure


def structured_rule(rule: Callable[..., Any], structures: dict[int, str]) -> Callable[..., Any]:
    """``x -> rule(P(x))`` with pullback ``ybar -> DP(x)^T pullback(ybar)`` (``P(pullback(ybar))`` for the linear
    structures; an output that is not a pair is returned as it is: GG101 reports it)."""

    @functools.wraps(rule)
    def on_structure(*args: Any, **kwargs: Any) -> Any:
        result = rule(*_project_args(structures, args), **kwargs)
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

"""The namespaces a context program is written against: plain NumPy, the tape, JAX (PyTorch's is in
`_torch_engine`).

A context is written once, as ``program(ops, consts, *inputs)``, using only
``ops.xp`` (a NumPy-like module: ``numpy``, the tape's ``tnp`` or
``jax.numpy``), array methods every engine shares (``x.T``, ``x[::2]``) and
``ops.call`` (the rule as that engine sees it: the primal under NumPy, a tape
primitive, a `jax.custom_vjp`). `loss` and `inner` are the random linear
functionals the contexts contract outputs and inputs with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np

from gradguard.checker.trees import is_leaf, leaves

__all__ = ["Ops", "LossWeights", "numpy_ops", "tape_ops", "jax_ops"]


class LossWeights(NamedTuple):
    """What `Ops.loss` contracts an output with: random weights, and the scale ``s`` of each leaf's
    nonlinearity ``y + s sin(y / s) / 2`` (None where the weight is None)."""

    weights: Any
    scales: Any


@dataclass(frozen=True)
class Ops:
    """One engine's view of a context: its array namespace and the rule as a callable."""

    name: str
    xp: Any
    call: Callable[..., Any]
    ndim: Callable[[Any], int] = np.ndim  # the number of axes of one of its arrays

    def loss(self, y: Any, c: Any) -> Any:
        """``sum(c * (y + s sin(y / s) / 2))`` over the leaves of ``y`` that have a weight in ``c``: a
        nonlinearity whose slope stays in [1/2, 3/2] (tanh would saturate on large outputs, and every
        cotangent would vanish), then a random linear functional; real part for complex outputs. ``c`` is a
        `LossWeights` (weights and each leaf's scale ``s``: 1 for moderate outputs, so that the loss is
        ``y + sin(y) / 2`` exactly, wider for large ones) or plain weights (``s = 1``)."""
        weights, scales = (c.weights, c.scales) if isinstance(c, LossWeights) else (c, None)
        total: Any = 0.0
        for k, (yk, ck) in enumerate(zip(_leaves(y), _leaves(weights))):
            if ck is not None:
                sk = 1.0 if scales is None else _leaves(scales)[k]
                bent = self.xp.add(yk, self.xp.multiply(self.xp.sin(self.xp.divide(yk, sk)), self.xp.multiply(sk, 0.5)))
                total = total + self._real_sum(self.xp.multiply(ck, bent), ck)
        return total

    def linear(self, y: Any, c: Any) -> Any:
        """``sum(<c_k, y_k>)`` over the leaves of ``y`` that have a weight in ``c``."""
        total: Any = 0.0
        for yk, ck in zip(_leaves(y), _leaves(c)):
            if ck is not None:
                total = total + self.inner(ck, yk)
        return total

    def inner(self, c: Any, x: Any) -> Any:
        """The linear functional ``<c, x>`` (real part for complex values)."""
        return self._real_sum(self.xp.multiply(c, x), c)

    def square(self, x: Any) -> Any:
        """``<x, x>`` through an operation whose pullback captures ``x`` by reference: `dot` on the flattened
        array (a view, so a later in-place change of ``x`` is what the pullback reads), ``x * x`` for a scalar."""
        if self.ndim(x) == 0:
            return self._real_sum(self.xp.multiply(x, x), x)
        flat = x if self.ndim(x) == 1 else self.xp.reshape(x, (-1,))
        y = self.xp.dot(flat, flat)
        return self.xp.real(y) if _is_complex(x) else y

    def distinct(self, x: Any) -> Any:
        """A new array of ``x``'s values that its engine differentiates as ``x`` itself (``x * 1``): what an aliasing
        context's twin passes in the second slot, so that the rule sees two arrays where it saw one."""
        return self.xp.multiply(x, 1)

    def contiguous(self, x: Any) -> Any:
        """A new C-ordered array of ``x``'s values that its engine differentiates as ``x`` itself: what a view context's
        twin passes where the program passes a view. JAX arrays have no memory order: ``x`` as it is."""
        to_c = getattr(self.xp, "ascontiguousarray", None)
        return x if to_c is None else to_c(x)

    def _real_sum(self, v: Any, like: Any) -> Any:
        s = self.xp.sum(v)
        return self.xp.real(s) if _is_complex(like) or _is_complex(v) else s


def _is_complex(x: Any) -> bool:
    dt = getattr(x, "dtype", None)
    if dt is None:
        return isinstance(x, complex)
    if getattr(dt, "is_complex", None) is not None and not isinstance(dt, np.dtype):
        return bool(dt.is_complex)  # a PyTorch dtype
    return np.dtype(dt).kind == "c"


def _leaves(tree: Any) -> list[Any]:
    return [tree] if is_leaf(tree) else leaves(tree)


def numpy_ops(primal: Callable[..., Any]) -> Ops:
    """The program as users run it: the rule's primal on plain arrays (the ground truth's program)."""
    return Ops("numpy", np, primal)


def tape_ops(primitive: Callable[..., Any]) -> Ops:
    from gradguard.engines.tape import tnp

    return Ops("tape", tnp, primitive)


def jax_ops(adapted: Callable[..., Any]) -> Ops:
    import jax.numpy as jnp

    return Ops("jax", jnp, adapted)

"""The built-in rules, as data: one `defvjp` line per operation.

Each rule is ``(forward, vjp, reads)``. ``vjp(g, ans, *args, **static)``
returns one tangent per argument (None = zero), following the ChainRules
convention for complex numbers: the pullback is the conjugate transpose, so
for ``y = x * w`` the tangent of ``x`` is ``g * conj(w)``. ``reads`` names what
the pullback reads by value (argument positions, ``"ans"`` for the output);
watch mode fingerprints exactly those arrays. Arguments a rule only needs
the shape of are still held by reference, but their mutation cannot change
the gradient, so they are not watched.

Every broadcasting rule wraps its tangents in the one `unbroadcast` helper.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

__all__ = ["Rule", "RULES", "defvjp", "unbroadcast"]

cj = np.conj


class Rule(NamedTuple):
    forward: Callable[..., Any]
    vjp: Callable[..., tuple]
    reads: tuple[int | str, ...]


RULES: dict[str, Rule] = {}


def defvjp(name: str, forward: Callable[..., Any], vjp: Callable[..., tuple], reads: tuple[int | str, ...] = ()) -> None:
    """Register the rule ``name``: ``forward(*args, **static)`` and ``vjp(g, ans, *args, **static)``."""
    RULES[name] = Rule(forward, vjp, tuple(reads))


def unbroadcast(g: Any, target: Any) -> Any:
    """Sum the cotangent ``g`` down to ``target``'s shape, undoing NumPy broadcasting."""
    shape = np.shape(target)
    lead = np.ndim(g) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and np.shape(g)[lead + i] != 1)
    if axes:
        g = np.sum(g, axis=axes, keepdims=True).reshape(shape)
    return g


def _unreduce(g: Any, x: Any, axis: Any, keepdims: bool) -> np.ndarray:
    """Undo a reduction: broadcast the cotangent of ``sum(x, axis)`` back to ``x``'s shape."""
    if axis is not None and not keepdims:
        g = np.expand_dims(g, axis)
    return np.broadcast_to(g, np.shape(x)).copy()


def _scatter(g: Any, x: Any, index: Any) -> np.ndarray:
    """The tangent of ``x[index]``: zeros with ``g`` added at ``index`` (repeated indices accumulate)."""
    out = np.zeros(np.shape(x), np.result_type(x, g))
    np.add.at(out, index, g)
    return out


def _balanced(x: Any, other: Any, ans: Any) -> Any:
    """Where ``x`` won a max: 1, or 0.5 on a tie (JAX's convention)."""
    return (x == ans) / (1.0 + (other == ans))


def _matmul_vjp(g: Any, ans: Any, a: Any, b: Any) -> tuple:
    """``a @ b`` with NumPy's rules for 1-d operands and batch broadcasting."""
    a2 = a[None, :] if np.ndim(a) == 1 else a
    b2 = b[:, None] if np.ndim(b) == 1 else b
    g2 = np.asarray(g)[..., None] if np.ndim(b) == 1 else np.asarray(g)
    g2 = g2[..., None, :] if np.ndim(a) == 1 else g2
    ga = g2 @ cj(np.swapaxes(b2, -1, -2))
    gb = cj(np.swapaxes(a2, -1, -2)) @ g2
    ga = ga[..., 0, :] if np.ndim(a) == 1 else ga
    gb = gb[..., 0] if np.ndim(b) == 1 else gb
    return unbroadcast(ga, a), unbroadcast(gb, b)


def _mul_vjp(g: Any, ans: Any, x: Any, y: Any) -> tuple:
    return unbroadcast(g * cj(y), x), unbroadcast(g * cj(x), y)


def _dot_vjp(g: Any, ans: Any, x: Any, y: Any) -> tuple:
    return _mul_vjp(g, ans, x, y) if np.ndim(x) == 0 or np.ndim(y) == 0 else _matmul_vjp(g, ans, x, y)


# fmt: off
defvjp("add", np.add, lambda g, ans, x, y: (unbroadcast(g, x), unbroadcast(g, y)))
defvjp("subtract", np.subtract, lambda g, ans, x, y: (unbroadcast(g, x), unbroadcast(-g, y)))
defvjp("multiply", np.multiply, _mul_vjp, reads=(0, 1))
# -x / y**2 as (x / y) / y: y**2 overflows from |y| = 1.3e154 (numpy-ml's softplus gradient exp(z) / (exp(z) + 1) at
# z = 360, whose derivative is 0, came out 1) and underflows below 1e-154, where the quotient itself is finite
defvjp("divide", np.true_divide, lambda g, ans, x, y: (unbroadcast(g / cj(y), x), unbroadcast(-g * cj(x / y / y), y)), reads=(0, 1))
defvjp("power", np.power, lambda g, ans, x, y: (unbroadcast(g * cj(y * x ** (y - 1)), x),
                                                unbroadcast(g * cj(np.log(np.where(x == 0, 1, x)) * ans), y)), reads=(0, 1, "ans"))
defvjp("negative", np.negative, lambda g, ans, x: (-g,))
defvjp("exp", np.exp, lambda g, ans, x: (g * cj(ans),), reads=("ans",))
defvjp("log", np.log, lambda g, ans, x: (g / cj(x),), reads=(0,))
defvjp("sin", np.sin, lambda g, ans, x: (g * cj(np.cos(x)),), reads=(0,))
defvjp("cos", np.cos, lambda g, ans, x: (-g * cj(np.sin(x)),), reads=(0,))
defvjp("tanh", np.tanh, lambda g, ans, x: (g * cj(1 - ans**2),), reads=("ans",))
defvjp("sqrt", np.sqrt, lambda g, ans, x: (g * cj(0.5 / ans),), reads=("ans",))
defvjp("abs", np.abs, lambda g, ans, x: (np.real(g) * x / np.where(ans == 0, 1, ans),), reads=(0, "ans"))
defvjp("maximum", np.maximum, lambda g, ans, x, y: (unbroadcast(g * _balanced(x, y, ans), x),
                                                    unbroadcast(g * _balanced(y, x, ans), y)), reads=(0, 1, "ans"))
defvjp("conj", np.conj, lambda g, ans, x: (cj(g),))
defvjp("real", np.real, lambda g, ans, x: (np.real(g),))
defvjp("imag", np.imag, lambda g, ans, x: (1j * np.real(g),))
defvjp("where", np.where, lambda g, ans, c, x, y: (None, unbroadcast(np.where(c, g, 0), x), unbroadcast(np.where(c, 0, g), y)), reads=(0,))
defvjp("dot", np.dot, _dot_vjp, reads=(0, 1))
defvjp("matmul", np.matmul, _matmul_vjp, reads=(0, 1))
defvjp("sum", np.sum, lambda g, ans, x, axis=None, keepdims=False: (_unreduce(g, x, axis, keepdims),))
defvjp("mean", np.mean, lambda g, ans, x, axis=None, keepdims=False: (_unreduce(g, x, axis, keepdims) * (np.size(ans) / np.size(x)),))
defvjp("reshape", lambda x, shape: np.reshape(x, shape), lambda g, ans, x, shape: (np.reshape(g, np.shape(x)),))
defvjp("transpose", lambda x, axes=None: np.transpose(x, axes),
       lambda g, ans, x, axes=None: (np.transpose(g, None if axes is None else np.argsort(axes)),))
defvjp("getitem", lambda x, index: x[index], lambda g, ans, x, index: (_scatter(g, x, index), None), reads=(1,))
defvjp("concatenate", lambda *xs, axis=0: np.concatenate(xs, axis),
       lambda g, ans, *xs, axis=0: tuple(np.split(g, np.cumsum([np.shape(x)[axis] for x in xs[:-1]]), axis)))
defvjp("stack", lambda *xs, axis=0: np.stack(xs, axis), lambda g, ans, *xs, axis=0: tuple(np.moveaxis(g, axis, 0)))
defvjp("copy", np.copy, lambda g, ans, x: (g,))
defvjp("ascontiguousarray", lambda x: np.array(x, order="C"), lambda g, ans, x: (g,))
defvjp("square", np.square, lambda g, ans, x: (g * cj(2 * x),), reads=(0,))
defvjp("log1p", np.log1p, lambda g, ans, x: (g / cj(1 + x),), reads=(0,))
defvjp("expm1", np.expm1, lambda g, ans, x: (g * cj(ans + 1),), reads=("ans",))
defvjp("minimum", np.minimum, lambda g, ans, x, y: (unbroadcast(g * _balanced(x, y, ans), x),
                                                    unbroadcast(g * _balanced(y, x, ans), y)), reads=(0, 1, "ans"))
defvjp("logaddexp", np.logaddexp, lambda g, ans, x, y: (unbroadcast(g * np.exp(x - ans), x),
                                                        unbroadcast(g * np.exp(y - ans), y)), reads=(0, 1, "ans"))
defvjp("outer", np.outer, lambda g, ans, x, y: (np.reshape(g @ cj(np.ravel(y)), np.shape(x)),
                                                np.reshape(cj(np.ravel(x)) @ g, np.shape(y))), reads=(0, 1))
defvjp("broadcast_to", lambda x, shape: np.broadcast_to(x, shape).copy(), lambda g, ans, x, shape: (unbroadcast(g, x),))
# fmt: on

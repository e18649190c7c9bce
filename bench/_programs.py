"""The context programs, written once for the anchors' frameworks (PyTorch and JAX).

They mirror gradguard's adversarial contexts (same names), written the way a
user of each framework writes them: the rule is called like any other
function of the framework's arrays. ``xp`` is a small adapter for the few
operations the programs use; ``call(*full_args)`` is the rule wrapped for the
framework; programs take the differentiable inputs and return a real scalar.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
from _cases import BenchCase

NAMES = (
    "output-used",
    "output-unused",
    "captured-before",
    "read-after",
    "called-twice",
    "fan-out",
    "same-array-twice",
    "transposed-alias",
    "strided-view",
    "transposed-view",
)


def _weights(value: Any, rng: np.random.Generator) -> Any:
    if isinstance(value, tuple):
        return tuple(_weights(v, rng) for v in value)
    arr = np.asarray(value)
    w = rng.uniform(-1.0, 1.0, size=arr.shape)
    if np.iscomplexobj(arr):
        w = w + 1j * rng.uniform(-1.0, 1.0, size=arr.shape)
    return w


def _loss(xp: Any, z: Any, w: Any) -> Any:
    if isinstance(z, (tuple, list)):
        total = 0.0
        for zk, wk in zip(z, w):
            total = total + _loss(xp, zk, wk)
        return total
    return xp.real(xp.sum(xp.const(w) * z))


def _inner(xp: Any, c: Any, x: Any) -> Any:
    return xp.real(xp.sum(xp.const(c) * x))


def _square(xp: Any, x: Any) -> Any:
    return xp.real(xp.sum(xp.conj(x) * x))


def build(case: BenchCase, name: str, xp: Any, call: Callable[..., Any], output: Any) -> tuple[Callable[..., Any], list[Any]] | None:
    """``(program, inputs)`` for the context ``name``, or None where it does not fit the rule's signature."""
    rng = np.random.default_rng(zlib.crc32(f"{case.key}/{name}".encode()))
    diff = case.diff
    args = case.args
    arrays = [i for i in diff if isinstance(args[i], np.ndarray) and args[i].ndim >= 1]

    def assemble(values: dict[int, Any]) -> tuple[Any, ...]:
        return tuple(values.get(i, a) for i, a in enumerate(args))

    inputs = [args[i] for i in diff]
    if name == "output-used":
        w = _weights(output, rng)
        return (lambda *xs: _loss(xp, call(*assemble(dict(zip(diff, xs)))), w)), inputs
    if name == "output-unused":
        cs = [_weights(args[i], rng) for i in diff]

        def unused(*xs: Any) -> Any:
            before = sum((_inner(xp, c, x) for c, x in zip(cs, xs)), 0.0)
            call(*assemble(dict(zip(diff, xs))))
            return before

        return unused, inputs
    if name in ("captured-before", "read-after"):
        if not arrays:
            return None
        held = [diff.index(i) for i in arrays]
        w = _weights(output, rng)
        cs = [_weights(args[i], rng) for i in arrays]

        def captured(*xs: Any) -> Any:
            cap = sum((_square(xp, xs[k]) for k in held), 0.0)  # dot(x, x) holds x for its backward
            z = call(*assemble(dict(zip(diff, xs))))
            if name == "captured-before":
                return _loss(xp, z, w) + cap
            return cap + sum((_inner(xp, c, xs[k]) for c, k in zip(cs, held)), 0.0)  # reads x after the call

        return captured, inputs
    if name == "called-twice":
        if case.args2 is case.args or all(np.array_equal(a, b) for a, b in zip(case.args, case.args2)):
            return None
        n = len(diff)
        w1, w2 = _weights(output, rng), _weights(output, rng)

        def twice(*xs: Any) -> Any:
            z1 = call(*assemble(dict(zip(diff, xs[:n]))))
            z2 = call(*assemble(dict(zip(diff, xs[n:]))))
            return _loss(xp, z1, w1) + _loss(xp, z2, w2)

        return twice, inputs + [case.args2[i] for i in diff]
    if name == "fan-out":
        ws = [_weights(output, rng) for _ in range(3)]

        def fan(*xs: Any) -> Any:
            z = call(*assemble(dict(zip(diff, xs))))
            return _loss(xp, z, ws[0]) + _loss(xp, z, ws[1]) + _loss(xp, z, ws[2])

        return fan, inputs
    if name in ("same-array-twice", "transposed-alias"):
        pair = None
        for k, i in enumerate(arrays):
            for j in arrays[k + 1 :]:
                a, b = args[i], args[j]
                if a.shape == b.shape and a.dtype == b.dtype and (name == "same-array-twice" or (a.ndim == 2 and a.shape[0] == a.shape[1])):
                    pair = (i, j)
                    break
            if pair:
                break
        if pair is None:
            return None
        i, j = pair
        moving = [p for p in diff if p != j]
        w = _weights(output, rng)

        def aliased(*xs: Any) -> Any:
            at = dict(zip(moving, xs))
            at[j] = at[i] if name == "same-array-twice" else xp.transpose(at[i])
            return _loss(xp, call(*assemble(at)), w)

        return aliased, [args[p] for p in moving]
    if name in ("strided-view", "transposed-view"):
        views = [i for i in arrays if name == "strided-view" or args[i].ndim == 2]
        if not views:
            return None
        w = _weights(output, rng)
        bases = []
        for i in diff:
            a = args[i]
            if i not in views:
                bases.append(a)
            elif name == "strided-view":
                base = np.repeat(a, 2, axis=0)  # rows 0, 2, 4, ... are the argument
                base[1::2] = rng.uniform(-1.0, 1.0, size=a.shape).astype(a.dtype)
                bases.append(base)
            else:
                bases.append(np.ascontiguousarray(a.T))  # the argument is its transpose: a Fortran-ordered view

        def viewed(*xs: Any) -> Any:
            at = {}
            for i, x in zip(diff, xs):
                at[i] = x if i not in views else (x[::2] if name == "strided-view" else xp.transpose(x))
            return _loss(xp, call(*assemble(at)), w)

        return viewed, bases
    raise ValueError(f"unknown context {name!r}")

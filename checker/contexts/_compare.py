"""One program under every engine, beside what the primal computes: code that branches on `within_gradient`.

    def program(xp, x):
        return x**2 if engines.within_gradient(x) else x

    compare_engines(program, 2.0)
    # primal: value 2.0, gradient 1.0 (finite differences of what users run)
    # tape:   value 4.0, gradient 4.0   (the branch AD takes)
    # jax:    value 4.0, gradient 4.0

``program(xp, *args)`` is written against a NumPy-like namespace (``numpy``,
the tape's ``tnp``, ``jax.numpy``) and returns a real scalar.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gradguard.checker.trees import copy_tree

__all__ = ["EngineView", "compare_engines"]


@dataclass
class EngineView:
    """What one engine computes for a program: its value and gradient, or the error it raised."""

    engine: str
    value: float | None = None
    grad: tuple | None = None
    error: str | None = None

    def __str__(self) -> str:
        if self.error:
            return f"{self.engine:>7}: raised {self.error}"
        grads = ", ".join(f"{g:.6g}" if np.ndim(g) == 0 else np.array2string(np.asarray(g), precision=6)
                          for g in self.grad or ())
        return f"{self.engine:>7}: value {self.value:.6g}, gradient {grads}"


def compare_engines(program: Callable[..., Any], *args: Any) -> list[EngineView]:
    """The primal (plain NumPy, gradient by finite differences), the tape and JAX on ``program(xp, *args)``."""
    return [_primal(program, args), _tape(program, args), _jax(program, args)]


def _primal(program: Callable[..., Any], args: tuple) -> EngineView:
    from gradguard.engines.fd import directional

    def f(*xs: Any) -> Any:
        return program(np, *xs)

    try:
        value = float(np.real(f(*copy_tree(args))))
        grads = []
        for i, a in enumerate(args):
            g = np.zeros(np.shape(a))
            for idx in np.ndindex(np.shape(a)):
                e = np.zeros(np.shape(a))
                e[idx] = 1.0
                dirs = [e if j == i else None for j in range(len(args))]
                g[idx] = float(np.real(directional(f, args, dirs).value))
            grads.append(g if np.ndim(a) else float(g))
        return EngineView("primal", value, tuple(grads))
    except Exception as exc:  # noqa: BLE001
        return EngineView("primal", error=f"{type(exc).__name__}: {exc}")


def _tape(program: Callable[..., Any], args: tuple) -> EngineView:
    from gradguard.engines.tape import run_backward, tnp

    try:
        result = run_backward(lambda *xs: program(tnp, *xs), copy_tree(args), 1.0)
        return EngineView("tape", float(np.real(result.value)), tuple(_plain(g) for g in result.grads))
    except Exception as exc:  # noqa: BLE001
        return EngineView("tape", error=f"{type(exc).__name__}: {exc}")


def _jax(program: Callable[..., Any], args: tuple) -> EngineView:
    try:
        from gradguard.engines.jax_engine._runtime import load

        jax = load()
        import jax.numpy as jnp

        value, grads = jax.value_and_grad(lambda *xs: program(jnp, *xs), argnums=tuple(range(len(args))))(*args)
        return EngineView("jax", float(np.real(value)), tuple(_plain(g) for g in grads))
    except Exception as exc:  # noqa: BLE001
        return EngineView("jax", error=f"{type(exc).__name__}: {exc}")


def _plain(g: Any) -> Any:
    arr = np.asarray(g)
    return float(arr) if arr.ndim == 0 else arr

"""How one cell of the safety matrix is judged: an engine's ``<gradient, v>`` against finite differences of
the whole program, with the finite differences' own error bound, and no verdict where they cannot give one.

* The finite differences' error is at least their rounding at the step they used (`rounding_bound`).
* The comparison is the one every numeric check uses (`tolerances.close`): the dtype's tolerance plus
  SAFETY times the finite-difference error estimate. Where that bound is wider than the dtype's tolerance
  the cell says so; where it is too wide to tell a right gradient from a wrong one
  (`tolerances.resolves`), an agreeing cell is no verdict.
* A disagreeing cell near a kink is no verdict when the evidence GG201 accepts is there
  (:mod:`gradguard.checker.kinks`): the engine's value lies between the program's one-sided derivatives
  at finer steps, or the engine's answers jump between pieces around the input and both its value and
  the finite difference are among them, where the program's own one-sided derivatives show a kink near
  the input.
* Where that evidence does not excuse it, valid subgradients of the rule at each of its calls may still
  sum to the engine's value: kinks at several output elements, bent opposite ways by the program's
  weights, reach beyond the whole program's one-sided derivatives (:mod:`._call_kinks`, asked by
  :mod:`._matrix` after :func:`kink_excuse`).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from gradguard.checker import kinks, tolerances
from gradguard.checker.trees import leaves

__all__ = ["compare", "kink_excuse", "rounding_bound"]


def rounding_bound(inputs: tuple[Any, ...], value: float, step: float, computed_at: float | None = None) -> float:
    """The smallest slope a finite difference at ``step`` can resolve on a program of size ``value`` computed
    in the precision of its inputs, or at machine epsilon ``computed_at`` where that is coarser (the rule's
    outputs'): ``eps * |value| / step``, with the largest eps among them. A float32 program in the thousands is flat at steps below its resolution, and a
    Richardson table of equal values claims a slope of 0 with no error at all; so is a float64 program through a
    rule that returns float32 (NeMo's RNN-T loss: 0 at a step of 5.6e-7, where its slope is -0.369)."""
    eps = [float(np.finfo(np.asarray(x).dtype).eps) for x in leaves(inputs)
           if x is not None and np.asarray(x).dtype.kind in "fc"]
    eps += [computed_at] if computed_at else []
    if not eps or not (step > 0 and math.isfinite(step) and math.isfinite(value)):
        return 0.0
    return max(eps) * abs(value) / step


def compare(slope: float, truth: float, fd_error: float, tol: tolerances.Tolerance,
            scale: float) -> tuple[str, str | None]:
    """``(status, message)`` for an engine's ``slope`` against the finite difference ``truth``: "right",
    "wrong" or "skipped" (no verdict)."""
    bound = tolerances.SAFETY * fd_error
    if not math.isfinite(slope):
        if math.isfinite(truth) and math.isfinite(fd_error) and tolerances.resolves(truth, fd_error, tol):
            return "wrong", f"the gradient is not finite (<gradient, v> = {slope!r})"
        # digamma at -1e-286: its value 1e286 is finite, its derivative (1e572) is not a float64
        return "skipped", (
            f"no verdict: the gradient is not finite (<gradient, v> = {slope!r}), and finite differences of the "
            f"program ({truth:.6g} ± {bound:.2g}) cannot resolve a derivative at this input to hold it to"
        )
    wide = bound > tol.atol + tol.rtol * max(scale, abs(slope), abs(truth))
    given = f"finite differences of the program give {truth:.6g}" + (f" ± {bound:.2g}" if wide else "")
    if not tolerances.close(slope, truth, tol, scale=scale, fd_error=fd_error):
        return "wrong", f"<gradient, v> = {slope:.6g}, {given}"
    if not tolerances.resolves(truth, fd_error, tol):
        return "skipped", (
            f"no verdict: {given}, an error bound too wide to judge <gradient, v> = {slope:.6g} (finite "
            "differences cannot resolve the program's derivative at this input)"
        )
    if wide:
        return "right", f"right within the finite differences' error bound: <gradient, v> = {slope:.6g}, {given}"
    return "right", None


def kink_excuse(program: Callable[..., Any], answer: kinks.Answer, inputs: tuple[Any, ...], v: tuple[Any, ...], *,
                engine: str, slope: float, truth: float, fd_error: float, step: float, tol: tolerances.Tolerance,
                scale: float) -> str | None:
    """Why a disagreeing cell gets no verdict because of kinks near the input, or None (the cell is wrong).

    ``program(*inputs)`` is the program as users run it (a real scalar), ``answer(args)`` the engine's
    ``<gradient, v>`` at ``args`` (None: at the inputs), ``step`` the finite differences' step."""

    def g(args: tuple[Any, ...]) -> tuple[float, float]:
        value = float(program(*args))
        return value, abs(value)

    sides = kinks.derivative_range(g, inputs, v, tol, scale)
    if kinks.between_sides(sides, slope, tol, scale):
        lo, hi = sides
        where = f"finite differences at step {step:.2g} give {truth:.6g}, but at finer steps the program shows"
        if tolerances.close(lo, hi, tol, scale=scale):
            return f"no verdict: {where} a derivative along v of {lo:.6g}, which agrees with <gradient, v> = {slope:.6g}"
        return (
            f"no verdict: {where} one-sided derivatives along v from {lo:.6g} to {hi:.6g}, and <gradient, v> = "
            f"{slope:.6g} lies between them (at a kink, any value there is a valid subgradient)"
        )
    if kinks.jumps_around(answer, inputs, v, g=g, step=step, value=slope, fd_value=truth, fd_error=fd_error, scale=scale, tol=tol):
        return (
            f"no verdict: <gradient, v> (asked of {engine}) jumps between values at points around the input and keeps "
            "jumping as they close in (kinks nearer than any usable finite-difference step), and both its value "
            f"here ({slope:.6g}) and finite differences ({truth:.6g}) lie among those values"
        )
    if kinks.unresolved(g, inputs, v):
        return (
            f"no verdict: the program's one-sided slopes along v grow at every step float64 can take (a jump, or a "
            f"singularity nearer to the input than any step), so finite differences ({truth:.6g}) establish no "
            f"derivative to hold <gradient, v> = {slope:.6g} to"
        )
    return None

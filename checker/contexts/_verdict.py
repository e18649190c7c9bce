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
* Where finite differences along ``v`` resolve no derivative and disagree, they are taken again at each of the
  input's scales (`by_scales`, as GG201 does): one step for an input of 6e-16 beside 7.8e29 crosses a clip at 0
  beside the small element, or loses the small element's move in the rounding of the large one's share.
* Where that evidence does not excuse it, valid subgradients of the rule at each of its calls may still
  sum to the engine's value: kinks at several output elements, bent opposite ways by the program's
  weights, reach beyond the whole program's one-sided derivatives (:mod:`._call_kinks`, asked by
  :mod:`._matrix` after :func:`kink_excuse`).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np

from gradguard.checker import kinks, tolerances
from gradguard.checker.trees import abs_inner, inner, leaves

__all__ = ["by_scales", "compare", "confirmed_slope", "kink_excuse", "rounding_bound"]


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


def confirmed_slope(program: Callable[..., Any], inputs: tuple[Any, ...], v: tuple[Any, ...], value: float,
                    computed_at: float | None) -> tuple[float, float, float]:
    """``(slope, step, error)``: the program's ``<gradient, v>`` by `fd.confirmed` (tables at 32-fold finer steps
    until two agree), the step it settled on, and its error, at least the rounding of the program's ``value`` at
    that step (`rounding_bound`). ValueError where a probe point leaves the program's domain."""
    from gradguard.engines.fd import budget, confirmed

    d = confirmed(program, inputs, v, computed_at=computed_at, **{"complex_step": False, **budget(inputs)})
    return float(np.real(d.value)), d.step, max(d.error, rounding_bound(inputs, value, d.step, computed_at))


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


def by_scales(program: Callable[..., Any], inputs: tuple[Any, ...], v: tuple[Any, ...], grads: Any, *, value: float,
              slope: float, truth: float, fd_error: float, tol: tolerances.Tolerance,
              computed_at: float | None) -> tuple[str, str] | None:
    """A cell whose finite differences along ``v`` resolve no derivative (``truth`` +- ``fd_error``) and disagree
    with the engine's ``slope``, judged again at each of the input's scales: ``v`` split by the magnitudes of the
    elements it moves (`kinks.scale_groups`), and for each part ``v_g`` the program's finite differences (confirmed
    by finer tables) at steps that move its smallest element by at most 1/STEP_BELOW of its size, against the
    engine's own share ``<gradient, v_g>`` (its ``grads``). The parts sum to ``v``.

    ``(status, message)``: "right" where every part resolves its derivative and agrees (`compare`); "skipped" (no
    verdict) where every part that resolves one agrees and the others' error bounds hold the engine's share (the
    program's value, whatever a large element makes it, rounds away what steps at a small element's scale change);
    None where a part's finite differences, within their error bound, disagree with the engine's share, where the
    input is not split (`scale_groups`: a moved element is 0, not finite or subnormal, or an argument is not a real
    array), or where finite differences cannot be taken there: the cell stays wrong."""
    from gradguard.engines.fd import first_step

    groups = kinks.scale_groups(inputs, v)
    if groups is None or any(g.smallest < np.finfo(np.float64).tiny for g in groups):
        return None
    eps = max([float(np.finfo(np.asarray(x).dtype).eps) for x, d in zip(inputs, v)
               if d is not None and np.asarray(x).dtype.kind == "f"] + ([computed_at] if computed_at else []))
    parts: list[tuple[kinks.ScaleGroup, float, float, float, bool]] = []  # group, fd value, its error, share, resolved
    for group in groups:
        factor = group.reach * kinks.first_move(eps) / first_step(inputs, group.along)
        if not (factor > 0.0 and math.isfinite(factor)):
            return None
        w = tuple(None if d is None else np.asarray(d) * factor for d in group.along)
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                at, _, error = confirmed_slope(program, inputs, w, value, computed_at)
        except ValueError:  # a probe point outside the program's domain
            return None
        at, error = at / factor, error / factor
        share, size = inner(grads, group.along), abs_inner(grads, group.along)
        if not (math.isfinite(at) and math.isfinite(error) and math.isfinite(share)):
            return None
        status, _ = compare(share, at, error, tol, size)
        if status == "wrong":  # outside this part's error bound, resolved or not (0 +- 1.8e-5 against 0.359)
            return None
        parts.append((group, at, error, share, status == "right"))
    shown = "; ".join(
        f"elements of {g.smallest:.2g}" + (f" to {g.largest:.2g}" if g.largest > g.smallest else "")
        + (f": {at:.6g} against {share:.6g}" if resolved else f": {at:.6g} ± {tolerances.SAFETY * error:.2g}, no derivative")
        for g, at, error, share, resolved in parts)
    whole = (f"finite differences of the program along v ({truth:.6g} ± {tolerances.SAFETY * fd_error:.2g}) resolve no "
             f"derivative to hold <gradient, v> = {slope:.6g} to; taken again at each of the input's scales, with "
             f"steps of that scale's own size, against the gradient's share there ({shown})")
    if all(resolved for *_, resolved in parts):
        return "right", f"right at the input's own scales: {whole}"
    return "skipped", f"no verdict: {whole}, where each derivative they resolve agrees"

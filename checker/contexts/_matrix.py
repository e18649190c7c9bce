"""The safety matrix: every applicable context under every engine, against finite differences.

For each context the program is differentiated

* by finite differences of the whole program under plain NumPy, with the
  rule's primal, on fresh copies of the inputs: the true derivative, mutation
  included as it really happens (a directional derivative along a random
  direction ``v``, so the cost does not grow with the input size);
* by every engine of the registry (`_engines`) that applies to the rule: the
  tape once per unused-output policy (a wrong cell is run again in watch mode
  for its diagnosis), JAX under ``value_and_grad`` (compiled per program, or eager), ... Each `Engine`
  says how it runs a plan; this module only judges what they return.

Each engine's ``<gradient, v>`` is compared with the finite difference within
the rule's tolerance plus the finite-difference error (`_verdict`: no verdict
where that error, or a kink near the input, leaves the comparison open). A rule that raises
inside a context makes that cell "raised" and the run goes on; an operation
the tape cannot trace in a context program is gradguard's bug and raises
`TraceError`.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from gradguard.checker import kinks, tolerances
from gradguard.checker._deadline import at_safe_point
from gradguard.checker._memory import note_memory_error
from gradguard.checker.inputs import show
from gradguard.checker.contexts._engine import Cell, Engine, RuleView, scalar as _scalar, text as _text
from gradguard.checker.contexts._engines import ENGINES, check_settings, engine as engine_named, engines_for
from gradguard.engines.fd import first_step
from gradguard.checker.contexts._inputs import NoInput, draw_inputs, drawn_ranges, drawn_shapes, search, shapes_vary
from gradguard.checker.contexts._ops import numpy_ops
from gradguard.checker.contexts._call_kinks import call_kinks_excuse, non_finite_call, unresolved_call
from gradguard.checker.contexts._verdict import by_scales, compare, confirmed_slope, kink_excuse, rounding_bound
from gradguard.checker.contexts._programs import (CONTEXTS, Context, NotApplicable, OutsideDomain, Plan, Signature,
                                                 ValuesDoNotFit, by_name, fit_bends, weights_like)
from gradguard.checker.specs import UNSTRUCTURED_RRULE, RuleSpec
from gradguard.checker.trees import abs_inner, copy_tree, inner, leaves, tree_map

__all__ = ["ENGINES", "Cell", "Outcome", "run_matrix", "safety_matrix", "engines_for"]


@dataclass
class Row:
    """One context: the ground truth and one cell per engine."""

    context: Context
    cells: dict[str, Cell] = field(default_factory=dict)
    value: Any = None  # the program's value under plain NumPy (what users run)
    slope: float | None = None  # the finite-difference <gradient, v>
    truth_error: str | None = None  # why there is no ground truth
    fd_error: float = 0.0  # the finite difference's error estimate
    fd_step: float = 0.0  # ... and the step it settled on
    # Kink evidence already gathered for a wrong <gradient, v> in this row: (slope, gradient, why no verdict or
    # None). Engines that agree on the gradient (the tape under its three policies, often JAX) share it.
    kink_evidence: list[tuple[float, Any, str | None]] = field(default_factory=list)
    # Likewise the verdicts at the input's own scales (`_by_scales`): (slope, gradient, (status, message) or None).
    scale_evidence: list[tuple[float, Any, tuple[str, str] | None]] = field(default_factory=list)
    # Where the rule itself has no derivative float64 holds at one of its calls (`non_finite_call`: it runs the
    # program again), asked once per row for its first non-finite wrong gradient: [] until asked, then [why or None].
    singular_call: list[str | None] = field(default_factory=list)
    tol: tolerances.Tolerance = tolerances.for_dtype("float64")
    mutates: bool = False  # the rule declares an argument mutation (JAX cannot run it faithfully)
    computed_at: float | None = None  # the machine epsilon of the rule's least precise output (`RuleView.computed_at`)
    # The baseline program again at a generic input, where finite differences gave some engine no verdict at the
    # drawn one (`_baseline_elsewhere`): whether the rule is wrong on its own there. Not part of the report.
    elsewhere: "Row | None" = None
    # The row's twin (`Plan.twin`: distinct arrays in the aliased slots, contiguous copies of the views, a cotangent
    # of the pullback's own), run by the engines wrong in it (`_twin_row`): whether they are wrong at this input
    # whatever the context. Not part of the report.
    twin: "Row | None" = None
    # An aliasing program's inputs as shown in a finding (`show`), set where the twin ran.
    shown_inputs: str | None = None


@dataclass
class Outcome:
    """Everything the context checks need: the rows, the skipped contexts and the tolerance used."""

    rows: list[Row]
    skipped: list[dict[str, str]]
    engines: tuple[str, ...]
    tol: tolerances.Tolerance
    primitive_name: str
    descriptions: dict[str, str]
    # Contexts skipped because no drawn array lay in the declared domain of the argument it would stand for
    # (the reason, by context name): the aliasing check names them rather than a shape it did not find.
    outside_domain: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "contexts": [r.context.name for r in self.rows],
            "engines": list(self.engines),
            "cells": [r.cells[e].to_json(r.context.name) for r in self.rows for e in self.engines],
            "skipped": list(self.skipped),
            "descriptions": dict(self.descriptions),
        }


def safety_matrix(rule: RuleSpec, *, seed: int = 0, contexts: Sequence[Any] | None = None,
                  engines: Sequence[str] | None = None, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The safety matrix of ``rule`` as the report's JSON (see `gradguard.checker.contexts`)."""
    return run_matrix(rule, seed=seed, contexts=contexts, engines=engines, settings=settings).to_json()


def run_matrix(rule: RuleSpec, *, seed: int = 0, contexts: Sequence[Any] | None = None,
               engines: Sequence[str] | None = None, settings: Mapping[str, Any] | None = None) -> Outcome:
    """Every context of ``contexts`` (default: all) under every engine of ``engines`` (default: those that
    apply); ``settings`` are the engines' (``{"jax_column": "auto" | "jit" | "eager" | "traced"}``: `_jax_engine.MODES`)."""
    chosen = CONTEXTS if contexts is None else by_name(contexts)
    engines = engines_for(rule) if engines is None else tuple(engines)
    columns = tuple(engine_named(e) for e in engines)  # ValueError for an unknown name
    check_settings(settings)
    name = getattr(rule.primal, "__name__", None) or rule.name
    descriptions = {c.name: c.description for c in chosen}
    outcome = Outcome([], [], engines, tolerances.for_dtype("float64", rtol=rule.rtol, atol=rule.atol), name, descriptions)
    try:
        args, args2, output = draw_inputs(rule, seed)
    except NoInput as exc:
        outcome.skipped = [{"context": c.name, "reason": str(exc)} for c in chosen]
        return outcome
    ranges, shapes = drawn_ranges(rule, seed), drawn_shapes(rule, seed)
    sig = Signature(rule, args, args2, output, ranges, shapes)
    if not sig.diff:
        outcome.skipped = [{"context": c.name, "reason": "the rule has no differentiable argument"} for c in chosen]
        return outcome
    outcome.tol = tolerances.for_dtype(_lowest_dtype(args[i] for i in sig.diff), rtol=rule.rtol, atol=rule.atol)
    # On complex values, an engine that does not share the rule's convention for complex tangents (its kind's,
    # or the one it declares: `complex_convention_of`) is skipped (the adapters do not convert): it would be
    # wrong for a right rule.
    view = RuleView(rule, name, args, output, settings)
    planned: dict[str, tuple[Plan, np.random.Generator] | str] = {}  # a plan and its generator, or why none
    values_unfit: set[str] = set()  # contexts these shapes fit but these values do not (other draws may)
    for ctx in chosen:
        rng = _generator(seed, ctx)
        try:
            planned[ctx.name] = (ctx.plan(sig, rng), rng)
        except NotApplicable as exc:
            planned[ctx.name] = str(exc)
            if isinstance(exc, ValuesDoNotFit):
                values_unfit.add(ctx.name)
            if isinstance(exc, (ValuesDoNotFit, OutsideDomain)):
                outcome.outside_domain[ctx.name] = str(exc)
    _search_shapes(rule, seed, [c for c in chosen if isinstance(planned[c.name], str)], planned, outcome, values_unfit)
    for ctx in chosen:
        if isinstance(planned[ctx.name], str):
            outcome.skipped.append({"context": ctx.name, "reason": planned[ctx.name]})
            continue
        plan, rng = planned[ctx.name]
        at_safe_point()  # an expired time limit stops between two contexts
        v = weights_like(plan.inputs, rng)
        fitted = fit_bends(plan, v, rule.primal, first_step(plan.inputs, v))
        row = _run_row(ctx, fitted.plan, v, view, columns, outcome.tol, value=fitted.value)
        outcome.rows.append(row)
        if fitted.plan.twin is not None:
            wrong = tuple(c for c in columns if c.name in row.cells and row.cells[c.name].status == "wrong")
            if wrong:
                row.twin = _twin_row(ctx, fitted.plan, v, view, wrong, outcome.tol)
                if ctx.aliasing:
                    row.shown_inputs = _shown_inputs(ctx, fitted.plan, sig.diff)
    base = next((r for r in outcome.rows if r.context.name == BASELINE), None)
    if base is not None and any(no_verdict(c) for c in base.cells.values()):
        base.elsewhere = _baseline_elsewhere(base.context, rule, seed, args, ranges, shapes, view, columns, outcome.tol)
    return outcome


BASELINE = "output-used"  # the simplest program that uses the rule's output: a wrong cell here is the rule's own


def no_verdict(cell: Cell) -> bool:
    """Whether finite differences could not judge ``cell`` (a jump or a kink within their steps, an error bound
    too wide): its engine is neither right nor wrong there."""
    return cell.status == "skipped" and (cell.message or "").startswith("no verdict")


def _baseline_elsewhere(ctx: Context, rule: RuleSpec, seed: int, args: tuple, ranges: Any, shapes: Any,
                        view: RuleView, columns: tuple[Engine, ...], tol: tolerances.Tolerance) -> Row | None:
    """The baseline row at a generic input, or None where there is none to take: each differentiable real array
    argument drawn uniformly over the range its draws took (`drawn_ranges`), the others as drawn. Where the first
    draw sat on a jump or a kink and gave no verdict, a wrong cell in another context could be the context's doing
    or the rule's own: a two-input surrogate spike (BrainPy's), whose aliased pullbacks add up exactly, was reported
    for not accumulating at the seeds whose baseline input sat on its jump (the draws favour 0, where its jump is, as
    they favour ties). Away from them its baseline is wrong, the surrogate's own doing, while HIPS/autograd's
    maximum that doubles a tie stays right off the tie. A rule whose arguments carry a structure (`structure=`) or
    are complex gets none: a uniform draw would leave its domain."""
    if UNSTRUCTURED_RRULE in rule.extra:
        return None
    rng = np.random.default_rng([seed, 1])
    generic = list(copy_tree(args))
    for i, a in enumerate(args):
        if i in rule.nondiff or not isinstance(a, np.ndarray):
            continue
        if a.dtype.kind != "f" or i not in ranges or not all(np.isfinite(ranges[i])):
            return None
        lo, hi = ranges[i]
        generic[i] = rng.uniform(lo, hi, size=a.shape).astype(a.dtype)
    try:
        with np.errstate(all="ignore"):
            output2 = rule.primal(*copy_tree(tuple(generic)))
        rng = _generator(seed, ctx)
        plan = ctx.plan(Signature(rule, tuple(generic), args, output2, ranges, shapes), rng)
        v = weights_like(plan.inputs, rng)
        fitted = fit_bends(plan, v, rule.primal, first_step(plan.inputs, v))
        return _run_row(ctx, fitted.plan, v, view, columns, tol, value=fitted.value)
    except Exception as exc:  # noqa: BLE001 - the primal or the plan refuses the second draw: nothing to compare
        note_memory_error(exc)
        return None


def _twin_row(ctx: Context, plan: Plan, v: tuple, view: RuleView, columns: tuple[Engine, ...],
              tol: tolerances.Tolerance) -> Row | None:
    """A row's twin under the engines wrong in it: the same program, inputs and weights without the context's hazard
    (`Plan.twin`). An engine wrong there too is wrong at this input whatever the context: jaxoplanet's cel(k2, p, a,
    b), given one array as k2 and p, at 0.5 in one entry (p = 1 - k2, a removable singularity of its derivative), is
    as wrong there with two arrays, and GG502 blamed accumulation over aliases; a FlashAttention Function whose
    forward clamps a sum its backward differentiates unclamped was as wrong on contiguous tensors and with a
    cotangent of its own, and GG501 told its author about memory order and cotangents written in place."""
    try:
        twin = replace(plan, program=plan.twin, twin=None, same=None, memo={})
        return _run_row(ctx, twin, v, view, columns, tol)
    except Exception as exc:  # noqa: BLE001 - the twin cannot run: nothing to tell the context from the input
        note_memory_error(exc)
        return None


def _shown_inputs(ctx: Context, plan: Plan, diff: Sequence[int]) -> str:
    """An aliasing program's inputs as a finding shows them: each moving argument by position, and which slot gets
    which argument's array (`_aliased`'s key is (i, j), argument j being argument i's array; tied weights' is (k,))."""
    if ctx.name == "tied-weights":
        (k,) = plan.key
        shown = ", ".join(f"argument {p} = {show(x)}" for p, x in zip(diff, plan.inputs))
        return f"{shown}; the second call gets argument {k}'s array transposed"
    i, j = plan.key
    moving = [p for p in diff if p != j]
    shown = ", ".join(f"argument {p} = {show(x)}" for p, x in zip(moving, plan.inputs))
    return f"{shown}; argument {j} is argument {i}'s array{'.T' if ctx.name == 'transposed-alias' else ''}"


def _generator(seed: int, ctx: Context) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(ctx.name.encode())])


def _search_shapes(rule: RuleSpec, seed: int, unfit: list[Context], planned: dict[str, Any], outcome: Outcome,
                   values_unfit: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Plans for the contexts the first draws did not fit, from further draws of the rule's own specs (where
    those draw their shapes, or where only the drawn values did not fit); the report says how many draws were
    tried either way."""
    unfit = [c for c in unfit if c.search]
    if unfit and not shapes_vary(rule, seed):
        unfit = [c for c in unfit if c.name in values_unfit]  # the same shapes will never fit the others
    if not unfit:
        return
    ranges, shapes = drawn_ranges(rule, seed), drawn_shapes(rule, seed)

    def fits(ctx: Context) -> Callable[[tuple[Any, ...], Any], bool]:
        return lambda args, output: ctx.plan(Signature(rule, args, None, output, ranges, shapes),
                                             np.random.default_rng(0)) is not None

    found = search(rule, seed, {c.name: fits(c) for c in unfit})
    for ctx in unfit:
        f = found[ctx.name]
        if f.args is None:
            planned[ctx.name] += f"; none of {f.tried} further draws from the argument specs fit"
            continue
        rng = _generator(seed, ctx)
        planned[ctx.name] = (ctx.plan(Signature(rule, f.args, None, f.output, ranges, shapes), rng), rng)
        outcome.outside_domain.pop(ctx.name, None)
        outcome.descriptions[ctx.name] += (
            f" (the first draws did not fit; inputs: the richest of {f.fitting} fitting draws among {f.tried} "
            "further draws from the argument specs)"
        )


def _lowest_dtype(values: Any) -> np.dtype:
    dts = [np.asarray(v).dtype for v in values]
    return min(dts, key=lambda d: -np.finfo(d).eps) if dts else np.dtype("float64")


# -- one context ------------------------------------------------------------------------------------


def _run_row(ctx: Context, plan: Plan, v: tuple, view: RuleView, engines: tuple[Engine, ...],
             tol: tolerances.Tolerance, value: Any = None) -> Row:
    """One context's row. ``value``: the program's value at the plan's inputs under plain NumPy where the caller
    has it already (`fit_bends` ran it there on these constants); None: run it here. The program's finite
    differences and kink probes take the steps of the coarsest precision among its inputs and the rule's outputs
    (a float64 program through a rule that returns float32 resolves slopes only at float32's steps)."""
    with kinks.computed_at(view.computed_at):
        return _judged_row(ctx, plan, v, view, engines, tol, value)


def _judged_row(ctx: Context, plan: Plan, v: tuple, view: RuleView, engines: tuple[Engine, ...],
                tol: tolerances.Tolerance, value: Any) -> Row:
    row = Row(ctx, tol=tol, mutates=bool(view.rule.mutates), computed_at=view.computed_at)
    users = numpy_ops(view.rule.primal)

    def program(*xs: Any) -> Any:
        return plan.program(users, plan.consts, *xs)

    # The ground truth: a shallow table first where the inputs are small (`fd.quick`); it stands only where every
    # engine's answer settles against it (`tolerances.settles`: an agreement its error estimate cannot have bought),
    # and the confirmed tables, as deep as before, judge every other row.
    quick: tuple[float, float, float] | None = None
    try:
        row.value = _scalar(program(*copy_tree(plan.inputs)) if value is None else value)
        if not np.isfinite(row.value):
            # 1/x at 5e-324, lgamma at a pole: the program has no value, let alone a derivative, to hold engines to
            row.truth_error = f"the program's value is {row.value!r} at this input under plain NumPy"
        else:
            quick = _quick_truth(program, plan, v, view, row.value)
            if quick is None:
                _confirmed_truth(row, program, plan, v, view)
    except Exception as exc:  # noqa: BLE001 - the primal failed in this context: no ground truth
        _no_truth(row, exc)
    ran: list[tuple[Engine, Cell, Any, float]] = []
    for engine in engines:
        cell = engine.run(view, plan)
        if cell.status == "ran":
            cell.value, grads = cell.value
            flushed = _flushed_reading(row, cell, engine, plan, users)
            if flushed is not None:
                cell.status, cell.message = "skipped", flushed
            else:
                cell.slope = inner(grads, v)
                ran.append((engine, cell, grads, abs_inner(grads, v)))
        row.cells[engine.name] = cell
    if quick is not None:
        if all(_settles(cell.slope, quick, row.tol, scale) for _, cell, _, scale in ran):
            row.slope, row.fd_step, row.fd_error = quick
        else:
            try:
                _confirmed_truth(row, program, plan, v, view)
            except Exception as exc:  # noqa: BLE001 - the primal failed at the finer steps: no ground truth
                _no_truth(row, exc)
    for engine, cell, grads, scale in ran:
        _judge(cell, row, engine, view, plan, v, program, scale, grads)
        if cell.status == "wrong" and engine.diagnose is not None:
            cell.diagnosis = engine.diagnose(view, plan)
    return row


def _no_truth(row: Row, exc: Exception) -> None:
    """The row has no ground truth: the program raised under plain NumPy (a memory error is noted as such), or its
    finite differences found no step that stays where it is finite."""
    from gradguard.engines.fd import StepsExhausted

    note_memory_error(exc)
    if isinstance(exc, StepsExhausted):
        row.truth_error = (f"finite differences of the program found no step that stays where it is finite and does "
                           f"not raise, down to {exc.last:g} ({exc.failure}): the input is that close to the edge of "
                           "the program's domain or to a pole")
        return
    row.truth_error = f"the program raised under plain NumPy ({_text(exc.__cause__ or exc)})"


def _quick_truth(program: Callable[..., Any], plan: Plan, v: tuple, view: RuleView,
                 value: float) -> tuple[float, float, float] | None:
    """The program's ``<gradient, v>`` by one shallow table (`fd.quick`), as (slope, step, error bound), or None
    where the inputs are large (their confirmed tables are shallow already) or its probes fail."""
    from gradguard.engines.fd import directional, quick

    table = quick(plan.inputs)
    if table is None:
        return None
    try:
        fd = directional(program, plan.inputs, v, computed_at=view.computed_at, complex_step=False, **table)
    except ValueError:  # a probe point outside the program's domain: the confirmed tables say what they can
        return None
    slope = float(np.real(fd.value))
    error = max(fd.error, rounding_bound(plan.inputs, value, fd.step, view.computed_at))
    if not (np.isfinite(slope) and np.isfinite(error)):
        return None
    return slope, fd.step, error


def _confirmed_truth(row: Row, program: Callable[..., Any], plan: Plan, v: tuple, view: RuleView) -> None:
    """The row's ground truth by `fd.confirmed`: tables at 32-fold finer steps until two agree."""
    row.slope, row.fd_step, row.fd_error = confirmed_slope(program, plan.inputs, v, row.value, view.computed_at)


def _settles(slope: float | None, quick: tuple[float, float, float], tol: tolerances.Tolerance, scale: float) -> bool:
    """Whether an engine's ``slope`` is right against the shallow table alone: it agrees, with no message, and the
    table's error estimate does not buy the agreement."""
    truth, _, error = quick
    return (slope is not None and bool(np.isfinite(slope))
            and tolerances.settles(slope, truth, tol, scale=scale, fd_error=error)
            and compare(slope, truth, error, tol, scale) == ("right", None))


def _flushed_reading(row: Row, cell: Cell, engine: Engine, plan: Plan, users: Any) -> str | None:
    """Why the value an engine that reads subnormal numbers as zeros gives is no verdict on the rule (None where
    it is one): where the plain program on the plan's inputs and weights with their subnormal numbers read as
    zeros gives the engine's value, the engine computed another function than the one users run (fmod(x, d)
    at d = 2e-309 is fmod(x, 0), NaN), whatever the rule does."""
    if not engine.flushes_subnormals or row.value is None or _same_value(cell.value, row.value, row.tol):
        return None
    from gradguard.engines.jax_engine._numpy_eval import flushed_to_zero

    held = (plan.inputs, plan.consts)
    inputs, consts = zeroed_held = tree_map(flushed_to_zero, held)
    if all(a is b for a, b in zip(leaves(held), leaves(zeroed_held))):
        return None  # no subnormal number among them: flushing changes nothing
    try:
        with np.errstate(all="ignore"):
            zeroed = _scalar(plan.program(users, copy_tree(consts), *copy_tree(inputs)))
    except Exception:  # noqa: BLE001 - the program raised there: no account of the engine's value
        return None
    if not _same_value(cell.value, zeroed, row.tol):
        return None
    return (f"no verdict: {engine.label} gives the program's value {cell.value:.6g}, which plain NumPy gives "
            f"with the subnormal numbers among its inputs read as zeros ({zeroed:.6g}; {row.value:.6g} with them "
            f"as they are): {engine.label} flushes subnormal numbers to zero, so it computes another function "
            "here than the one users run, whatever the rule does")


def _same_value(a: float, b: float, tol: tolerances.Tolerance) -> bool:
    """Two values of a program that agree (NaN against NaN is the same result)."""
    return (np.isnan(a) and np.isnan(b)) or tolerances.close(a, b, tol)


def _judge(cell: Cell, row: Row, engine: Engine, view: RuleView, plan: Plan, v: tuple,
           program: Callable[..., Any], scale: float, grads: Any = None) -> None:
    if row.slope is None:
        cell.status = "skipped"
        cell.message = f"no ground truth: {row.truth_error}"
        return
    a, b = cell.slope, row.slope
    cell.status, cell.message = compare(a, b, row.fd_error, row.tol, scale)
    if cell.status == "wrong" and not np.isfinite(a):
        if not row.singular_call:
            row.singular_call.append(non_finite_call(view.rule, plan))
        where = row.singular_call[0]
        if where is not None:
            # The rule has no derivative float64 holds where its own value is not finite (1/x at 5e-324) or its
            # derivative overflows: a NaN its pullback gives there, even for an unused output, is GG301's and
            # GG206's to judge, where it is a warning.
            cell.status, cell.message = "skipped", (
                f"no verdict: the gradient is not finite (<gradient, v> = {a!r}) where the rule itself has no "
                f"derivative float64 holds: {where} at this input under plain NumPy"
            )
            return
    if np.isfinite(a):
        # relative to the program's gradient; where that is 0 (within atol), to the engine's own: 1.0, all of it
        # wrong, where over atol's floor it read 6.1e+08 for a gradient of 0.607 against 0
        cell.rel_error = float(abs(a - b) / (abs(b) if abs(b) > row.tol.atol else max(abs(a), row.tol.atol)))
    if cell.status == "wrong" and np.isfinite(a):
        excuse = _kink_excuse(cell, row, engine, view, plan, v, program, scale, grads)
        if excuse:
            cell.status, cell.message = "skipped", excuse
        elif grads is not None and not tolerances.resolves(b, row.fd_error, row.tol):
            judged = _by_scales(cell, row, view, plan, v, program, grads)
            if judged is not None:
                cell.status, cell.message = judged


def _kink_excuse(cell: Cell, row: Row, engine: Engine, view: RuleView, plan: Plan, v: tuple,
                 program: Callable[..., Any], scale: float, grads: Any = None) -> str | None:
    """Why a wrong-looking cell is no verdict because of kinks near the input (None: it is wrong), asked once
    per distinct gradient in the row (engines that agree on it share the evidence)."""
    a, b = cell.slope, row.slope
    excuse = next((why for seen, seen_grads, why in row.kink_evidence if tolerances.close(seen, a, row.tol, scale=scale)
                   and _same_gradient(seen_grads, grads, row.tol)), False)
    if excuse is False:

        def answer(args: tuple[Any, ...] | None) -> float:
            """The engine's <gradient, v> at ``args`` (the plan's inputs for None)."""
            moved = engine.run(view, plan if args is None else replace(plan, inputs=tuple(args)))
            if moved.status != "ran":
                raise RuntimeError(moved.message)
            return inner(moved.value[1], v)

        excuse = kink_excuse(lambda *xs: _scalar(program(*xs)), answer, plan.inputs, v, engine=cell.engine, slope=a,
                             truth=b, fd_error=row.fd_error, step=row.fd_step, tol=row.tol, scale=scale)
        if excuse is None:
            # Several kinks of the rule, each bent its own way by the program, can sum valid subgradients of
            # each call to a value outside the whole program's one-sided derivatives.
            excuse = call_kinks_excuse(view.rule.primal, plan, v, slope=a, truth=b, fd_error=row.fd_error,
                                       tol=row.tol, scale=scale, gradient=grads)
            if excuse is None:
                where = unresolved_call(view.rule.primal, plan, v, slope=a, truth=b, fd_error=row.fd_error,
                                        step=row.fd_step, tol=row.tol, scale=scale)
                if where is not None:
                    excuse = (f"no verdict: {where}, so finite differences of the program ({b:.6g}) are no ground "
                              f"truth for <gradient, v> = {a:.6g}")
        row.kink_evidence.append((a, grads, excuse))
    return excuse


def _by_scales(cell: Cell, row: Row, view: RuleView, plan: Plan, v: tuple, program: Callable[..., Any],
               grads: Any) -> tuple[str, str] | None:
    """`_verdict.by_scales` for a wrong cell whose finite differences resolve no derivative, asked once per
    distinct gradient in the row (engines that agree on it share the answer)."""
    for seen, seen_grads, judged in row.scale_evidence:
        if tolerances.close(seen, cell.slope, row.tol) and _same_gradient(seen_grads, grads, row.tol):
            return judged
    judged = by_scales(lambda *xs: _scalar(program(*xs)), plan.inputs, v, grads, value=float(row.value),
                       slope=cell.slope, truth=row.slope, fd_error=row.fd_error, tol=row.tol,
                       computed_at=view.computed_at)
    row.scale_evidence.append((cell.slope, grads, judged))
    return judged


def _same_gradient(a: Any, b: Any, tol: tolerances.Tolerance) -> bool:
    """Whether two engines' gradients (trees like the plan's inputs) agree element by element."""
    if a is None or b is None:
        return a is None and b is None
    try:
        pairs = list(zip(leaves(a), leaves(b), strict=True))
        return all((x is None) == (y is None) and (x is None or np.allclose(
            np.asarray(x), np.asarray(y), rtol=tol.rtol, atol=tol.atol, equal_nan=True)) for x, y in pairs)
    except (TypeError, ValueError):
        return False

"""The safety matrix: every applicable context under every engine, against finite differences.

For each context the program is differentiated

* by finite differences of the whole program under plain NumPy, with the
  rule's primal, on fresh copies of the inputs: the true derivative, mutation
  included as it really happens (a directional derivative along a random
  direction ``v``, so the cost does not grow with the input size);
* by the tape with the rule registered as a primitive, once per unused-output
  policy; a wrong cell is run again in watch mode for its diagnosis;
* by JAX with the rule adapted through `to_custom_vjp` (or the rule's own
  `custom_vjp`, adapted once per rule), under eager ``value_and_grad``.

Each engine's ``<gradient, v>`` is compared with the finite difference within
the rule's tolerance plus the finite-difference error (`_verdict`: no verdict
where that error, or a kink near the input, leaves the comparison open). A rule that raises
inside a context makes that cell "raised" and the run goes on; an operation
the tape cannot trace in a context program is gradguard's bug and raises
`TraceError`.
"""

from __future__ import annotations

import weakref
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from gradguard.checker import tolerances
from gradguard.checker.contexts._inputs import NoInput, draw_inputs, search, shapes_vary
from gradguard.checker.contexts._ops import jax_ops, numpy_ops, tape_ops
from gradguard.checker.contexts._verdict import compare, kink_excuse, rounding_bound
from gradguard.checker.contexts._programs import CONTEXTS, Context, NotApplicable, Plan, Signature, by_name, weights_like
from gradguard.checker.specs import RuleSpec, complex_convention_of, unused_cotangent_of
from gradguard.checker.trees import abs_inner, children, copy_tree, inner, is_leaf, leaves, rebuild
from gradguard.engines.errors import TraceError

__all__ = ["ENGINES", "Cell", "Outcome", "run_matrix", "safety_matrix"]

POLICIES = ("zero", "none", "skip")
ENGINES = tuple(f"tape[{p}]" for p in POLICIES) + ("jax",)


@dataclass
class Cell:
    engine: str
    status: str  # right | wrong | raised | skipped
    rel_error: float | None = None
    message: str | None = None
    diagnosis: str | None = None
    value: Any = None  # the program's value under this engine
    slope: float | None = None  # <gradient, v>

    def to_json(self, context: str) -> dict[str, Any]:
        return {"context": context, "engine": self.engine, "status": self.status, "rel_error": self.rel_error,
                "message": self.message, "diagnosis": self.diagnosis}


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
    # Kink evidence already gathered for a wrong <gradient, v> in this row: (slope, why no verdict or None).
    # Engines that agree on the slope (the tape under its three policies, often JAX) share it.
    kink_evidence: list[tuple[float, str | None]] = field(default_factory=list)
    tol: tolerances.Tolerance = tolerances.for_dtype("float64")
    mutates: bool = False  # the rule declares an argument mutation (JAX cannot run it faithfully)


@dataclass
class Outcome:
    """Everything the context checks need: the rows, the skipped contexts and the tolerance used."""

    rows: list[Row]
    skipped: list[dict[str, str]]
    engines: tuple[str, ...]
    tol: tolerances.Tolerance
    primitive_name: str
    descriptions: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "contexts": [r.context.name for r in self.rows],
            "engines": list(self.engines),
            "cells": [r.cells[e].to_json(r.context.name) for r in self.rows for e in self.engines],
            "skipped": list(self.skipped),
            "descriptions": dict(self.descriptions),
        }


def safety_matrix(rule: RuleSpec, *, seed: int = 0, contexts: Sequence[Any] | None = None,
                  engines: Sequence[str] | None = None) -> dict[str, Any]:
    """The safety matrix of ``rule`` as the report's JSON (see `gradguard.checker.contexts`)."""
    return run_matrix(rule, seed=seed, contexts=contexts, engines=engines).to_json()


def run_matrix(rule: RuleSpec, *, seed: int = 0, contexts: Sequence[Any] | None = None,
               engines: Sequence[str] | None = None) -> Outcome:
    chosen = CONTEXTS if contexts is None else by_name(contexts)
    engines = engines_for(rule) if engines is None else tuple(engines)
    for e in engines:
        if e not in ENGINES:
            raise ValueError(f"Got engine {e!r}; engines are {', '.join(ENGINES)}.")
    name = getattr(rule.primal, "__name__", None) or rule.name
    descriptions = {c.name: c.description for c in chosen}
    outcome = Outcome([], [], engines, tolerances.for_dtype("float64", rtol=rule.rtol, atol=rule.atol), name, descriptions)
    try:
        args, args2, output = draw_inputs(rule, seed)
    except NoInput as exc:
        outcome.skipped = [{"context": c.name, "reason": str(exc)} for c in chosen]
        return outcome
    sig = Signature(rule, args, args2, output)
    if not sig.diff:
        outcome.skipped = [{"context": c.name, "reason": "the rule has no differentiable argument"} for c in chosen]
        return outcome
    outcome.tol = tolerances.for_dtype(_lowest_dtype(args[i] for i in sig.diff), rtol=rule.rtol, atol=rule.atol)
    runners = _Runners(rule, name, args)
    if any(np.iscomplexobj(v) for v in leaves((args, output))):
        # The adapters do not convert between ChainRules' and JAX's conventions for complex tangents: the
        # engine foreign to the rule's convention (its kind's, or the one it declares) would be wrong for a right rule.
        runners.unsupported = "jax" if complex_convention_of(rule) != "jax" else "tape"
    planned: dict[str, tuple[Plan, np.random.Generator] | str] = {}  # a plan and its generator, or why none
    for ctx in chosen:
        rng = _generator(seed, ctx)
        try:
            planned[ctx.name] = (ctx.plan(sig, rng), rng)
        except NotApplicable as exc:
            planned[ctx.name] = str(exc)
    _search_shapes(rule, seed, [c for c in chosen if isinstance(planned[c.name], str)], planned, outcome)
    for ctx in chosen:
        if isinstance(planned[ctx.name], str):
            outcome.skipped.append({"context": ctx.name, "reason": planned[ctx.name]})
            continue
        plan, rng = planned[ctx.name]
        outcome.rows.append(_run_row(ctx, plan, weights_like(plan.inputs, rng), runners, engines, outcome.tol))
    return outcome


def _generator(seed: int, ctx: Context) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(ctx.name.encode())])


def _search_shapes(rule: RuleSpec, seed: int, unfit: list[Context], planned: dict[str, Any], outcome: Outcome) -> None:
    """Plans for the contexts the first draws did not fit, from further draws of the rule's own specs (where
    those draw their shapes); the report says how many draws were tried either way."""
    unfit = [c for c in unfit if c.search]
    if not unfit or not shapes_vary(rule, seed):
        return

    def fits(ctx: Context) -> Callable[[tuple[Any, ...], Any], bool]:
        return lambda args, output: ctx.plan(Signature(rule, args, None, output), np.random.default_rng(0)) is not None

    found = search(rule, seed, {c.name: fits(c) for c in unfit})
    for ctx in unfit:
        f = found[ctx.name]
        if f.args is None:
            planned[ctx.name] += f"; none of {f.tried} further draws from the argument specs fit"
            continue
        rng = _generator(seed, ctx)
        planned[ctx.name] = (ctx.plan(Signature(rule, f.args, None, f.output), rng), rng)
        outcome.descriptions[ctx.name] += (
            f" (the first draws did not fit; inputs: the richest of {f.fitting} fitting draws among {f.tried} "
            "further draws from the argument specs)"
        )


def engines_for(rule: RuleSpec) -> tuple[str, ...]:
    """The engines a rule's matrix runs by default: the tape hands an unused output's pullback None
    (``tape[none]``) only for rules whose declared convention says None can arrive (``unused_cotangent``)."""
    if unused_cotangent_of(rule) == "none":
        return ENGINES
    return tuple(e for e in ENGINES if e != "tape[none]")


def _lowest_dtype(values: Any) -> np.dtype:
    dts = [np.asarray(v).dtype for v in values]
    return min(dts, key=lambda d: -np.finfo(d).eps) if dts else np.dtype("float64")


# -- one context ------------------------------------------------------------------------------------


def _run_row(ctx: Context, plan: Plan, v: tuple, runners: "_Runners", engines: tuple[str, ...],
             tol: tolerances.Tolerance) -> Row:
    from gradguard.engines.fd import budget, confirmed

    row = Row(ctx, tol=tol, mutates=bool(runners.rule.mutates))
    users = numpy_ops(runners.rule.primal)

    def program(*xs: Any) -> Any:
        return plan.program(users, plan.consts, *xs)

    try:
        row.value = _scalar(program(*copy_tree(plan.inputs)))
        fd = confirmed(program, plan.inputs, v, **{"complex_step": False, **budget(plan.inputs)})
        row.slope, row.fd_step = float(np.real(fd.value)), fd.step
        row.fd_error = max(fd.error, rounding_bound(plan.inputs, row.value, fd.step))
    except Exception as exc:  # noqa: BLE001 - the primal failed in this context: no ground truth
        row.truth_error = _text(exc.__cause__ or exc)
    for engine in engines:
        cell = runners.run(engine, ctx, plan)
        if cell.status == "ran":
            cell.value, grads = cell.value
            cell.slope = inner(grads, v)
            _judge(cell, row, runners, plan, v, program, abs_inner(grads, v))
            if cell.status == "wrong" and engine.startswith("tape"):
                cell.diagnosis = runners.diagnose(engine, plan)
        row.cells[engine] = cell
    return row


def _judge(cell: Cell, row: Row, runners: "_Runners", plan: Plan, v: tuple, program: Callable[..., Any],
           scale: float) -> None:
    if row.slope is None:
        cell.status = "skipped"
        cell.message = f"no ground truth: the program raised under plain NumPy ({row.truth_error})"
        return
    a, b = cell.slope, row.slope
    cell.status, cell.message = compare(a, b, row.fd_error, row.tol, scale)
    if np.isfinite(a):
        cell.rel_error = float(abs(a - b) / max(abs(b), row.tol.atol))
    if cell.status == "wrong" and np.isfinite(a):
        excuse = _kink_excuse(cell, row, runners, plan, v, program, scale)
        if excuse:
            cell.status, cell.message = "skipped", excuse


def _kink_excuse(cell: Cell, row: Row, runners: "_Runners", plan: Plan, v: tuple, program: Callable[..., Any],
                 scale: float) -> str | None:
    """Why a wrong-looking cell is no verdict because of kinks near the input (None: it is wrong), asked once
    per distinct slope in the row."""
    a, b = cell.slope, row.slope
    excuse = next((why for seen, why in row.kink_evidence if tolerances.close(seen, a, row.tol, scale=scale)), False)
    if excuse is False:

        def answer(args: tuple[Any, ...] | None) -> float:
            """The engine's <gradient, v> at ``args`` (the plan's inputs for None)."""
            moved = runners.run(cell.engine, row.context, plan if args is None else replace(plan, inputs=tuple(args)))
            if moved.status != "ran":
                raise RuntimeError(moved.message)
            return inner(moved.value[1], v)

        excuse = kink_excuse(lambda *xs: _scalar(program(*xs)), answer, plan.inputs, v, engine=cell.engine, slope=a,
                             truth=b, fd_error=row.fd_error, step=row.fd_step, tol=row.tol, scale=scale)
        row.kink_evidence.append((a, excuse))
    return excuse


def _scalar(value: Any) -> float:
    return float(np.real(np.asarray(value)))


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# -- the engines ------------------------------------------------------------------------------------


class _Runners:
    """The rule as each engine sees it, built once per matrix (JAX compilations are kept per rule)."""

    def __init__(self, rule: RuleSpec, name: str, example_args: tuple) -> None:
        from gradguard.engines.tape import primitive

        self.rule = rule
        self.name = name
        self.primitive = primitive(_numpy_rrule(rule), name=name, nondiff=tuple(sorted(rule.nondiff)))
        self.example_args = example_args

    unsupported: str | None = None  # the engine family that cannot run this rule faithfully

    def run(self, engine: str, ctx: Context, plan: Plan) -> Cell:
        if self.unsupported and engine.startswith(self.unsupported):
            return Cell(engine, "skipped", message=(
                f"complex values: the {engine} adapter does not convert between the ChainRules and JAX "
                "conventions for complex tangents"))
        if engine == "jax":
            return self._jax(ctx, plan)
        policy = engine[len("tape[") : -1]
        try:
            result = self._tape(plan, policy, watch=False)
        except TraceError:
            raise  # a context used an operation the tape lacks: our bug, not the rule's
        except Exception as exc:  # noqa: BLE001 - the rule raised inside the program
            return Cell(engine, "raised", message=_text(exc))
        return Cell(engine, "ran", value=(_scalar(result.value), result.grads))

    def _tape(self, plan: Plan, policy: str, watch: bool) -> Any:
        from gradguard.engines.tape import run_backward

        ops = tape_ops(self.primitive)
        with np.errstate(all="ignore"):
            return run_backward(lambda *xs: plan.program(ops, plan.consts, *xs), copy_tree(plan.inputs), 1.0,
                                unused=policy, watch=watch)

    def diagnose(self, engine: str, plan: Plan) -> str | None:
        """The watch mode's account of a wrong tape cell, in plain words (None when nothing was mutated)."""
        try:
            result = self._tape(plan, engine[len("tape[") : -1], watch=True)
        except Exception:  # noqa: BLE001 - the diagnosis is informative only
            return None
        first = {}  # one sentence per (capturing op, mutator): dot(x, x) captures x twice
        for d in result.diagnoses:
            first.setdefault((d.op, d.op_step, d.mutated_by, d.mutated_step), d.message)
        return " ".join(first.values()) or None

    def _jax(self, ctx: Context, plan: Plan) -> Cell:
        try:
            fn = _jax_function(self, ctx, plan)
        except ImportError as exc:
            return Cell("jax", "skipped", message=f"JAX is not available: {exc}")
        from gradguard.engines.jax_engine import relaying

        try:
            with relaying():
                value, grads = fn(plan.consts, *plan.inputs)
        except TraceError:
            raise
        except Exception as exc:  # noqa: BLE001 - includes AdapterError for a mutating rule
            return Cell("jax", "raised", message=_text(exc))
        grads = tuple(np.conj(np.asarray(g)) if np.iscomplexobj(g) else np.asarray(g) for g in grads)
        return Cell("jax", "ran", value=(_scalar(value), grads))


def _numpy_rrule(rule: RuleSpec) -> Callable[..., Any]:
    if rule.kind != "jax":
        return rule.rrule

    def rrule(*args: Any) -> Any:  # a JAX rule's rrule may hand back JAX arrays: the tape tracks NumPy ones
        out, pullback = rule.rrule(*args)
        return _to_numpy(out), lambda g: pullback(g)

    return rrule


def _to_numpy(tree: Any) -> Any:
    if not is_leaf(tree):
        return rebuild(tree, (_to_numpy(t) for t in children(tree)))
    return np.asarray(tree) if hasattr(tree, "__array__") and not isinstance(tree, np.ndarray) else tree


# The adapted rule per live rule (its host callbacks and output shapes are cached inside it).
_ADAPTED: "weakref.WeakKeyDictionary[RuleSpec, Any]" = weakref.WeakKeyDictionary()


def _jax_function(runners: _Runners, ctx: Context, plan: Plan) -> Callable[..., Any]:
    """``value_and_grad(program)`` with the rule as a JAX function, run eagerly.

    JAX compiles each primitive once per shape and keeps it for every later
    rule, which costs far less than compiling every context program with
    ``jit`` (seconds per rule) and is as fast once warm.
    """
    import jax

    from gradguard.engines.jax_engine import to_custom_vjp
    from gradguard.engines.jax_engine._runtime import load

    load()
    rule = runners.rule
    adapted = _ADAPTED.get(rule)
    if adapted is None:
        if rule.kind == "jax" and rule.jax_fn is not None:
            adapted = rule.jax_fn
        else:
            adapted = to_custom_vjp(rule.rrule, nondiff=tuple(sorted(rule.nondiff)), name=runners.name,
                                    example_args=copy_tree(runners.example_args))
        _ADAPTED[rule] = adapted
    ops = jax_ops(adapted)
    program = plan.program

    def run(consts: Any, *xs: Any) -> Any:
        return program(ops, consts, *xs)

    return jax.value_and_grad(run, argnums=tuple(range(1, len(plan.inputs) + 1)))

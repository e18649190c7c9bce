"""Context checks (GG5xx): the rule inside adversarial programs, under every engine (the safety matrix).

The matrix (`gradguard.checker.contexts`) is computed once per rule, by whichever of
these checks runs first, and left in ``PerRule.shared`` (the runner stores it in
``RuleResult.safety_matrix``; checks return problems and never write results). A wrong
cell in an aliasing context (the same array twice, ``x`` and ``x.T``, tied
weights) is GG502; a wrong cell elsewhere is GG501; GG503 is a program whose
value under an engine differs from what users run, or engines that disagree
where finite differences cannot settle it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from gradguard.checker import tolerances
from gradguard.checker.checks._state import primal_irreproducibility_seen
from gradguard.checker.checks.registry import Problem, Skip, check
from gradguard.checker.inputs import show_apart
from gradguard.checker.options import SAFETY_MATRIX
from gradguard.checker.problems import ContextReplay
from gradguard.checker.contexts import Outcome, engine, run_matrix
from gradguard.checker.contexts._matrix import BASELINE, no_verdict

if TYPE_CHECKING:
    from gradguard.checker.options import PerRule
    from gradguard.checker.contexts._matrix import Row

__all__: list[str] = []

def outcome_for(ctx: "PerRule") -> Outcome:
    """The rule's safety matrix, computed once and shared by GG501-GG503."""
    if SAFETY_MATRIX not in ctx.shared:
        settings = {"jax_column": ctx.options.jax_column} if ctx.options.jax_column else None
        ctx.shared[SAFETY_MATRIX] = run_matrix(ctx.rule, seed=ctx.options.seed, settings=settings)
    outcome = ctx.shared[SAFETY_MATRIX]
    if not outcome.rows:
        reasons = "; ".join(f"{s['context']}: {s['reason']}" for s in outcome.skipped[:3])
        raise Skip(f"no context applies to this rule ({reasons})")
    return outcome


def _wrong(row: "Row", baseline: "Row | None" = None) -> list[str]:
    """Engines whose gradient is wrong in this context although they compute the program users run (a
    different value is GG503's finding) and are right in the baseline program (a rule wrong even there is
    wrong alone: the isolation checks report it, not every context again)."""
    return [
        e for e, c in row.cells.items()
        if c.status == "wrong" and not _value_differs(row, e) and _shown_right_alone(baseline, row, e)
    ]


def _shown_right_alone(baseline: "Row | None", row: "Row", name: str) -> bool:
    """Whether engine ``name``'s wrong cell in ``row`` can be the context's doing: the baseline program does not show
    the rule wrong on its own. Where finite differences gave no verdict in the baseline (its input on a jump or a
    kink), an aliasing row asks the baseline at a generic input (`Row.elsewhere`): a two-input surrogate spike
    (BrainPy's, whose aliased pullbacks add up exactly as JAX's gradient of f(x, x) does) was reported for not
    accumulating under aliasing at the seeds whose baseline input sat on its jump; elsewhere its baseline is wrong,
    the surrogate's own doing. A maximum that doubles a tie stays right off the tie, and its aliasing finding
    stands."""
    if baseline is None or baseline is row:
        return True
    cell = baseline.cells.get(name)
    if cell is None:
        return True
    if cell.status == "wrong":
        return False
    if no_verdict(cell) and row.context.aliasing and baseline.elsewhere is not None:
        # GG502 blames accumulation over aliases; a rule wrong on its own is GG201's, and GG501 (whose other
        # contexts are true, if redundant, about such a rule) keeps its findings
        other = baseline.elsewhere.cells.get(name)
        return other is None or other.status != "wrong"
    return True


def _baseline(outcome: Outcome) -> "Row | None":
    return next((r for r in outcome.rows if r.context.name == BASELINE), None)


def _context_rows(outcome: Outcome, aliasing: bool) -> list["Row"]:
    """The rows with a finding: the baseline when the rule is wrong even there (once), and every other
    context where an engine right in the baseline is wrong."""
    base = _baseline(outcome)
    return [row for row in outcome.rows if row.context.aliasing == aliasing and _wrong(row, base)]


def _nothing_judged(outcome: Outcome, aliasing: bool) -> str | None:
    """Why no cell of these contexts was judged, or None where one was: every engine raised or was skipped in every
    one of them (a sparse argument the PyTorch column could not take read as a pass with every cell "raised"). A
    check that judged no cell has established nothing, and says so as a skip, never as a pass."""
    rows = [r for r in outcome.rows if r.context.aliasing == aliasing]
    cells = [(r.context.name, e, c) for r in rows for e, c in r.cells.items()]
    if not cells or any(c.status in ("right", "wrong") for _, _, c in cells):
        return None
    raised = [(name, e, c) for name, e, c in cells if c.status == "raised"]
    name, e, c = (raised or cells)[0]
    what = ("raised" if len(raised) == len(cells) else "raised or was skipped") if raised else "was skipped"
    return (f"no cell of the safety matrix was judged: every engine {what} in every context "
            f"(the first, {e} in `{name}`: {c.message or c.status})")


def _value_differs(row: "Row", name: str) -> bool:
    # An engine that cannot mutate (JAX) drops a declared mutation (an unused output's callback), which changes
    # its value by design.
    cell = row.cells[name]
    if row.value is None or cell.value is None or (row.mutates and not engine(name).runs_mutation):
        return False
    return not _close(cell.value, row.value, _value_tol(row))


def _value_tol(row: "Row") -> tolerances.Tolerance:
    """The tolerance two runs of the program's value are held to: the row's, or that of the precision the rule computes
    its output in where that is coarser. fairscale's TargetScoreFunction casts its scores with .float() (an upcast
    from half precision, a downcast from float64): on a transposed view its float32 sums round otherwise than on the
    contiguous input, and 0.00141087 against 0.00141087 read as a different function under AD."""
    if not row.computed_at or row.computed_at <= float(np.finfo(np.float64).eps):
        return row.tol
    coarse = tolerances.for_dtype(np.float32 if row.computed_at <= float(np.finfo(np.float32).eps) else np.float16)
    return tolerances.Tolerance(rtol=max(row.tol.rtol, coarse.rtol), atol=max(row.tol.atol, coarse.atol))


def _right(outcome: Outcome, aliasing: bool) -> list[str]:
    return [r.context.name for r in outcome.rows if r.context.aliasing == aliasing and not _wrong(r, _baseline(outcome))]


def _problem(outcome: Outcome, row: "Row", fix: str, also: str = "") -> Problem:
    engines = _wrong(row, _baseline(outcome))
    worst = max((row.cells[e].rel_error or 0.0 for e in engines), default=0.0)
    diagnosis = next((row.cells[e].diagnosis for e in engines if row.cells[e].diagnosis), None)
    nonfinite = [e for e in engines if row.cells[e].rel_error is None]
    error = "a non-finite gradient" if nonfinite and worst == 0.0 else f"relative error {worst:.1e}"
    if error.startswith("relative") and row.slope is not None and abs(row.slope) <= row.tol.atol:
        # a relative error against a gradient of 0 is the error over the tolerance's floor: 6.8e+08 said nothing
        off = max((abs(row.cells[e].slope - row.slope) for e in engines if row.cells[e].slope is not None), default=None)
        if off is not None:
            error = f"{off:.3g} where the program's gradient is 0"
    message = (
        f"in context `{row.context.name}` ({row.context.description}) the gradient of the program is wrong "
        f"under {', '.join(engines)} ({error}){also or '.'}"
    )
    if diagnosis:
        message += f" Watch mode: {diagnosis}"
    slopes = {e: row.cells[e].slope for e in engines if row.cells[e].slope is not None}
    actual = "; ".join(f"{e}: {slope:.6g}" for e, slope in slopes.items())
    if row.slope is not None and slopes:  # the engine furthest off: an approximate primal moves every engine alike
        hint = tolerances.approximation_hint(row.slope, max(slopes.values(), key=lambda s: abs(s - row.slope)), row.tol)
        if hint and not diagnosis:
            # Nothing established the context's own hazard (no watch-mode account), and the sides nearly agree: a
            # deep-equilibrium layer's solve, 1e-7 off its fixed point, failed fan-out at 2.6e-6 relative, and a fix
            # that began "the pullback must treat its cotangent as read-only" named a cause nobody had seen.
            fix = f"{hint.strip()} If it computes its function exactly: {fix[0].lower()}{fix[1:]}"
        else:
            fix += hint
    return Problem(
        message=message,
        location=f"context {row.context.name}",
        expected=f"<gradient, v> = {row.slope:.6g} (finite differences of the whole program)",
        actual=actual or None,
        fix=fix,
    )


_FIXES = {
    "output-unused": (
        "The pullback must give zero tangents when the output is unused (a zero or None cotangent): multiply "
        "every tangent by the cotangent and treat None as zero."
    ),
    BASELINE: (
        "The rule is wrong even in the simplest program that uses its output; fix the pullback first, the other "
        "contexts are judged against this one. The isolation checks (GG201) judge it at their own inputs; where "
        "they found nothing, this program's inputs are ones they did not draw: run the reproducer. A gradient that "
        "is not the derivative on purpose (a straight-through estimator, a surrogate gradient) is wrong in every "
        "program by design: leave the checks it fails that way out for this rule with ignore= in its declaration "
        "(ignore=[\"GG201\", \"GG203\", \"GG501\"]; leaving out GG501 leaves out its other contexts too, while "
        "GG502 and GG503 still run)."
    ),
    "called-twice": (
        "Either the pullback reads state that a second call of the rule overwrites (a shared buffer, cache or "
        "global): keep each call's residuals in the pullback's own closure; or it is wrong at the second call's "
        "input alone: run the reproducer, and see whether the isolation checks (GG201) fail there too."
    ),
    "fan-out": (
        "The pullback must treat its cotangent as read-only and must not keep it: engines share one cotangent "
        "buffer among the consumers of an output."
    ),
    # Either way: the view programs draw their own input, and a rule wrong there for another reason (AutoGrad.jl's
    # max giving every tie the whole cotangent, at an input with ties) fails them as it fails GG201.
    "strided-view": (
        "Either the rule assumes contiguous arguments (flat buffers, fixed strides, reshape(-1) writes that land in "
        "a copy): index by shape, use np.ascontiguousarray on input, and build tangents with np.zeros(x.shape); or "
        "the pullback is wrong at this program's input whatever its layout: run the reproducer, and see whether the "
        "isolation checks (GG201) fail there too."
    ),
    "transposed-view": (
        "Either the rule assumes C-ordered arguments (memory order, .ravel()/.reshape(-1) writes into a copy of a "
        "Fortran-ordered view): index by shape and build tangents with np.zeros(x.shape) in C order; or the "
        "pullback is wrong at this program's input whatever its layout: run the reproducer, and see whether the "
        "isolation checks (GG201) fail there too."
    ),
}
# Memory layout is NumPy's and PyTorch's: a JAX array has none, and the view contexts hand a JAX rule the values the
# other programs do (a NumPy fix about memory order sent a JAX rule's author looking for a bug that cannot exist).
_NO_LAYOUT = ("A JAX array has no memory order: this program hands the rule the drawn input's own values ({how}), and "
              "only its random cotangent and direction differ from the other programs', so the pullback is wrong for "
              "this cotangent at this input. Run the reproducer, and see whether the isolation checks (GG201, GG202) "
              "fail there too.")
_TORCH_LAYOUT = ("The Function assumes {what} tensors (.view() on its input, fixed strides, data_ptr arithmetic, an "
                 "in-place write into a .reshape() that copied): call .contiguous() on its inputs, and index by shape.")
_KIND_FIXES = {
    ("jax", "strided-view"): _NO_LAYOUT.format(how="through x[::2]"),
    ("jax", "transposed-view"): _NO_LAYOUT.format(how="through x.T"),
    ("torch", "strided-view"): _TORCH_LAYOUT.format(what="contiguous"),
    ("torch", "transposed-view"): _TORCH_LAYOUT.format(what="row-major"),
}


def _mutation_fix(outcome: Outcome, rule_mutates: bool, unsafe: list[str]) -> str:
    safe = ", ".join(_right(outcome, False)) or "none"
    return (
        f"`{outcome.primitive_name}` mutates {'its argument' if rule_mutates else 'an array'} in place, so it is "
        f"unsafe where another operation captured that array before the call or reads it after "
        f"({', '.join(unsafe)}); safe here: {safe}. Make the rule safe: return a new array instead of mutating "
        "(y = a + 1, not a += 1), or copy before mutating (a = a.copy()); "
        + ("it declares the mutation (mutates=), so if in-place is the point, keep it out of these contexts: "
           "never pass it an array that other operations have captured or read afterwards."
           if rule_mutates else
           "if in-place is the point, declare mutates= and never pass it an array that other operations have "
           "captured.")
    )


@check(
    "GG501",
    family="context",
    title="wrong gradient in a context (safety-matrix cell)",
    per_rule=True,
    given="""
        def addone_(a):
            a += 1
            return a.sum()

        def addone(a):
            return (a + 1).sum()
    """,
    broken="""
        @rrule(addone_, arrays(shape=(3,)), mutates=(0,))
        def addone_rrule(a):
            y = addone_(a)                       # a += 1: dot(a, a) computed earlier reads the new a
            return y, lambda ybar: (None,) if ybar is None else (np.full(a.shape, ybar),)
    """,
    fixed="""
        @rrule(addone, arrays(shape=(3,)))
        def addone_rrule(a):
            y = (a + 1).sum()                    # a new array: nothing anyone captured changes
            return y, lambda ybar: (None,) if ybar is None else (np.full(a.shape, ybar),)
    """,
)
def wrong_in_context(ctx: "PerRule") -> Iterable[Problem]:
    """A rule that is right in isolation can still give a wrong gradient inside a program: it mutates an array
    an earlier pullback captured by reference (``y = dot(x, x); addone_(x)``), it keeps state a second call
    overwrites, it assumes contiguous memory, or its pullback misbehaves when the output is unused. Each
    context embeds the rule in such a program and compares every engine's gradient with finite differences of
    the whole program, which sees mutation as it really happens. One finding per wrong context, with the
    engines, the relative error and the watch mode's account of which capture was mutated by whom. A wrong
    fan-out or view context runs its twin, the same program without the context's hazard (a cotangent of the
    pullback's own, contiguous copies of the views): an engine right there shows the hazard is the cause, and one
    as wrong there shows the gradient is wrong at that input whatever the context; the finding says which."""
    outcome = outcome_for(ctx)
    if (why := _nothing_judged(outcome, aliasing=False)) is not None:
        raise Skip(why)
    rows = _context_rows(outcome, aliasing=False)
    base = _baseline(outcome)
    mutated = [r.context.name for r in rows
               if any(f"`{outcome.primitive_name}`" in (r.cells[e].diagnosis or "") for e in _wrong(r, base))]
    for row in rows:
        if row.context.name in mutated or (ctx.rule.mutates and row.context.name in ("captured-before", "read-after")):
            fix = _mutation_fix(outcome, bool(ctx.rule.mutates), mutated or [row.context.name])
        else:
            fix = _KIND_FIXES.get((ctx.rule.kind, row.context.name)) or _FIXES.get(row.context.name, (
                "The pullback is wrong in this program although it may pass in isolation: compare its tangents "
                "with finite differences on the inputs this context passes (see the reproducer)."
            ))
            fix, also = _twin_said(ctx, outcome, row, fix)
            yield _reproducible(ctx, "GG501", outcome, row, _problem(outcome, row, fix, also=also))
            continue
        yield _reproducible(ctx, "GG501", outcome, row, _problem(outcome, row, fix))


def _reproducible(ctx: "PerRule", check_id: str, outcome: Outcome, row: "Row", problem: Problem) -> Problem:
    engines = _wrong(row, _baseline(outcome))
    problem.replay = ContextReplay(row.context.name, tuple(engines))  # the runner writes the reproducer
    return problem


@check(
    "GG502",
    family="context",
    title="aliased arguments: gradient does not accumulate",
    per_rule=True,
    given="""
        def mul(a, b):
            return a * b
    """,
    broken="""
        @rrule(mul, arrays(shape=(3,)), arrays(shape=(3,)))
        def mul_rrule(a, b):
            if a is b:                            # "helpfully" returns the total derivative in both slots
                return a * b, lambda g: (2 * g * a, 2 * g * a)
            return a * b, lambda g: (g * b, g * a)
    """,
    fixed="""
        @rrule(mul, arrays(shape=(3,)), arrays(shape=(3,)))
        def mul_rrule(a, b):
            return a * b, lambda g: (g * b, g * a)  # one partial per slot; the engine adds them
    """,
)
def aliases_accumulate(ctx: "PerRule") -> Iterable[Problem]:
    """When one array reaches a rule through several slots (``f(x, x)``, ``f(x, x.T)``, tied weights ``W`` and
    ``W.T``), the gradient with respect to that array is the sum of the per-slot tangents, and engines add them.
    A rule that special-cases aliasing, writes into one argument while reading another, or mutates ``W`` that a
    transposed use shares, breaks that sum (seed: gradients with aliased variables and tied weights). One array
    is passed in two slots only where each slot's declared range (``arrays(min_value=, max_value=)``) and
    structure hold it; the skip says so where no draw can."""
    outcome = outcome_for(ctx)
    if not any(r.context.aliasing for r in outcome.rows):
        if outcome.outside_domain:
            raise Skip("no aliasing context applies: " + "; ".join(f"{name}: {why}" for name, why in outcome.outside_domain.items()))
        raise Skip("no aliasing context applies (needs two array arguments of one shape, x and x.T, or a 2-D W)")
    if (why := _nothing_judged(outcome, aliasing=True)) is not None:
        raise Skip(why)
    fix = (
        "Return each slot's own partial derivative, computed as if the slots were distinct arrays; engines sum "
        "them over aliases. Do not branch on `a is b` or np.shares_memory, do not write into one argument "
        "while reading another (copy first), and do not mutate weights that a transposed view may share."
    )
    for row in _context_rows(outcome, aliasing=True):
        alone = _wrong_whatever_the_aliasing(outcome, row)
        problem = _problem(outcome, row, fix) if alone is None else _problem(outcome, row, _ALONE_FIX, also=alone)
        yield _reproducible(ctx, "GG502", outcome, row, problem)


_ALONE_FIX = (
    "The pullback is wrong at this input on its own, with equal values in the two slots (a tie that gives each slot "
    "the whole cotangent where they should share it, a removable singularity where two arguments meet, a formula that "
    "divides by their difference): compare its tangents with finite differences there (see the reproducer). The "
    "isolation checks (GG201) judge the rule at the inputs they draw, which may never put equal values in two slots."
)


def _twin(outcome: Outcome, row: "Row") -> tuple[bool, str] | None:
    """How the engines wrong in ``row`` fare in its twin (`Row.twin`: the same program, inputs and weights without the
    context's hazard): (True, their error there) where every one is wrong there too, so the gradient is wrong at this
    input whatever the context; (False, "") where every one is right there, so the context's hazard is the cause;
    None where they split, or the twin did not run."""
    twin = row.twin
    engines = _wrong(row, _baseline(outcome))
    if twin is None or not engines or any(twin.cells.get(e) is None for e in engines):
        return None
    statuses = {twin.cells[e].status for e in engines}
    if statuses == {"right"}:
        return False, ""
    if statuses != {"wrong"}:
        return None
    errors = [twin.cells[e].rel_error for e in engines]
    return True, ("a non-finite gradient" if any(r is None for r in errors)
                  else f"relative error {max(r for r in errors if r is not None):.1e}")


def _wrong_whatever_the_aliasing(outcome: Outcome, row: "Row") -> str | None:
    """The sentence GG502 adds where every engine wrong in an aliasing row is wrong too in its twin with distinct
    arrays of the same values: the rule is wrong at this input, not in accumulating over aliases (jaxoplanet's cel at
    p = 1 - k2). None where some engine is right there, or the twin did not run."""
    verdict = _twin(outcome, row)
    if verdict is None or not verdict[0]:
        return None
    return (f", and wrong too when the slots get distinct arrays of the same values ({verdict[1]}): the gradient is "
            f"wrong at this input whatever the aliasing, not in how the rule accumulates over aliases. The input: "
            f"{row.shown_inputs}.")


# GG501's twins (`Plan.twin`): what the twin changed, and what its verdict establishes. A FlashAttention Function whose
# forward clamps a sum that its backward differentiates unclamped was wrong in fan-out and transposed-view, and the
# fixes spoke of cotangents written in place and of memory order; it was as wrong with a cotangent of its own and
# on contiguous tensors.
_TWINS = {
    "fan-out": ("when its output reaches the consumers through one copy, so that the pullback gets a cotangent of its "
                "own", "the pullback is wrong for this cotangent at this input, not in how it treats a shared "
                "cotangent", "the pullback goes wrong on the cotangent buffer the engine shares among the consumers"),
    "strided-view": ("when the views are passed as contiguous copies of the same values",
                     "the gradient is wrong at this program's input whatever its layout, not in how the rule reads "
                     "strided views", "the rule depends on its arguments' memory layout"),
    "transposed-view": ("when the views are passed as C-ordered copies of the same values",
                        "the gradient is wrong at this program's input whatever its layout, not in how the rule reads "
                        "Fortran-ordered views", "the rule depends on its arguments' memory layout"),
}
_WHATEVER_THE_CONTEXT = {
    "fan-out": (
        "The pullback is wrong for this cotangent at this input, whoever else receives the output: compare its "
        "tangents with finite differences there (see the reproducer), and see whether the isolation checks (GG201, "
        "GG202) fail there too; they draw their own inputs and cotangents."
    ),
    "view": (
        "The pullback is wrong at this program's input whatever its memory layout: compare its tangents with finite "
        "differences there (see the reproducer), and see whether the isolation checks (GG201, GG202) fail there too; "
        "they draw their own inputs and cotangents."
    ),
}
# A NumPy rule right on copies of its views: the first half of the view contexts' either-or fix, established.
_LAYOUT_FIXES = {
    "strided-view": (
        "The rule assumes contiguous arguments (flat buffers, fixed strides, reshape(-1) writes that land in a copy): "
        "index by shape, use np.ascontiguousarray on input, and build tangents with np.zeros(x.shape)."
    ),
    "transposed-view": (
        "The rule assumes C-ordered arguments (memory order, .ravel()/.reshape(-1) writes into a copy of a "
        "Fortran-ordered view): index by shape and build tangents with np.zeros(x.shape) in C order."
    ),
}


def _twin_said(ctx: "PerRule", outcome: Outcome, row: "Row", fix: str) -> tuple[str, str]:
    """GG501's fix and the sentence its message ends with, after the row's twin: the context's hazard established (the
    twin is right), or the gradient wrong at this input whatever the context (the twin is as wrong)."""
    name = row.context.name
    verdict = _twin(outcome, row)
    if name not in _TWINS or verdict is None or (ctx.rule.kind == "jax" and row.context.views):
        return fix, "."  # a JAX array has no layout: its view programs' twins are the programs themselves
    what, whatever, depends = _TWINS[name]
    wrong_too, error = verdict
    if wrong_too:
        return (_WHATEVER_THE_CONTEXT["view" if row.context.views else name],
                f", and wrong too {what} ({error}): {whatever}.")
    return (_LAYOUT_FIXES.get(name, fix) if ctx.rule.kind == "numpy" else fix), f", and right {what}: {depends}."


def _primal_fix(rule: Any) -> str:
    """GG503's fix for a forward that is not its primal, in the rule kind's terms (GG102's, with the branch on
    being differentiated that GG503's seed programs show)."""
    from gradguard.checker.checks.contract import primal_fix

    if rule.kind == "numpy":
        return ("Make the forward pass compute the primal: do not branch on engines.within_gradient, a training "
                "flag or the engine's array type, and return primal(*args) as the rrule's output.")
    return primal_fix(rule)


@check(
    "GG503",
    family="context",
    title="engines disagree (e.g. a branch on within_gradient)",
    per_rule=True,
    given="""
        MASK = np.array([2.0, 0.0, 2.0, 0.0])     # inverted dropout's mask, as in training

        def dropout_eval(x):
            return x                                  # at inference dropout is the identity
    """,
    broken="""
        @rrule(dropout_eval, arrays(shape=(4,)))
        def dropout_rrule(x):
            y = x * MASK                          # the training branch: engines see different programs
            return y, lambda ybar: (ybar * MASK,)
    """,
    fixed="""
        @rrule(dropout_eval, arrays(shape=(4,)))
        def dropout_rrule(x):
            return dropout_eval(x), lambda ybar: (ybar,)
    """,
)
def engines_disagree(ctx: "PerRule") -> Iterable[Problem]:
    """Every engine must differentiate the program users run. When code branches on "am I being
    differentiated?" (``gradguard.engines.within_gradient``, a training flag) or a rule's forward is not its primal, the
    program computes one value when run and another under AD, and engines that take different branches
    disagree with each other (seed: Zygote, Diffractor and Yota give 4.0, 4.0 and 2.0 for
    ``x -> within_gradient(x) ? x^2 : x``). Reported once per rule, naming the contexts and the values."""
    outcome = outcome_for(ctx)
    tol = outcome.tol
    value_gaps: list[str] = []
    splits: list[str] = []
    gap_views: list[bool] = []  # per context with a value gap: whether it passes non-contiguous views
    agreed_contiguous = False  # some context without views compared its value and agreed
    for row in outcome.rows:
        ran = {e: c for e, c in row.cells.items() if c.slope is not None}
        if row.value is not None:
            off = [e for e in ran if _value_differs(row, e)]
            if ran and not off and not row.context.views:
                agreed_contiguous = True
            if off:
                gap_views.append(row.context.views)
                apart = [show_apart(float(ran[e].value), float(row.value)) for e in off]  # the digits that differ
                shown = ", ".join(f"{e} {a}" for e, (a, _) in zip(off, apart))
                value_gaps.append(f"`{row.context.name}`: {shown} vs {apart[0][1]} when run")
        elif len(ran) >= 2:
            slopes = sorted(ran.items(), key=lambda kv: kv[1].slope)
            (e1, c1), (e2, c2) = slopes[0], slopes[-1]
            if not _close(c1.slope, c2.slope, tol):
                splits.append(f"`{row.context.name}`: {e1} {c1.slope:.6g} vs {e2} {c2.slope:.6g}")
    if value_gaps and (why := primal_irreproducibility_seen()):
        # values from separate runs of a primal that does not reproduce its own value (it samples noise):
        # their difference proves nothing about AD differentiating another function
        if not splits:
            raise Skip(f"the primal does not reproduce its own value ({why}), so a program's value under AD and when "
                       "run, two separate runs, may differ by that alone")
        value_gaps = []
    if value_gaps:
        only_views = all(gap_views) and agreed_contiguous
        yield Problem(
            message=(
                "the program computes a different value under AD than when run, so AD differentiates a different "
                f"function from the one users run: {'; '.join(value_gaps)}."
                + (" The values differ only in the contexts that pass arguments as non-contiguous views (strided or "
                   "transposed); the other contexts' values agree." if only_views else "")
            ),
            location="context " + value_gaps[0].split("`")[1],
            expected="the same value under every engine as under plain NumPy",
            actual=value_gaps[0],
            fix=(
                "Make the forward pass and the primal compute the same value for a non-contiguous view as for a "
                "contiguous array of the same values: code that reads memory with assumed strides "
                "(np.lib.stride_tricks.as_strided with strides computed from the shape, a reshape of raw buffers) "
                "sees other numbers in a view; take np.ascontiguousarray(x) first, or use x.strides."
                if only_views else
                _primal_fix(ctx.rule)
            ),
        )
    if splits:
        yield Problem(
            message=(
                "the engines give different gradients where finite differences cannot settle it (the program "
                f"raised under plain NumPy): {'; '.join(splits)}."
            ),
            location="context " + splits[0].split("`")[1],
            fix="Make the primal run on the inputs the rule accepts, so the program has a ground truth.",
        )


def _close(a: Any, b: Any, tol: tolerances.Tolerance) -> bool:
    """Values (or slopes) that agree: NaN against NaN is the same result, not a different value."""
    if a is None or b is None:
        return False
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or tolerances.close(a, b, tol)

"""State checks (GG4xx): a rule must behave like a pure function of its inputs and cotangent.

AD engines capture arrays by reference, run pullbacks late, out of order, more
than once or not at all, and keep earlier results around. A rule that writes
into arrays it does not own, returns memory it shares with its inputs, keeps
residuals in state shared across calls, or depends on hidden randomness gives
wrong gradients in real programs while passing every isolated test.

Mutation checks (GG401, GG402) compare exactly (NaN-aware): any change is a
write. Repeat-call checks (GG403, GG404, GG406) compare with the per-dtype
tolerance table, so floating-point noise from a parallel reduction is not a
finding, but accumulation, stale buffers and random numbers are.

This module holds what a rule writes and shares (GG401, GG402, GG405); the repeat-call checks are in
state_repeat.py, and what both compare with in _state.py.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from gradguard.checker.case import Case
from gradguard.checker.checks._state import argument_labels, argument_name, first_change
from gradguard.checker.checks.registry import Problem, check
from gradguard.checker.trees import is_leaf, leaves

__all__: list[str] = []

_TooHard = getattr(getattr(np, "exceptions", np), "TooHardError", Exception)
_SHARES_MEMORY_WORK = 10**6  # bound on np.shares_memory's exact search; beyond it, assume overlap


def _aliases(a: Any, b: Any) -> bool:
    """Whether two arrays share memory (exactly, within a work bound; beyond it, whether their ranges overlap)."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.size == 0 or b.size == 0:
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=_SHARES_MEMORY_WORK))
    except _TooHard:
        return bool(np.may_share_memory(a, b))


@check(
    "GG401",
    family="state",
    title="forward mutates an argument not declared in mutates=",
    given="""
        def addone_(a):
            a += 1
            return a.sum()

        def addone(a):
            return (a + 1).sum()
    """,
    broken="""
        @rrule(addone_, arrays(shape=(3,)))                 # addone_ writes into a
        def addone_rrule(a):
            y = addone_(a)
            return y, lambda ybar: (np.full(a.shape, ybar),)
    """,
    fixed="""
        @rrule(addone, arrays(shape=(3,)))   # a new array; or declare mutates=(0,) and read GG501's matrix
        def addone_rrule(a):
            y = addone(a)
            return y, lambda ybar: (np.full(a.shape, ybar),)
    """,
)
def forward_mutates_undeclared(case: Case) -> Iterable[Problem]:
    """The forward pass may write into an argument only if the rule declares it with ``mutates=``. An
    undeclared write is invisible to the engine: an earlier pullback that captured the array by reference
    (``dot(x, x)`` before ``addone_(x)``) then reads the mutated values and returns a wrong gradient, with no
    error anywhere. Declaring the mutation makes gradguard test the rule in the contexts where that matters;
    copying before writing removes the hazard."""
    args = case.first_call().args_after
    names = argument_labels(case)
    for i in range(case.nargs):
        if i in case.rule.mutates:
            continue
        change = first_change(case.args[i], args[i])
        if change is None:
            continue
        declare = tuple(sorted(case.rule.mutates | {i}))
        name = argument_name(case, i)
        yield Problem(
            message=(
                f"the forward of {case.rule.name} wrote into {names[i]}, which is not declared in mutates=: "
                f"{name}{change.where} changed from {change.before} to {change.after}."
            ),
            location=f"{names[i]}{change.where}",
            expected=change.before,
            actual=change.after,
            fix=f"Declare mutates={declare!r} if the primal mutates {name} on purpose, or copy before writing "
            f"({name} = {name}.copy()).",
        )


@check(
    "GG402",
    family="state",
    title="pullback mutates a primal argument or captured value",
    given="""
        def square(x):
            return x * x
    """,
    broken="""
        @rrule(square, arrays(shape=(3,)))
        def square_rrule(x):
            def pullback(ybar):
                x[...] *= 2 * ybar                # reuses x's memory for the tangent
                return (x,)
            return x * x, pullback
    """,
    fixed="""
        @rrule(square, arrays(shape=(3,)))
        def square_rrule(x):
            return x * x, lambda ybar: (2 * x * ybar,)
    """,
)
def pullback_mutates(case: Case) -> Iterable[Problem]:
    """A pullback may read the arguments and the output of its forward pass, never write into them. Engines
    run pullbacks late, after the program has moved on: the argument is the caller's array (and may be
    captured by other pullbacks), the output may feed other operations whose pullbacks have not run yet. A
    pullback that reuses their memory for its tangent corrupts every later gradient that reads them. The
    check snapshots the arguments the rule received (after any declared mutation by the forward) and its
    output, runs the pullback, and compares exactly."""
    call = case.first_call()
    args_before, y_before = call.args_after, call.output
    case.first_pullback()
    args, y = call.args, call.y  # as the pullback left them
    names = argument_labels(case)
    for i in range(case.nargs):
        change = first_change(args_before[i], args[i])
        if change is not None:
            name = argument_name(case, i)
            yield Problem(
                message=(
                    f"the pullback of {case.rule.name} wrote into {names[i]}: {name}{change.where} changed from "
                    f"{change.before} to {change.after}. A pullback must only read the arguments: the caller "
                    f"still owns {name}, and other pullbacks may have captured it."
                ),
                location=f"{names[i]}{change.where}",
                expected=change.before,
                actual=change.after,
                fix=f"Compute the tangent into a new array, never in place into {name} (no {name} *= ..., no out={name}).",
            )
    change = first_change(y_before, y)
    if change is not None:
        yield Problem(
            message=(
                f"the pullback of {case.rule.name} wrote into the forward's output: output{change.where} changed "
                f"from {change.before} to {change.after}. The output belongs to the caller, and the pullbacks of "
                "operations that consumed it may still read it."
            ),
            location=f"output{change.where}",
            expected=change.before,
            actual=change.after,
            fix="Compute the tangent into a new array instead of reusing the output's memory (y *= ybar).",
        )


@check(
    "GG405",
    family="state",
    title="output aliases an input's memory",
    severity="warning",
    given="""
        def transpose(x):
            return x.T
    """,
    broken="""
        @rrule(transpose, arrays(shape=(2, 3)))
        def transpose_rrule(x):
            return x.T, lambda ybar: (ybar.T.copy(),)    # x.T is a view of x
    """,
    fixed="""
        @rrule(transpose, arrays(shape=(2, 3)))
        def transpose_rrule(x):
            return x.T.copy(), lambda ybar: (ybar.T.copy(),)
    """,
)
def output_aliases_input(case: Case) -> Iterable[Problem]:
    """The output (and every tangent) should own its memory, not share it with an argument: returning ``x``
    itself, a view, a reshape or ``x.T``. With aliasing, a later in-place write to the output silently
    changes the caller's input and the reverse, and an engine that captured one by reference computes its
    gradient from the other's later values; a tangent aliasing an argument is worse, since engines
    accumulate gradients in place (``g += t``), writing into the caller's array. This is a warning, for
    arguments declared in ``mutates=`` too: an in-place rule that returns its mutated argument follows a
    common convention, but the hazard for engines is the same, so such rules should ignore GG405 knowingly
    (``ignore=["GG405"]``)."""
    call = case.first_call()
    args, y = call.args, call.y
    names = argument_labels(case)

    def relation(value: Any, i: int) -> str | None:
        if not isinstance(value, np.ndarray):
            return None  # Python and NumPy scalars are immutable: sharing one is harmless
        for arg_leaf in leaves(args[i]):
            if value is arg_leaf:
                return f"is {names[i]} itself"
            if _aliases(value, arg_leaf):
                return f"is a view of {names[i]} (shares its memory)"
        return None

    outs = leaves(y)
    for k, out in enumerate(outs):
        for i in range(case.nargs):
            how = relation(out, i)
            if how is None:
                continue
            what = "the output" if is_leaf(y) else f"output {k}"
            declared = ""
            if i in case.rule.mutates:
                declared = f" ({argument_name(case, i)} is declared in mutates=, but the hazard for engines is the same)"
            yield Problem(
                message=(
                    f"{what} of {case.rule.name} {how}{declared}: an in-place write to either silently changes "
                    "the other, and an engine that captured one by reference sees the other's later writes."
                ),
                location=what,
                expected="memory owned by the output",
                actual=how,
                fix=(
                    "Return a copy (np.array(..., copy=True), x.T.copy()); "
                    "if the rule returns its argument on purpose, leave GG405 out for it with ignore=[\"GG405\"] in "
                    "its declaration."
                ),
            )
            break
    t = case.first_pullback().returned
    if not isinstance(t, (tuple, list)):
        return
    for j, tangent in enumerate(t):
        if j >= case.nargs:
            break
        for leaf in leaves(tangent):
            hows = [h for i in range(case.nargs) if (h := relation(leaf, i))]
            if hows:
                yield Problem(
                    message=(
                        f"the tangent for {names[j]} returned by the pullback of {case.rule.name} {hows[0]}: engines "
                        "accumulate gradients in place (g += t), which would write into the caller's array."
                    ),
                    location=f"tangent for {names[j]}",
                    expected="a tangent that owns its memory",
                    actual=hows[0],
                    fix="Return a new array from the pullback (e.g. ybar * ones_like(x), np.array(x, copy=True)).",
                )
                break

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from gradguard.checker import tolerances
from gradguard.checker.case import Case, RuleRaised
from gradguard.checker.checks.registry import Problem, Skip, check
from gradguard.checker.inputs import arg_names, show
from gradguard.checker.trees import copy_tree, describe, is_leaf, leaves, same_structure, tree_map

__all__: list[str] = []

_TooHard = getattr(getattr(np, "exceptions", np), "TooHardError", Exception)
_SHARES_MEMORY_WORK = 10**6  # bound on np.shares_memory's exact search; beyond it, assume overlap


@dataclass
class _Change:
    """Where two trees first differ: ``where`` is '' or ' at [i, j]' (or a leaf path), then both values."""

    where: str
    before: str
    after: str


def _first_change(before: Any, after: Any, tol: tolerances.Tolerance | None = None) -> _Change | None:
    """The first leaf element where ``after`` differs from ``before``; exact (NaN == NaN) when ``tol`` is None."""
    if not same_structure(before, after):
        return _Change("", describe(before), describe(after))
    pairs = list(zip(leaves(before), leaves(after)))
    for k, (b, a) in enumerate(pairs):
        leaf = f" (leaf {k})" if len(pairs) > 1 else ""
        if b is None or a is None:
            if (b is None) != (a is None):
                return _Change(leaf, show(b), show(a))
            continue
        b_arr, a_arr = np.asarray(b), np.asarray(a)
        if b_arr.shape != a_arr.shape:
            return _Change(f"{leaf} (shape)", str(b_arr.shape), str(a_arr.shape))
        if b_arr.dtype.kind not in "biufc" or a_arr.dtype.kind not in "biufc":
            try:
                same = bool(np.all(b_arr == a_arr))
            except Exception:  # noqa: BLE001 - an object without a usable ==: treat as unchanged
                same = True
            if not same:
                return _Change(leaf, show(b), show(a))
            continue
        bad = ~_equal(b_arr, a_arr, tol)
        if np.any(bad):
            idx = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
            at = f" at {list(idx)}" if idx else ""
            return _Change(f"{leaf}{at}", show(b_arr[idx]), show(a_arr[idx]))
    return None


def _equal(b: np.ndarray, a: np.ndarray, tol: tolerances.Tolerance | None) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        same = np.asarray(b == a)
        if b.dtype.kind in "fc" or a.dtype.kind in "fc":
            same = same | (np.isnan(b) & np.isnan(a))
            if tol is not None:
                scale = np.maximum(np.abs(b), np.abs(a))
                same = same | (np.abs(b - a) <= tol.atol + tol.rtol * scale)
    return same


def _aliases(a: Any, b: Any) -> bool:
    """Whether two arrays share memory (exactly, within a work bound; beyond it, whether their ranges overlap)."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.size == 0 or b.size == 0:
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=_SHARES_MEMORY_WORK))
    except _TooHard:
        return bool(np.may_share_memory(a, b))


def _names(case: Case) -> list[str]:
    return [f"argument {i} ({n})" for i, n in enumerate(arg_names(case.rule.primal, case.nargs))]


def _bare(case: Case, i: int) -> str:
    return arg_names(case.rule.primal, case.nargs)[i]


def _tangent_tuple(case: Case, t: Any) -> tuple[Any, ...]:
    """The pullback's result as a tuple, one entry per argument; a malformed one is GG103's finding."""
    if not isinstance(t, (tuple, list)) or len(t) != case.nargs:
        raise Skip("the pullback does not return one tangent per argument (see GG103)")
    return tuple(t)


def _tangents(case: Case, pb: Any, ybar: Any) -> tuple[Any, ...]:
    """Call the pullback on a private copy of ``ybar`` (GG303 covers pullbacks that mutate it); snapshot the result."""
    return copy_tree(_tangent_tuple(case, case.pullback(pb, copy_tree(ybar))))


def _tangent_change(
    case: Case, first: tuple[Any, ...], second: tuple[Any, ...], *, exact: bool = False
) -> tuple[int, _Change] | None:
    """The first argument whose tangent differs between two pullback results (per-dtype tolerance unless exact)."""
    tol = None if exact else case.tol
    for j in range(case.nargs):
        change = _first_change(first[j], second[j], tol)
        if change is not None:
            return j, change
    return None


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
    names = _names(case)
    for i in range(case.nargs):
        if i in case.rule.mutates:
            continue
        change = _first_change(case.args[i], args[i])
        if change is None:
            continue
        declare = tuple(sorted(case.rule.mutates | {i}))
        name = _bare(case, i)
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
    names = _names(case)
    for i in range(case.nargs):
        change = _first_change(args_before[i], args[i])
        if change is not None:
            name = _bare(case, i)
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
    change = _first_change(y_before, y)
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
    "GG403",
    family="state",
    title="pullback not reentrant: calling it twice gives different results",
    given="""
        def square(x):
            return x * x
    """,
    broken="""
        @rrule(square, arrays(shape=(3,)))
        def square_rrule(x):
            grad = np.zeros_like(x)
            def pullback(ybar):
                grad[...] += 2 * x * ybar          # accumulates across calls
                return (grad,)
            return x * x, pullback
    """,
    fixed="""
        @rrule(square, arrays(shape=(3,)))
        def square_rrule(x):
            return x * x, lambda ybar: (2 * x * ybar,)
    """,
)
def pullback_reentrant(case: Case) -> Iterable[Problem]:
    """Calling the same pullback twice with the same cotangent must give the same tangents. Engines call a
    pullback more than once (higher-order AD, checkpointing, a rule whose output is used twice by some
    engines, retrying after an error). A pullback that accumulates into a captured buffer, pops its residuals
    from a list or consumes an iterator gives a different (or no) answer on the second call. The check also
    calls it a third time with another cotangent: a pullback that returns the same buffer every call
    silently overwrites the tangent an engine is still holding from the first call."""
    pulled = case.first_pullback()
    pb, ybar = pulled.call.pb, pulled.ybar
    raw = _tangent_tuple(case, pulled.returned)  # live: a later call may write into it
    first = _tangent_tuple(case, pulled.tangents)
    names = _names(case)
    try:
        second = _tangents(case, pb, ybar)
    except RuleRaised as exc:
        yield Problem(
            message=(
                f"the pullback of {case.rule.name} raised {type(exc.exc).__name__}: {exc.exc} on its second call "
                "with the same cotangent, after the first call succeeded. It consumes its residuals "
                "(list.pop, next() on an iterator, a generator) instead of reading them."
            ),
            expected="the same tangents as the first call",
            actual=exc.user_traceback.strip().splitlines()[-1],
            fix="Keep residuals in plain variables or arrays that the pullback reads without consuming.",
        )
        return
    found = _tangent_change(case, first, second)
    if found is not None:
        j, change = found
        yield Problem(
            message=(
                f"calling the pullback of {case.rule.name} twice with the same cotangent gave different tangents "
                f"for {names[j]}{change.where}: {change.before} on the first call, {change.after} on the second. "
                "The pullback changes state it reads (it accumulates into a captured buffer, consumes its "
                "residuals or draws random numbers)."
            ),
            location=f"tangent for {names[j]}{change.where}",
            expected=change.before,
            actual=change.after,
            fix="Allocate the tangent in every call (no += into captured arrays) and read residuals without consuming them.",
        )
        return
    try:
        case.pullback(pb, tree_map(lambda v: None if v is None else v + 1, ybar))
    except RuleRaised:
        return  # another cotangent outside what the pullback handles: not this check's finding
    found = _tangent_change(case, first, raw, exact=True)
    if found is not None:
        j, change = found
        yield Problem(
            message=(
                f"the pullback of {case.rule.name} returns a buffer it reuses: calling it again with another "
                f"cotangent overwrote the tangent for {names[j]} returned by the first call{change.where} "
                f"({change.before} became {change.after}). Engines hold on to earlier tangents and add to them."
            ),
            location=f"tangent for {names[j]}{change.where}",
            expected=change.before,
            actual=change.after,
            fix="Return a new array from every call (allocate it inside the pullback, not once in the forward).",
        )


_STALE_FIX = "Allocate residuals inside the rrule for each call, or copy what the pullback needs into its closure."


@check(
    "GG404",
    family="state",
    title="stale residuals: a second forward call changes the first pullback's result",
    broken="""
        _COS = np.empty(3)                       # preallocated once, shared by every call

        @rrule(np.sin, arrays(shape=(3,)))
        def sin_rrule(x):
            np.cos(x, out=_COS)
            return np.sin(x), lambda ybar: (ybar * _COS,)
    """,
    fixed="""
        @rrule(np.sin, arrays(shape=(3,)))
        def sin_rrule(x):
            c = np.cos(x)                        # allocated per call, owned by this pullback
            return np.sin(x), lambda ybar: (ybar * c,)
    """,
)
def stale_residuals(case: Case) -> Iterable[Problem]:
    """A pullback must depend only on its own forward call. A rule that stores residuals in a buffer or cache
    shared across calls (a module-level preallocated array, a cache keyed on shape) gives correct gradients
    when each forward is followed by its own pullback, and wrong ones in every real program, where all
    forwards run before all pullbacks: the second call overwrites what the first pullback reads. The check
    calls the rule on the input and its pullback twice (a pullback that differs between those two calls is
    GG403's finding), calls the rule on a second, different input, and calls the first pullback again with
    the same cotangent; it also checks that the second call did not overwrite the first output."""
    pulled = case.first_pullback()
    y1, pb1, ybar = pulled.call.y, pulled.call.pb, pulled.ybar
    first = _tangent_tuple(case, pulled.tangents)
    # A pullback that changes from one call to the next anyway is GG403's finding: make sure this one
    # repeats itself before blaming a second forward call for a difference.
    try:
        before = _tangents(case, pb1, ybar)
    except RuleRaised:
        raise Skip("the pullback cannot be called twice (see GG403)") from None
    if _tangent_change(case, first, before) is not None:
        raise Skip("the pullback gives different results when called twice (see GG403)")
    # Snapshot the output only now: a pullback that writes into its own output is GG402's finding, not a
    # second forward call's.
    y1_before = copy_tree(y1)
    second = tuple(case.draw(case.rule.args_strategy, "second input"))
    case.forward(copy_tree(second))
    problems = []
    change = _first_change(y1_before, y1)
    if change is not None:
        problems.append(
            Problem(
                message=(
                    f"calling {case.rule.name} on a second input overwrote the output of the first call: "
                    f"output{change.where} changed from {change.before} to {change.after}. The rule returns a "
                    "preallocated buffer that every call reuses."
                ),
                location=f"output{change.where}",
                expected=change.before,
                actual=change.after,
                fix="Return a new array from every forward call (copy out of the buffer, or allocate per call).",
            )
        )
    try:
        after = _tangents(case, pb1, ybar)
    except RuleRaised as exc:
        problems.append(
            Problem(
                message=(
                    f"the pullback of the first call of {case.rule.name} raised {type(exc.exc).__name__}: {exc.exc} "
                    "after a second forward call on another input, though it answered the same twice before that "
                    "call. The rule keeps residuals in state shared across calls (a preallocated buffer or a "
                    "cache keyed on shape) that the second call replaced."
                ),
                expected="the same tangents as before the second call",
                actual=exc.user_traceback.strip().splitlines()[-1],
                fix=_STALE_FIX,
            )
        )
        yield from problems
        return
    found = _tangent_change(case, before, after)
    if found is not None:
        j, change = found
        problems.append(
            Problem(
                message=(
                    f"the pullback of the first call of {case.rule.name} changed after a second forward call on "
                    f"another input: the tangent for {_names(case)[j]}{change.where} was {change.before}, then "
                    f"{change.after}, for the same cotangent. The rule keeps residuals in state shared across "
                    "calls (a preallocated buffer or cache) that the second call overwrote."
                ),
                location=f"tangent for {_names(case)[j]}{change.where}",
                expected=change.before,
                actual=change.after,
                fix=_STALE_FIX,
            )
        )
    yield from problems


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
    names = _names(case)

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
                declared = f" ({_bare(case, i)} is declared in mutates=, but the hazard for engines is the same)"
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
                    "if the rule returns its argument on purpose, ignore GG405 for it."
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


@check(
    "GG406",
    family="state",
    title="forward or pullback is nondeterministic",
    given="""
        def noisy_relu(x):
            return x * (np.random.default_rng().random(x.shape) < 0.5)

        def masked(x, seed):
            return x * (np.random.default_rng(seed).random(x.shape) < 0.5)
    """,
    broken="""
        @rrule(noisy_relu, arrays(shape=(4,)))
        def noisy_relu_rrule(x):
            mask = np.random.default_rng().random(x.shape) < 0.5   # unseeded: differs every call
            return x * mask, lambda ybar: (ybar * mask,)
    """,
    fixed="""
        @rrule(masked, arrays(shape=(4,)), constant(0))             # the seed is an explicit argument
        def masked_rrule(x, seed):
            mask = np.random.default_rng(seed).random(x.shape) < 0.5
            return x * mask, lambda ybar: (ybar * mask, None)
    """,
)
def deterministic(case: Case) -> Iterable[Problem]:
    """Two forward calls on identical copies of the same input must give the same output, and their two
    pullbacks the same tangents for the same cotangent (up to the per-dtype tolerance, so reduction-order
    noise passes). Hidden randomness (a global or unseeded generator, the clock, a hash order) makes the
    rule's gradient irreproducible, breaks every check that compares two calls (finite differences above
    all), and makes AD differentiate a different sample from the one the program used."""
    y1 = case.first_call().output
    y2, pb2 = case.pair()
    change = _first_change(y1, y2, case.tol)
    if change is not None:
        yield Problem(
            message=(
                f"two forward calls of {case.rule.name} on identical copies of the same input gave different "
                f"outputs: output{change.where} was {change.before}, then {change.after}. The rule depends on "
                "hidden state (an unseeded or global random generator, the clock)."
            ),
            location=f"output{change.where}",
            expected=change.before,
            actual=change.after,
            fix="Make randomness an explicit argument (a seed or key, declared nondiff) instead of global state.",
        )
        return
    pulled = case.first_pullback()
    ybar = pulled.ybar
    first, second = _tangent_tuple(case, pulled.tangents), _tangents(case, pb2, ybar)
    found = _tangent_change(case, first, second)
    if found is not None:
        j, change = found
        yield Problem(
            message=(
                f"the pullbacks of two forward calls of {case.rule.name} on identical copies of the same input "
                f"gave different tangents for the same cotangent: the tangent for {_names(case)[j]}"
                f"{change.where} was {change.before}, then {change.after}. The forward or the pullback depends "
                "on hidden state (an unseeded or global random generator, the clock)."
            ),
            location=f"tangent for {_names(case)[j]}{change.where}",
            expected=change.before,
            actual=change.after,
            fix="Make randomness an explicit argument (a seed or key, declared nondiff) instead of global state.",
        )

"""State checks that call a rule again (GG403, GG404, GG406): a pullback called twice, a second forward
call before the first pullback, two calls on identical copies of one input must agree.

They compare with the per-dtype tolerance table, so floating-point noise from a parallel reduction is
not a finding, but accumulation, stale buffers and random numbers are. What a rule writes and shares
(GG401, GG402, GG405) is in state.py; what both compare with in _state.py.
"""

from __future__ import annotations

from typing import Iterable

from gradguard.checker.case import Case, RuleRaised
from gradguard.checker.checks._state import (argument_labels, first_change, fresh_tangents, note_irreproducible,
                                             pulled_twice_differs, tangent_change, tangent_tuple, two_forwards_differ,
                                             without_verdict)
from gradguard.checker.checks.registry import Problem, Skip, check
from gradguard.checker.trees import copy_tree, tree_map

__all__: list[str] = []


@check(
    "GG403",
    family="state",
    title="pullback not reentrant: calling it twice gives different results or raises",
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
    raw = tangent_tuple(case, pulled.returned)  # live: a later call may write into it
    first = tangent_tuple(case, pulled.tangents)
    names = argument_labels(case)
    try:
        second = fresh_tangents(case, pb, ybar)
    except RuleRaised as exc:
        why, fix = _second_call_failure(exc.exc)
        yield Problem(
            message=(
                f"the pullback of {case.rule.name} raised {type(exc.exc).__name__}: {exc.exc} on its second call "
                f"with the same cotangent, after the first call succeeded. {why}"
            ),
            expected="the same tangents as the first call",
            actual=exc.summary,
            fix=fix,
        )
        return
    found = tangent_change(case, first, second)
    if found is not None:
        j, change = found
        note_irreproducible(pulled_twice_differs(names[j], change))
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
    found = tangent_change(case, first, raw, exact=True)
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


def _second_call_failure(exc: BaseException) -> tuple[str, str]:
    """What a pullback that raises on its second call did to itself, read from the exception, and the fix."""
    if "modified by an inplace operation" in str(exc):  # PyTorch's version counter on a saved tensor
        return ("Its first call changed a tensor saved for backward in place (an in-place operation on a saved "
                "tensor or on a gradient computed from one), and PyTorch refuses to read it again.",
                "Compute the gradients out of place in backward (grad = grad * s, not grad.mul_(s)) wherever the "
                "tensor written is one that ctx.saved_tensors returns or shares memory with one.")
    if "backward through the graph a second time" in str(exc):  # PyTorch freed a graph the backward runs
        return ("Its first call ran a backward through a graph PyTorch then freed (.backward(), torch.autograd.backward "
                "or torch.autograd.grad inside backward, without retain_graph=True), so its second call finds the "
                "graph's saved tensors gone; PyTorch's own operations can be differentiated again under "
                "retain_graph=True, and this backward cannot.",
                "Pass retain_graph=True to the backward or grad call inside backward, or rebuild the graph it runs "
                "(under torch.enable_grad()) on each call.")
    return ("It consumes its residuals (list.pop, next() on an iterator, a generator) instead of reading them.",
            "Keep residuals in plain variables or arrays that the pullback reads without consuming.")


_STALE_FIX = "Allocate residuals inside the rrule for each call, or copy what the pullback needs into its closure."
_STALE_FIXES = {
    "jax": "Return what bwd needs from fwd as its residuals (JAX hands each call's own to its bwd) instead of keeping it "
           "in module-level, class or closure state that every call shares.",
    "torch": "Save what backward needs on each call's ctx (ctx.save_for_backward, ctx attributes) instead of keeping it "
             "in module-level or class state that every call shares.",
}


def _stale_fix(case: Case) -> str:
    """The way out in the rule's own terms: an rrule's closure, a custom_vjp's residuals, a Function's ctx."""
    return _STALE_FIXES.get(case.rule.kind, _STALE_FIX)


@check(
    "GG404",
    family="state",
    title="stale residuals: a second forward call changes the first pullback's result",
    compares_calls=True,
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
    first = tangent_tuple(case, pulled.tangents)
    # A pullback that changes from one call to the next anyway is GG403's finding: make sure this one
    # repeats itself before blaming a second forward call for a difference.
    try:
        before = fresh_tangents(case, pb1, ybar)
    except RuleRaised:
        raise Skip("the pullback cannot be called twice (see GG403)") from None
    if (found := tangent_change(case, first, before)) is not None:
        j, change = found
        why = pulled_twice_differs(argument_labels(case)[j], change)
        note_irreproducible(why)
        raise Skip(without_verdict(why))
    # Snapshot the output only now: a pullback that writes into its own output is GG402's finding, not a
    # second forward call's.
    y1_before = copy_tree(y1)
    second = tuple(case.draw(case.rule.args_strategy, "second input"))
    case.forward(copy_tree(second))
    problems = []
    change = first_change(y1_before, y1)
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
        after = fresh_tangents(case, pb1, ybar)
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
                actual=exc.summary,
                fix=_stale_fix(case),
            )
        )
        yield from problems
        return
    found = tangent_change(case, before, after)
    if found is not None:
        j, change = found
        problems.append(
            Problem(
                message=(
                    f"the pullback of the first call of {case.rule.name} changed after a second forward call on "
                    f"another input: the tangent for {argument_labels(case)[j]}{change.where} was {change.before}, then "
                    f"{change.after}, for the same cotangent. The rule keeps residuals in state shared across "
                    "calls (a preallocated buffer or cache) that the second call overwrote."
                ),
                location=f"tangent for {argument_labels(case)[j]}{change.where}",
                expected=change.before,
                actual=change.after,
                fix=_stale_fix(case),
            )
        )
    yield from problems


# PyTorch's and NumPy's global generators, and the generators a torch Function holds, start every call from one state
# (engines.torch_engine.apply, checker.random_state): what differs is state none of those is
_HIDDEN_STATE = ("hidden state that changes from call to call (a random generator gradguard cannot hold at one state: an "
                 "unseeded one, one made in the call, a NumPy Generator of the rule's own; the clock; a counter)")
_HIDDEN_STATE_FIX = ("Make randomness an explicit argument (a seed or key, declared nondiff), or draw from PyTorch's or "
                     "NumPy's global generator, which a program seeds; a sampled rule meant to differ from call to call "
                     "(stochastic rounding) can leave this check out with ignore=[\"GG406\"].")


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
    all), and makes AD differentiate a different sample from the one the program used. A library's global
    generator is not hidden state: every forward of a `torch.autograd.Function` starts from one fixed state of
    PyTorch's, and every call of a NumPy rule that draws from `np.random`'s from one fixed state of NumPy's, as a
    program re-run under `torch.manual_seed` or `np.random.seed` does; so a dropout mask drawn that way and kept
    for the backward pass passes, and a backward that draws a new mask does not. Where the pullback does not
    reproduce its own result (here, or in GG403), the checks that judge a rule by comparing separate calls
    (GG202, GG204, GG205, GG404, GG702, GG703, GG705) give no verdict on it and say why: whatever they probe,
    they would see the new draw and blame linearity, second order or stale state for it."""
    y1 = case.first_call().output
    y2, pb2 = case.pair()
    change = first_change(y1, y2, case.tol)
    if change is not None:
        yield Problem(
            message=(
                f"two forward calls of {case.rule.name} on identical copies of the same input gave different "
                f"outputs: output{change.where} was {change.before}, then {change.after}. The rule depends on "
                f"{_HIDDEN_STATE}."
            ),
            location=f"output{change.where}",
            expected=change.before,
            actual=change.after,
            fix=_HIDDEN_STATE_FIX,
        )
        return
    pulled = case.first_pullback()
    ybar = pulled.ybar
    first, second = tangent_tuple(case, pulled.tangents), fresh_tangents(case, pb2, ybar)
    found = tangent_change(case, first, second)
    if found is not None:
        j, change = found
        note_irreproducible(two_forwards_differ(argument_labels(case)[j], change))
        yield Problem(
            message=(
                f"the pullbacks of two forward calls of {case.rule.name} on identical copies of the same input "
                f"gave different tangents for the same cotangent: the tangent for {argument_labels(case)[j]}"
                f"{change.where} was {change.before}, then {change.after}. The forward or the pullback depends "
                f"on {_HIDDEN_STATE}."
            ),
            location=f"tangent for {argument_labels(case)[j]}{change.where}",
            expected=change.before,
            actual=change.after,
            fix=_HIDDEN_STATE_FIX,
        )

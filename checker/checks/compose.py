"""Composition checks (GG6xx): does a JAX rule survive JAX's transforms?

GG601 runs the rule with and without ``jax.jit`` and compares values and
pullbacks; GG602 runs it under ``jax.vmap`` over a batch of drawn inputs and
compares with one call per example. Both use the engine's cached transforms
(`gradguard.engines.jax_engine.run_under`), so an input shape compiles once.

They apply to JAX-native rules only (``kinds=("jax",)``). A NumPy rule runs
under JAX through our own adapter (`gradguard.engines.jax_engine.to_custom_vjp`: a
host callback, called once per example under vmap), so jit and vmap would
test the adapter, which has its own tests, and never the rule: a NumPy
function cannot behave differently under a transform it never sees.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from gradguard.checker import compare
from gradguard.checker.case import Case
from gradguard.checker.compare import close_at_leaf_scale, first_mismatch
from gradguard.checker.checks._jax import bind_nondiff, first_line, jax_ready, spread
from gradguard.checker.checks._state import argument_labels
from gradguard.checker.checks.registry import CHECKS, Problem, Skip, check
from gradguard.checker.inputs import show
from gradguard.checker.trees import children, copy_tree, is_leaf, leaf_paths, rebuild
from gradguard.engines.values import is_ml_float

__all__: list[str] = []

_JIT_FIX = (
    "Under jit, fwd and bwd receive abstract tracers, not values: replace Python control flow on values "
    "(if x > 0, float(x), int(n)) with jnp.where or lax.cond, NumPy calls on traced values with jax.numpy, "
    "and make value-dependent sizes static (nondiff_argnums); never branch on whether a value is a tracer."
)
_ROUNDING_FIX = (
    " The two agree to {digits} significant digits, so rounding may be the cause rather than control flow: under jit "
    "XLA fuses and reorders floating-point operations, and a formula that subtracts nearly equal large terms "
    "magnifies the difference in their last digits. Where the code looks at no values, compute this without the "
    "cancellation near such inputs (a series, or the formula rearranged), or declare the tolerance the rule "
    "meets (rtol= in its declaration)."
)


def _jit_fix(got: Any, want: Any) -> str:
    """GG601's fix, with the rounding cause added where ``got`` and ``want`` are close numbers (their first three
    significant digits agree): an exact difference in a value is not what control flow on tracers gives."""
    try:
        a, b = float(got), float(want)
    except (TypeError, ValueError):
        return _JIT_FIX
    if not (math.isfinite(a) and math.isfinite(b)) or a == b or a == 0.0 or b == 0.0 or (a > 0) != (b > 0):
        return _JIT_FIX
    relative = abs(a - b) / max(abs(a), abs(b))
    if relative >= 1e-3:
        return _JIT_FIX
    return _JIT_FIX + _ROUNDING_FIX.format(digits=int(math.floor(-math.log10(relative))))


_VMAP_FIX = (
    "Under vmap, fwd and bwd see one example at a time but run batched: use jax.numpy and lax operations "
    "(not Python control flow on values), and give host callbacks a vmap_method that matches what the host "
    "function really accepts (vmap_method='sequential' when it handles one example only)."
)


def _quiet(fn: Callable[[], Any]) -> Any:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def first_difference(got: Any, want: Any, case: Case) -> tuple[str, tuple[int, ...], Any, Any] | None:
    """``(leaf path, index, got, want)`` of the first element outside the dtype's tolerance, or None.

    None counts as zero; the bound is ``atol + rtol * max|.|`` over the leaf (as GG202's), two NaNs agree
    (:func:`gradguard.checker.compare.close_at_leaf_scale` with ``nonfinite="nan"``).
    """
    agree = close_at_leaf_scale(case.tol, nonfinite="nan")
    for (path, a), (_, b) in zip(leaf_paths(got), leaf_paths(want)):
        if a is None and b is None:
            continue
        ref = b if b is not None else a
        a = np.zeros(np.shape(ref)) if a is None else np.asarray(a)
        b = np.zeros(np.shape(ref)) if b is None else np.asarray(b)
        if a.shape != b.shape:
            return path, (), f"shape {a.shape}", f"shape {b.shape}"
        # a mask or an index among the outputs (praxis' sparsity mask) is compared exactly: booleans do not subtract
        numeric = all(x.dtype.kind in "fc" or is_ml_float(x.dtype) for x in (a, b))
        found = first_mismatch([(path, a, b)], agree if numeric else compare.exact)
        if found is not None:
            return found
    return None


def _tangent_places(case: Case, path: str, idx: Any, positions: Sequence[int] | None = None) -> tuple[str, str]:
    """A tangent element's ``location`` and its place in a message: "[1]" at (2,) -> "tangent for argument 1 at [2]"
    and "tangent for argument 1 (w) at [2]" (`argument_labels`). ``path`` indexes a pullback result with one entry per
    argument, or one per entry of ``positions`` (the argument each entry belongs to)."""
    head, _, rest = path[1:].partition("]")
    i = int(head) if positions is None else positions[int(head)]
    leaf = f" leaf {rest}" if rest else ""
    return (compare.where(f"tangent for argument {i}{leaf}", idx),
            compare.where(f"tangent for {argument_labels(case)[i]}{leaf}", idx))


# -- GG601 ------------------------------------------------------------------------------------------
@check(
    "GG601",
    family="compose",
    title="fails or differs under jit",
    kinds=("jax",),
    given="""
        @jax.custom_vjp
        def logcosh(x):
            return jnp.log(jnp.cosh(x))

        def logcosh_fwd(x):
            return logcosh(x), x
    """,
    broken="""
        def logcosh_bwd(x, g):
            if x > 20.0:                          # Python branch on a traced value
                return (g,)                       # tanh(x) is 1.0 in float64 there
            return (g * jnp.tanh(x),)

        logcosh.defvjp(logcosh_fwd, logcosh_bwd)
        logcosh_rule = jax_rule(logcosh, arrays(shape=()))
    """,
    fixed="""
        def logcosh_bwd(x, g):
            return (g * jnp.where(x > 20.0, 1.0, jnp.tanh(x)),)

        logcosh.defvjp(logcosh_fwd, logcosh_bwd)
        logcosh_rule = jax_rule(logcosh, arrays(shape=()))
    """,
)
def same_under_jit(case: Case) -> Iterable[Problem]:
    """A JAX rule is used inside ``jax.jit`` far more often than outside it. Under ``jit`` its primal, ``fwd``
    and ``bwd`` are traced with abstract values, so code that looks at values (a Python ``if`` on an array,
    ``float(x)``, NumPy on a traced value) raises there, and code that branches on "is this a tracer?" or reads
    host state at trace time computes something else. The check evaluates the rule's value and its pullback
    for a random cotangent with and without ``jit`` and requires the same numbers (the dtype's tolerance); an
    error raised only under ``jit`` is reported with JAX's message."""
    from gradguard.engines import jax_engine

    jax_ready(case)
    fn, diff = bind_nondiff(case.rule.jax_fn, case)
    name = case.rule.name

    def xs() -> list[Any]:
        fresh = case.fresh()
        return [fresh[i] for i in diff]

    try:
        y_eager = _quiet(lambda: jax_engine.run_under(fn, xs(), transform="none"))
    except Exception:  # noqa: BLE001 - raises without jit too: the other checks report that
        raise Skip("the rule raises without jit on this input (the other checks report it)") from None
    try:
        y_jit = _quiet(lambda: jax_engine.run_under(fn, xs(), transform="jit"))
    except Exception as exc:  # noqa: BLE001
        from gradguard.checker.jax_rules import custom_kind

        yield _raises_under_jit(name, f"the primal (the function underneath the {custom_kind(case.rule)})", exc)
        return
    bad = first_difference(y_jit, y_eager, case)
    if bad is not None:
        path, idx, got, want = bad
        where = compare.where(f"output{path}", idx)
        yield Problem(
            message=f"the value of {name} differs under jax.jit: {where} is {show(got)} under jit, {show(want)} without it.",
            location=where,
            expected=show(want),
            actual=show(got),
            fix=_jit_fix(got, want),
        )
        return
    if not diff:
        return
    ybar = case.cotangent_like(y_eager)
    try:
        t_eager = spread(_quiet(lambda: jax_engine.run_under(fn, xs(), transform="grad", cotangent=copy_tree(ybar))), diff, case.nargs)
    except Exception:  # noqa: BLE001
        raise Skip("the pullback raises without jit on this input (the other checks report it)") from None
    try:
        t_jit = spread(_quiet(lambda: jax_engine.run_under(fn, xs(), transform="jit_grad", cotangent=copy_tree(ybar))), diff, case.nargs)
    except Exception as exc:  # noqa: BLE001
        yield _raises_under_jit(name, "fwd or bwd", exc)
        return
    bad = first_difference(t_jit, t_eager, case)
    if bad is not None:
        path, idx, got, want = bad
        where, named = _tangent_places(case, path, idx)
        yield Problem(
            message=(
                f"the pullback of {name} differs under jax.jit: the {named} is {show(got)} under jit, "
                f"{show(want)} without it (same input and cotangent)."
            ),
            location=where,
            expected=show(want),
            actual=show(got),
            fix=_jit_fix(got, want),
        )


def _raises_under_jit(name: str, part: str, exc: BaseException) -> Problem:
    return Problem(
        message=f"{name} raises under jax.jit but not without it, in {part}: {first_line(exc)}",
        actual=first_line(exc),
        fix=_JIT_FIX,
    )


# -- GG602 ------------------------------------------------------------------------------------------
BATCH = 3  # examples per batch: the drawn input and up to two more of the same shapes

_vmapped: dict[Any, Callable[..., Any]] = {}
_MAX_VMAPPED = 128


def _signature(case: Case, args: Sequence[Any]) -> tuple[Any, ...] | None:
    try:
        return tuple((np.shape(args[i]), np.asarray(args[i]).dtype) for i in case.diff_positions)
    except Exception:  # noqa: BLE001
        return None


def _batched_vjp(fn: Any, jit: bool, batched: bool = True) -> Callable[..., Any]:
    """``(*xs, ct) -> (fn(*xs), vjp(ct))`` vmapped over the leading axis of every argument and the cotangent
    (with ``batched=False``, the same function on one example: the output is the one ``jax.vjp`` gives, which
    for a ``custom_jvp`` is its jvp's primal output, not necessarily ``fn(*xs)``)."""
    key = (fn, jit, batched)
    if key in _vmapped:
        return _vmapped[key]
    from gradguard.engines.jax_engine._runtime import cotangent_for, load

    jax = load()

    def one(*xs_and_ct: Any) -> Any:
        xs, ct = xs_and_ct[:-1], xs_and_ct[-1]
        out, vjp = jax.vjp(fn, *xs)
        return out, vjp(cotangent_for(ct, out))

    mapped = jax.vmap(one) if batched else one
    built = jax.jit(mapped) if jit else mapped
    _vmapped[key] = built
    while len(_vmapped) > _MAX_VMAPPED:
        _vmapped.pop(next(iter(_vmapped)))
    return built


def _stack(trees: list[Any]) -> Any:
    if trees[0] is None:
        return None  # an empty slot (JAX's None subtree) stays empty: np.stack made an object array vmap refused
    if is_leaf(trees[0]):
        return np.stack([np.asarray(t) for t in trees])
    subs = [children(t) for t in trees]
    return rebuild(trees[0], (_stack([s[k] for s in subs]) for k in range(len(subs[0]))))


def _unstack(tree: Any, k: int) -> Any:
    if is_leaf(tree):
        return None if tree is None else np.asarray(tree)[k]
    return rebuild(tree, (_unstack(t, k) for t in children(tree)))


@check(
    "GG602",
    family="compose",
    title="fails or differs under vmap",
    kinds=("jax",),
    given="""
        @jax.custom_vjp
        def logsumexp(x):
            return jax.nn.logsumexp(x)

        def lse_fwd(x):
            return logsumexp(x), x
    """,
    broken="""
        def lse_bwd(x, g):                        # host code written for one example, declared batch-aware
            dx = jax.pure_callback(lambda x, g: g * np.exp(x - x.max()) / np.exp(x - x.max()).sum(),
                                   jax.ShapeDtypeStruct(x.shape, x.dtype), x, g, vmap_method="expand_dims")
            return (dx,)                          # under vmap, max and sum run over the whole batch

        logsumexp.defvjp(lse_fwd, lse_bwd)
        lse_rule = jax_rule(logsumexp, arrays(shape=(3,)))
    """,
    fixed="""
        def lse_bwd(x, g):
            dx = jax.pure_callback(lambda x, g: g * np.exp(x - x.max()) / np.exp(x - x.max()).sum(),
                                   jax.ShapeDtypeStruct(x.shape, x.dtype), x, g, vmap_method="sequential")
            return (dx,)

        logsumexp.defvjp(lse_fwd, lse_bwd)
        lse_rule = jax_rule(logsumexp, arrays(shape=(3,)))
    """,
)
def same_under_vmap(case: Case) -> Iterable[Problem]:
    """``jax.vmap`` over a batch must give what one call per example gives, for values and pullbacks (vmap of
    the vjp). The batch stacks the drawn input with up to two more drawn inputs of the same shapes (arguments
    that carry no tangent are shared, not batched). Rules break under vmap when they branch in Python on
    values, or when a host callback is declared batch-aware (``vmap_method="expand_dims"`` or
    ``"broadcast_all"``) but computes over the whole batch (a norm, a sum, a solve). Both runs are jitted
    when the rule allows it, so a difference here is vmap's alone (GG601 reports jit)."""
    from gradguard.engines import jax_engine

    jax_ready(case)
    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument to batch")
    fn, diff = bind_nondiff(case.rule.jax_fn, case)
    name = case.rule.name
    want = _signature(case, case.args)
    batch = [tuple(case.fresh()[i] for i in diff)]
    for _ in range(BATCH - 1):
        drawn = tuple(case.draw(case.rule.args_strategy, "batch input"))
        same_constants = all(i in diff or _same(drawn[i], case.args[i]) for i in range(min(len(drawn), case.nargs)))
        if len(drawn) == case.nargs and same_constants and _signature(case, drawn) == want:
            batch.append(tuple(copy_tree(drawn[i]) for i in diff))
    if len(batch) < 2:
        raise Skip("only inputs of equal shapes can be batched, and the argument specs drew no second input of these shapes")

    # One call per example is the reference; jitted when the rule allows it (GG601 judges jit), eager otherwise.
    ybars: list[Any] = []
    for jit in (True, False):
        try:
            per_value = [_quiet(lambda: jax_engine.run_under(fn, copy_tree(xs), transform="jit" if jit else "none")) for xs in batch]
            ybars = ybars or [case.cotangent_like(y, "batch cotangent") for y in per_value]
            grad = "jit_grad" if jit else "grad"
            per_tangents = [
                tuple(_quiet(lambda: jax_engine.run_under(fn, copy_tree(xs), transform=grad, cotangent=copy_tree(c))))
                for xs, c in zip(batch, ybars)
            ]
            break
        except Exception:  # noqa: BLE001
            if not jit:
                raise Skip("the rule raises on an example of the batch called alone (the other checks report it)") from None
    from gradguard.engines.jax_engine import _relay

    stacked = None
    try:
        with _relay.relaying():
            stacked = [_stack([xs[k] for xs in batch]) for k in range(len(diff))]
            out, tangents = _quiet(lambda: _batched_vjp(fn, jit)(*stacked, _stack(ybars)))
    except Exception as exc:  # noqa: BLE001
        inherited = _primal_refuses_vmap(case, stacked)
        if inherited is not None:
            from gradguard.checker.jax_rules import custom_kind

            # maxtext's ragged_dot_with_mask: jax.lax.ragged_dot has no batching rule over this axis, so the function
            # underneath raises the same way; nothing in fwd or bwd is to blame (loud, not silent: a warning)
            yield Problem(
                message=(f"{name} raises under jax.vmap (a batch of {len(batch)} inputs) but not one example at a "
                         f"time: {first_line(exc)}; so does the function underneath the {custom_kind(case.rule)} "
                         f"under the same vmap ({inherited}): the operations it is written with cannot be batched "
                         "this way, whatever its rule does."),
                actual=first_line(exc),
                fix=("Nothing in fwd or bwd is to blame: a program that vmaps this function stops with JAX's error. "
                     "Batch it another way (a loop, lax.map, or the operation's own batch dimension) where that "
                     "matters."),
                severity="warning",
            )
            return
        yield Problem(
            message=f"{name} raises under jax.vmap (a batch of {len(batch)} inputs) but not one example at a time: {first_line(exc)}",
            actual=first_line(exc),
            fix=_VMAP_FIX,
        )
        return
    import jax

    out = jax.tree_util.tree_map(np.asarray, out)
    tangents = tuple(np.asarray(t) for t in tangents)
    for k in range(len(batch)):
        bad = first_difference(_unstack(out, k), per_value[k], case)
        if bad is not None and _same_without_vmap(fn, jit, batch[k], ybars[k], _unstack(out, k), case):
            # jax.vjp gives this value for the example alone too: the rule's forward under differentiation
            # (a custom_jvp's primal output) differs from the function itself whether or not vmap runs it,
            # which is GG102's finding, not vmap's
            bad = None
        if bad is not None:
            path, idx, got, want_value = bad
            where = compare.where(f"output{path}", idx)
            yield Problem(
                message=(
                    f"the value of {name} differs under jax.vmap: for example {k} of a batch of {len(batch)}, "
                    f"{where} is {show(got)} under vmap, {show(want_value)} when called alone."
                ),
                location=f"example {k}, {where}",
                expected=show(want_value),
                actual=show(got),
                fix=_VMAP_FIX,
            )
            return
    for k in range(len(batch)):
        bad = first_difference(_unstack(tangents, k), per_tangents[k], case)
        if bad is not None:
            path, idx, got, want_value = bad
            where, named = _tangent_places(case, path, idx, positions=diff)
            yield Problem(
                message=(
                    f"the pullback of {name} differs under jax.vmap: for example {k} of a batch of {len(batch)}, "
                    f"the {named} is {show(got)} under vmap, {show(want_value)} when called alone (same cotangent)."
                ),
                location=f"example {k}, {where}",
                expected=show(want_value),
                actual=show(got),
                fix=_VMAP_FIX,
            )
            return


def _primal_refuses_vmap(case: Case, stacked: list[Any] | None) -> str | None:
    """What ``jax.vmap`` of the function underneath the custom rule raises on the stacked batch (its first line), or
    None where it runs, or where there is no such function or batch."""
    primal = case.rule.extra.get("jax_primal")
    if primal is None or stacked is None:
        return None
    import jax

    fn, _ = bind_nondiff(primal, case)
    try:
        _quiet(lambda: jax.vmap(fn)(*copy_tree(stacked)))
    except Exception as exc:  # noqa: BLE001 - JAX's refusal is the evidence
        return first_line(exc)
    return None


def _same_without_vmap(fn: Any, jit: bool, xs: tuple[Any, ...], ybar: Any, batched_out: Any, case: Case) -> bool:
    """Whether ``jax.vjp`` of one example alone gives ``batched_out`` (that example's output under vmap)."""
    from gradguard.engines.jax_engine import _relay

    try:
        with _relay.relaying():
            alone, _ = _quiet(lambda: _batched_vjp(fn, jit, batched=False)(*copy_tree(xs), copy_tree(ybar)))
    except Exception:  # noqa: BLE001 - raises alone: no evidence that vmap is not to blame
        return False
    import jax

    return first_difference(batched_out, jax.tree_util.tree_map(np.asarray, alone), case) is None


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b))) if _numeric(a) else a == b
    except Exception:  # noqa: BLE001
        return False


def _numeric(a: Any) -> bool:
    return isinstance(a, (np.ndarray, np.generic, int, float, complex)) or (hasattr(a, "shape") and hasattr(a, "dtype"))


for _id in ("GG601", "GG602"):
    CHECKS[_id].extra["needs_jax"] = True

"""PyTorch-specific checks for `torch.autograd.Function` rules declared with ``torch_rule``: what backward
returns (GG701 its structure, GG702 under ``ctx.needs_input_grad``, GG705 under double backward).

Every isolation check already runs a torch rule through PyTorch's autograd (see
`gradguard.checker.torch_rules`); these judge what only PyTorch has. The in-place ones (GG703 the version
counter on saved tensors, GG704 ``ctx.mark_dirty``) are in torch_inplace.py.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Iterable

import numpy as np

from gradguard.checker import tolerances
from gradguard.checker.case import Case, RuleRaised, is_finite_tree
from gradguard.checker.checks._jax import first_line
from gradguard.checker.checks.registry import Problem, Skip, check
from gradguard.checker.compare import at, where, worst_index
from gradguard.checker.checks.second_order import (across_primal_stairs, discontinuous_at_x, fd_directional, kinked,
                                                    kinked_where_not_finite, pullback_in_stairs)
from gradguard.checker.kinks import contracted, finer_steps_admit
from gradguard.checker.inputs import show, show_apart
from gradguard.checker.specs import UNSTRUCTURED_RRULE, ignores
from gradguard.checker.trees import abs_inner, copy_tree, describe, inner, leaves, tree_map, with_leaves
from gradguard.engines.torch_engine import gradients
from gradguard.engines import fd

__all__ = ["TORCH_GIVEN", "backward_structure", "needs_input_grad", "double_backward", "run_call", "grads_of", "numpy_grads", "first_difference"]

TORCH_GIVEN = """
    import torch
    from gradguard import torch_rule
"""


def _function(case: Case) -> Any:
    from gradguard.checker.torch_rules import TORCH_FUNCTION

    fn = case.rule.extra.get(TORCH_FUNCTION)
    if fn is None:
        raise Skip("the rule is not a torch.autograd.Function")
    return fn


def run_call(case: Case, args: tuple[Any, ...] | None = None, **kw: Any) -> Any:
    from gradguard.engines import torch_engine

    fn = _function(case)
    given = case.fresh() if args is None else args
    return case.call("forward", lambda: torch_engine.run_function(fn, given, case.diff_positions,
                                                                  kwargs=case.rule.extra.get("kwargs"), **kw))


def grads_of(case: Case, call: Any, ybar: Any, *, copy: bool = True, **kw: Any) -> dict[int, Any]:
    """``call.grad(ybar)``; a backward whose structure PyTorch refuses skips (GG701 reports it), any other
    error is the rule's. ``copy=False`` hands ``ybar``'s tensors as they are (a clone would make an expanded one
    contiguous), for a check that asks about their layout."""
    from gradguard.engines import torch_engine

    try:
        return call.grad(copy_tree(ybar) if copy else ybar, **kw)
    except Exception as exc:  # noqa: BLE001 - the user's backward raised (PyTorch passes its exception on)
        if isinstance(exc, RuntimeError) and any(text in str(exc) for text in torch_engine.STRUCTURE_ERRORS):
            raise Skip(f"PyTorch refuses what the backward of {case.rule.name} returns (see GG701): {exc}") from None
        raise RuleRaised("pullback", case.rule.name, exc) from exc


def numpy_grads(case: Case, grads: dict[int, Any]) -> dict[int, np.ndarray]:
    from gradguard.engines import torch_engine

    out = {}
    for i in case.diff_positions:
        g = grads.get(i)
        out[i] = np.zeros_like(np.asarray(case.args[i]), dtype=float) if g is None else np.asarray(torch_engine.to_numpy(g))
    return out


def first_difference(got: np.ndarray, want: np.ndarray, case: Case) -> tuple[tuple[int, ...], float, float] | None:
    err = np.abs(got - want)
    bound = case.tol.atol + case.tol.rtol * (np.abs(got) + np.abs(want))
    if np.all(err <= bound) or not (np.all(np.isfinite(got)) and np.all(np.isfinite(want))):
        return None
    idx = worst_index(err - bound)  # the element furthest outside its bound
    return idx, float(np.asarray(got)[idx]), float(np.asarray(want)[idx])


# -- GG701 ------------------------------------------------------------------------------------------
@check(
    "GG701",
    family="torch",
    title="backward returns what PyTorch refuses: the wrong number of gradients, a list, a gradient that is not a "
          "tensor, one for a non-tensor input, or a complex one for a real input",
    kinds=("torch",),
    given=TORCH_GIVEN,
    broken="""
        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                ctx.k = k
                return x * k

            @staticmethod
            def backward(ctx, grad):
                return grad * ctx.k          # one gradient for two forward inputs

        scale_rule = torch_rule(Scale, arrays(shape=(3,)), constant(2.0))
    """,
    fixed="""
        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                ctx.k = k
                return x * k

            @staticmethod
            def backward(ctx, grad):
                return grad * ctx.k, None    # None for the non-tensor k

        scale_rule = torch_rule(Scale, arrays(shape=(3,)), constant(2.0))
    """,
)
def backward_structure(case: Case) -> Iterable[Problem]:
    """PyTorch calls ``backward`` with one gradient per output and expects a tuple of one gradient per input of
    ``forward`` (a lone value where forward has one input): a tensor (or None) for a tensor input, None for
    anything else (an int, a float, a flag). It unpacks nothing but a tuple: a list is one gradient to it.
    Anything else raises inside ``loss.backward()``, far from the Function. The check calls ``backward``
    directly with the recorded ``ctx`` and names what is wrong in what it returned; the other checks skip
    such a rule, since PyTorch refuses to run it."""
    import torch

    call = run_call(case)
    y = call.outputs_numpy()
    ybar = case.cotangent_like(y)
    if call.node is None:
        raise Skip("no output of the Function requires grad, so PyTorch never calls its backward")
    raw = case.call("pullback", lambda: call.raw_backward(ybar))
    n = len(call.inputs)
    name = case.rule.name
    if isinstance(raw, list):
        # PyTorch unpacks only a tuple: a list is one gradient to it, which it refuses (torch-interpol's
        # SplineCoeff returns `[grad] + [None] * 4`, and every backward through it raises)
        yield Problem(
            message=(f"the backward of {name} returned a list of {len(raw)}; PyTorch unpacks only a tuple into one "
                     "gradient per input of forward and takes a list as a single gradient, so it raises. Return a "
                     "tuple."),
            expected=f"a tuple of {n} gradients",
            actual=f"a list of {len(raw)}",
            fix="Return a tuple (`return tuple(grads)`, or `return a, b`), not a list.",
        )
        return
    got = raw if isinstance(raw, tuple) else (raw,)
    if len(got) < n or any(g is not None for g in got[n:]):
        yield Problem(
            message=(f"the backward of {name} must return one gradient per input of forward ({n}), but returned "
                     f"{len(got)}. Return a tuple with one entry per forward input; use None for inputs that are "
                     "not tensors or need no gradient."),
            expected=f"{n} gradients",
            actual=f"{len(got)} gradients",
            fix="Return exactly one gradient per forward input, in order (None where there is none).",
        )
        return
    for i, g in enumerate(got[:n]):
        if g is not None and not isinstance(g, torch.Tensor):
            yield Problem(
                message=(f"the backward of {name} returned a value of type {type(g).__name__} as the gradient for "
                         f"input {i} of forward; PyTorch accepts only a tensor or None there, and raises. Return a "
                         "tensor (torch.as_tensor) or None."),
                location=f"argument {i}",
                expected="a tensor or None",
                actual=type(g).__name__,
                fix="Return each gradient as a torch.Tensor (torch.as_tensor(value)), or None where there is none.",
            )
            return
    for i, (g, inp) in enumerate(zip(got, call.inputs)):
        if g is not None and not isinstance(inp, torch.Tensor):
            yield Problem(
                message=(f"the backward of {name} returned a gradient ({describe(call_numpy(g))}) for input {i} of "
                         f"forward, which is not a tensor ({type(inp).__name__} {inp!r:.40}); PyTorch raises on it. "
                         "Return None at that position."),
                location=f"argument {i}",
                expected="None",
                actual=describe(call_numpy(g)),
                fix="Return None for every forward input that is not a tensor.",
            )
            return
    for i, (g, inp) in enumerate(zip(got, call.inputs)):
        if isinstance(g, torch.Tensor) and isinstance(inp, torch.Tensor) and g.is_complex() and not inp.is_complex() \
                and inp.is_floating_point():
            real = str(inp.dtype).removeprefix("torch.")
            yield Problem(
                message=(f"the backward of {name} returned a complex gradient ({describe(call_numpy(g))}) for input {i} "
                         f"of forward, which is real ({real}); PyTorch raises on it. The gradient of a real input is "
                         "real."),
                location=f"argument {i}",
                expected=f"a real tensor ({real})",
                actual=describe(call_numpy(g)),
                fix=("Return the real part for a real input (grad.real, as PyTorch's own operations do where a real "
                     "tensor enters a complex computation)."),
            )
            return


def call_numpy(g: Any) -> Any:
    from gradguard.engines import torch_engine

    return torch_engine.to_numpy(g)


# -- GG702 ------------------------------------------------------------------------------------------
@check(
    "GG702",
    family="torch",
    title="backward ignores ctx.needs_input_grad (wrong or missing gradient when only some inputs need one)",
    compares_calls=True,
    kinds=("torch",),
    given=TORCH_GIVEN,
    broken="""
        class Mul(torch.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                ctx.save_for_backward(a, b)
                return a * b

            @staticmethod
            def backward(ctx, grad):
                a, b = ctx.saved_tensors
                ga = grad * b if ctx.needs_input_grad[0] else None
                gb = grad * a if ctx.needs_input_grad[0] else None   # checks a's flag for b
                return ga, gb

        mul_rule = torch_rule(Mul, arrays(shape=(3,)), arrays(shape=(3,)))
    """,
    fixed="""
        class Mul(torch.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                ctx.save_for_backward(a, b)
                return a * b

            @staticmethod
            def backward(ctx, grad):
                a, b = ctx.saved_tensors
                ga = grad * b if ctx.needs_input_grad[0] else None
                gb = grad * a if ctx.needs_input_grad[1] else None
                return ga, gb

        mul_rule = torch_rule(Mul, arrays(shape=(3,)), arrays(shape=(3,)))
    """,
)
def needs_input_grad(case: Case) -> Iterable[Problem]:
    """In a program most inputs of a Function do not require grad (data, frozen weights), and
    ``ctx.needs_input_grad`` tells ``forward`` and ``backward`` which do, so they can skip work. A
    ``backward`` that reads the wrong flag, or a ``forward`` that saves less when a flag is False while
    ``backward`` still uses it, gives a missing or wrong gradient (or raises) only in those programs. The
    check runs the Function with one differentiable input requiring grad at a time and compares that
    input's gradient with the one it gets when every input requires grad."""
    if len(case.diff_positions) < 2:
        raise Skip("fewer than two differentiable inputs: needs_input_grad has no partial setting to try")
    full_call = run_call(case)
    ybar = case.cotangent_like(full_call.outputs_numpy())
    full = numpy_grads(case, grads_of(case, full_call, ybar))
    name = case.rule.name
    for i in case.diff_positions:
        flags = tuple(j == i for j in range(case.nargs))
        call = run_call(case, requires_grad=(i,))
        try:
            part = numpy_grads(case, grads_of(case, call, ybar))
        except RuleRaised as raised:  # the user's backward raised in this setting only
            exc = raised.exc
            yield Problem(
                message=(f"the backward of {name} raises when only input {i} requires grad "
                         f"(ctx.needs_input_grad = {flags}), though it runs when every input does: "
                         f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"),
                location=f"argument {i}",
                fix=_NEEDS_FIX,
            )
            return
        bad = first_difference(part[i], full[i], case)
        if bad is not None:
            idx, got, want = bad
            yield Problem(
                message=(f"with only input {i} requiring grad (ctx.needs_input_grad = {flags}), the backward of "
                         f"{name} gives input {i} the gradient {show(got)}{at(idx)}, but {show(want)} when every "
                         "input requires grad."),
                location=where(i, idx),
                expected=show(want),
                actual=show(got),
                fix=_NEEDS_FIX,
            )
            return


_NEEDS_FIX = ("Compute the gradient of input i whenever ctx.needs_input_grad[i] is True, whatever the other flags "
              "say, and save in forward everything backward reads in that case.")


# -- GG705 ------------------------------------------------------------------------------------------
@check(
    "GG705",
    family="torch",
    title="double backward wrong (second order against finite differences)",
    compares_calls=True,
    kinds=("torch",),
    given=TORCH_GIVEN,
    broken="""
        class Sin(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x.sin()

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return grad * x.detach().cos()   # detached: double backward sees a constant

        sin_rule = torch_rule(Sin, arrays(shape=(3,)))
    """,
    fixed="""
        class Sin(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x.sin()

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return grad * x.cos()

        sin_rule = torch_rule(Sin, arrays(shape=(3,)))
    """,
)
def double_backward(case: Case) -> Iterable[Problem]:
    """``torch.autograd.grad(..., create_graph=True)`` (gradient penalties, Hessian-vector products,
    meta-learning) differentiates ``backward`` itself. A backward that detaches a saved tensor, computes in
    NumPy, runs under ``torch.no_grad()`` or is ``@once_differentiable`` is right to first order and gives
    a wrong (or no) second derivative. For a random cotangent ``ybar``, direction ``u`` and covector ``w``,
    the check compares PyTorch's ``d/dt <w, grad at (x + t u)(ybar)>`` (double backward) with finite
    differences of the rule's gradient, then the derivative with respect to the cotangent itself (`_along_cotangent`:
    a gradient penalty differentiates through it); a gradient that carries no graph where finite differences give a
    second derivative is reported too, also where the backward is declared ``@once_differentiable``: PyTorch
    raises where the cotangent carries a graph, but where it carries none (an output that feeds the loss
    linearly) the second-order terms through the Function are silently absent, and the message says so."""
    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    call = run_call(case)
    ybar = case.cotangent_like(call.outputs_numpy())
    u = _on_structure(case, case.direction("direction"))
    w = case.direction("covector")
    try:
        grads = grads_of(case, call, ybar, create_graph=True)
    except RuleRaised as exc:
        # torch-householder's backward calls torch.bmm(..., out=) on saved tensors, which autograd refuses under
        # create_graph=True alone: an error whose fix spoke of the input, where a raise in the second differentiation
        # itself is a warning. A backward that raises without create_graph too is the first-order checks' finding.
        yield _raises_under_create_graph(case, run_call(case), ybar, exc)
        return
    first = numpy_grads(case, grads)
    if not is_finite_tree(list(first.values())):
        return
    found = list(_along_input(case, call, ybar, u, w, grads, first))
    if found:
        yield from found
        return
    problem = _along_cotangent(case, ybar, w)
    if problem is not None:
        yield problem


def _raises_under_create_graph(case: Case, call: Any, ybar: Any, exc: RuleRaised) -> Problem:
    """GG705's warning for a backward that raises under create_graph=True and runs without it (``exc`` re-raised where
    it raises either way: the first-order checks report that)."""
    grads_of(case, call, ybar)  # raises RuleRaised where the plain backward raises too
    raised = first_line(exc.exc)
    return Problem(
        message=(f"the backward of {case.rule.name} raises {raised} when asked for a gradient with a graph "
                 "(torch.autograd.grad with create_graph=True) and runs without one: a program that differentiates "
                 "this gradient (a gradient penalty, a Hessian-vector product) stops there, so its second order is "
                 "not checked."),
        actual=raised,
        fix=("If programs are to differentiate this gradient, write backward with operations autograd can record (no "
             "out= arguments, no in-place writes into saved tensors, no .numpy()); otherwise nothing is silently "
             "wrong: such a program stops with this exception."),
        severity="warning",
    )


def _along_input(case: Case, call: Any, ybar: Any, u: tuple[Any, ...], w: tuple[Any, ...], grads: dict[int, Any],
                 first: dict[int, np.ndarray]) -> Iterable[Problem]:
    """GG705's derivative of the backward with respect to the input, along ``u``."""
    rule = case.rule
    rrule = _as_declared(rule)

    def pulled(*a: Any) -> Any:
        return rrule(*a)[1](copy_tree(ybar))

    lhs = fd_directional(pulled, case.fresh(), u, w)
    if lhs is None:
        raise Skip("finite differences of the gradient failed at this input")
    total = _weighted_graph(case, grads, w)
    name = rule.name
    # the size of the gradient moved along u: the rule's tolerances (a solver's rtol) hold relative to it, whether the
    # second order is compared with PyTorch's (below) or, with no graph, found missing (zuko's adaptive ODE adjoint: its
    # steps move with x, 2.4e-6 of this scale where rtol=1e-3 is declared)
    scale = sum(float(np.sum(np.abs(np.asarray(u[i])) * np.abs(first[i]))) for i in case.diff_positions)
    if total is None:
        if tolerances.close(float(lhs.value), 0.0, case.tol, fd_error=lhs.error, scale=scale) \
                or kinked(pulled, case.fresh(), u, w):
            return
        lhs = fd_directional(pulled, case.fresh(), u, w, confirm=True)  # one table can be fooled (a pole nearby)
        if lhs is None or tolerances.close(float(lhs.value), 0.0, case.tol, fd_error=lhs.error, scale=scale):
            return
        from gradguard.checker.torch_rules import TORCH_FUNCTION

        if _once_differentiable(rule.extra.get(TORCH_FUNCTION)):
            # Declared: PyTorch raises where the cotangent carries a graph; where it carries none (the output
            # feeds the loss linearly) the second-order terms through this Function are silently absent.
            what = ("is silently incomplete: its backward is declared @once_differentiable, and for a cotangent that "
                    "carries no graph the gradients it returns carry none (PyTorch raises only where the cotangent "
                    "carries one), so a program that differentiates its gradient misses the terms through it:")
            actual = "no graph (declared @once_differentiable)"
        else:
            what = ("is missing: the gradients its backward returns carry no graph (torch.autograd.grad with "
                    "create_graph=True gave tensors that do not require grad), so differentiating a gradient raises "
                    "where nothing else in the program carries a graph, and silently leaves out the terms through "
                    "this Function where something does (a gradient penalty, a Hessian-vector product of a larger "
                    "loss); but")
            actual = "no graph"
        yield Problem(
            message=(f"double backward through {name} {what} along a random direction u, d/dt <w, grad at "
                     f"(x + t u)(ybar)> = {show(float(lhs.value))} by finite differences of the gradient."),
            expected=show(float(lhs.value)),
            actual=actual,
            fix=_DOUBLE_FIX,
        )
        return
    leaves = [call.leaves[i] for i in case.diff_positions]
    try:
        second = gradients(total, leaves)
    except Exception as exc:  # noqa: BLE001 - the rule's double backward raised (an assert that refuses it)
        raised = first_line(exc)
        # Loud, not silent: a program that differentiates this gradient stops with the rule's own exception.
        yield Problem(
            message=(f"double backward through {name} raises {raised} (torch.autograd.grad of the gradient, which "
                     "backward returned with a graph): a program that differentiates this gradient (a gradient "
                     "penalty, a Hessian-vector product) stops there, so its second order is not checked."),
            actual=raised,
            fix=_DOUBLE_FIX,
            severity="warning",
        )
        return
    rhs = 0.0
    not_finite: list[tuple[int, int]] = []  # (argument, flat element) where PyTorch's derivative of the backward is not finite
    for i, d in zip(case.diff_positions, second):
        if d is not None:
            d_np = np.asarray(call_numpy(d))
            rhs += inner(np.asarray(u[i]), d_np)
            if d_np.dtype.kind in "fc":
                not_finite += [(i, int(k)) for k in np.flatnonzero(~np.isfinite(d_np))]
    if tolerances.close(float(lhs.value), rhs, case.tol, fd_error=lhs.error, scale=scale):
        return
    if kinked(pulled, case.fresh(), u, w):
        return
    lhs = fd_directional(pulled, case.fresh(), u, w, confirm=True)  # one table can be fooled (a pole nearby)
    if lhs is None or tolerances.close(float(lhs.value), rhs, case.tol, fd_error=lhs.error, scale=scale):
        return
    if not math.isfinite(rhs) and _gradient_kinks(case, call, u, w, not_finite):
        # A norm's gradient x/|x| at x = 0: the entries the cotangent weighs by 0 leave the program smooth, but
        # PyTorch multiplies their infinite second derivative by that 0. The rule has no second derivative there
        # to be right or wrong about (GG206 and GG301 judge a first-order NaN at such a point the same way).
        yield Problem(
            message=(f"double backward through {name} gives {show(rhs)} at an input where its gradient has no "
                     "derivative that finite differences resolve (with every output and every entry weighted by 1, the "
                     "gradient at x + t u jumps or kinks at t = 0 at the steps they take): along a "
                     f"random direction u, d/dt <w, grad at (x + t u)(ybar)> = {show(float(lhs.value))} by finite "
                     "differences of the gradient for this cotangent and covector, along which it shows no jump, but "
                     "PyTorch's derivative of the backward, taken through the entries without a derivative, is not "
                     "finite."),
            expected=show(float(lhs.value)),
            actual=show(rhs),
            fix=_NONFINITE_DOUBLE_FIX,
            severity="warning",
        )
        return
    if discontinuous_at_x(case, pulled, u, w, lhs, rhs):
        return  # the output or the gradient jumps at x alone (roma's Procrustes at M = 0): no derivative to judge
    if math.isfinite(rhs) and (pullback_in_stairs(pulled, case.fresh(), u, w, lhs, rhs, case.tol, scale)
                               or across_primal_stairs(case, pulled, u, w, rhs, case.tol, scale)):
        return  # the backward reads a forward solved to a tolerance (LML's bisection): finite differences read a stair
    if math.isfinite(rhs) and finer_steps_admit(contracted(pulled, w), case.fresh(), u, rhs, case.tol, scale):
        # The gradient jumps near x, not at it, or has a pole there: finer steps hold PyTorch's value between their
        # one-sided derivatives (as GG204 asks). LAPACK's eigenvector signs flipped between x and x + 1e-6 u for a
        # nearly decoupled eigenvalue, and every table from the first step down to 1e-6 averaged the flip.
        return
    fd_text, torch_text = show_apart(float(lhs.value), rhs)
    yield Problem(
        message=(f"double backward through {name} is wrong: along a random direction u, d/dt <w, grad at "
                 f"(x + t u)(ybar)> = {fd_text} by finite differences of the gradient, but PyTorch's "
                 f"derivative of the backward (create_graph=True) gives {torch_text}."),
        expected=fd_text,
        actual=torch_text,
        fix=_wrong_double_fix(case) if math.isfinite(rhs) else _NONFINITE_DOUBLE_FIX,
    )


def _along_cotangent(case: Case, ybar: Any, w: tuple[Any, ...]) -> Problem | None:
    """GG705's derivative of the backward with respect to its cotangent, along ``c``: ``ybar`` with every second
    element negated.

    A gradient penalty differentiates the backward through its cotangent too (the cotangent a Function's backward
    gets there is itself a gradient that depends on the input). The backward is linear in it (GG202 judges that),
    so the derivative along ``c`` is half the difference of two backward calls at ``ybar + c`` and ``ybar - c``, exact
    up to rounding; PyTorch's is ``torch.autograd.grad`` of ``<w, grad(ybar)>`` with respect to a cotangent that
    requires grad. A backward computed in NumPy, or from a detached cotangent, gives 0 there, silently. Not judged
    for a backward declared ``@once_differentiable``, where PyTorch raises instead."""
    import torch

    from gradguard.checker.torch_rules import TORCH_FUNCTION

    if _once_differentiable(case.rule.extra.get(TORCH_FUNCTION)):
        return None
    rrule = _as_declared(case.rule)
    call = run_call(case)
    # The direction is made from ybar, not drawn: a draw here would move every later input the search draws
    base = leaves(copy_tree(ybar))
    along = [_alternated(b) for b in base]

    def pulled(s: float) -> Any:
        return rrule(*case.fresh())[1](with_leaves(ybar, [b + s * np.asarray(v) for b, v in zip(base, along)]))

    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ahead, behind, middle = pulled(1.0), pulled(-1.0), pulled(0.0)
    except Exception:  # noqa: BLE001 - the backward raised at a shifted cotangent: other checks report that
        return None
    a, b, m = inner(w, ahead), inner(w, behind), inner(w, middle)
    if not all(math.isfinite(v) for v in (a, b, m)):
        return None
    if not tolerances.close(a + b, 2 * m, case.tol, scale=abs(a) + abs(b)):
        return None  # not affine in the cotangent: GG202's finding, nothing to add here
    # Each inner product rounds at eps times the sum of its terms' sizes; their difference inherits that. The eps
    # is that of what the backward computed in: a float32 gradient for a float64 input (nncf's quantizers return
    # grad_low.float(), which PyTorch casts back to float64) rounds each backward value at 1e-7 of its size, and
    # two large values that nearly cancel left a difference PyTorch's exact derivative was judged against (a false
    # GG705 at every seed).
    eps = float(np.finfo(case.dtype).eps)
    rounding = sum(max([fd.computed_eps(leaf) for leaf in leaves(t) if leaf is not None] + [eps]) * abs_inner(wi, t)
                   for values in (ahead, behind) for wi, t in zip(w, values) if wi is not None and t is not None)
    lhs = (a - b) / 2
    # Floating cotangents require grad; an integer output's (its zeros) cannot, and carries no derivative anyway
    cts = [torch.tensor(np.array(b_), requires_grad=np.asarray(b_).dtype.kind in "fc") for b_ in base]
    wrt = [(v, t) for v, t in zip(along, cts) if t.requires_grad]
    grads = grads_of(case, call, with_leaves(ybar, cts), create_graph=True)
    total = _weighted_graph(case, grads, w)
    rhs, connected = 0.0, False
    if total is not None and wrt:
        try:
            second = gradients(total, [t for _, t in wrt])
        except Exception:  # noqa: BLE001 - loud: a program differentiating this gradient stops there
            return None
        connected = any(d is not None for d in second)
        rhs = sum((inner(np.asarray(v), call_numpy(d)) for (v, _), d in zip(wrt, second) if d is not None), 0.0)
        if not math.isfinite(rhs):
            return None  # PyTorch's 0 * inf where the gradient jumps in the input: the input part's to judge
    scale = abs(lhs) + abs(rhs)
    if tolerances.close(lhs, rhs, case.tol, fd_error=4 * rounding, scale=scale):
        return None
    # How far the backward's values depart from an affine function of the cotangent, measured at two spans (asked only
    # where the comparison failed at the dtype's rounding: two more backward calls): the rounding of what it computes,
    # whatever its dtype says. xformers' SwiGLU backward takes silu' through x.float() inside float64 arithmetic, so no
    # value of it is a float32 number, and its half-difference 0.16936... was judged against PyTorch's exact
    # derivative at float64's rounding (3.5e-8 apart, relative; a false GG705 at seed 2).
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a2, b2 = inner(w, pulled(0.5)), inner(w, pulled(-0.5))
    except Exception:  # noqa: BLE001 - the backward raised at a shifted cotangent: other checks report that
        return None
    if not (math.isfinite(a2) and math.isfinite(b2)):
        return None
    measured = max(abs(a + b - 2 * m), abs(a2 + b2 - 2 * m), abs((a - b) - 2 * (a2 - b2)))
    if tolerances.close(lhs, rhs, case.tol, fd_error=4 * rounding + measured, scale=scale):
        return None
    name = case.rule.name
    lhs_text, rhs_text = show_apart(lhs, rhs)
    how = ("the gradients its backward returns carry no graph from the cotangent" if not connected
           else "PyTorch's derivative of the backward with respect to its cotangent gives " + rhs_text)
    return Problem(
        message=(f"double backward through {name} is wrong with respect to the cotangent: along c (ybar with every "
                 f"second element negated), d/ds <w, grad(ybar + s c)> = {lhs_text} (the backward is affine along c here, so "
                 f"this is half the difference of the backward at ybar + c and ybar - c), but {how}, so a program "
                 "that differentiates a gradient through this Function (a gradient penalty) misses those terms."),
        location="the cotangent",
        expected=lhs_text,
        actual=rhs_text,
        fix=_DOUBLE_FIX,
    )


def _wrong_double_fix(case: Case) -> str:
    """GG705's fix for a double backward that is wrong, opening with the first order: fix it first where GG201 judges
    it, and where the declaration leaves GG201 out, what is compared instead."""
    if ignores(case.rule, "GG201"):
        return _SURROGATE_FIRST + "Write backward with " + _WRONG_DOUBLE_FIX.removeprefix("Otherwise write backward with ")
    return _FIRST_ORDER_FIRST + _WRONG_DOUBLE_FIX


def _weighted_graph(case: Case, grads: dict[int, Any], w: tuple[Any, ...]) -> Any:
    """``<w, grads>`` as a real PyTorch scalar over the gradients that carry a graph (``Re sum(conj(w) g)`` for a
    complex gradient, as `trees.inner` reads it: PyTorch differentiates only a real scalar, and a complex sum made
    every correct complex Function's double backward "raise"); None where none does."""
    import torch

    total = None
    for i in case.diff_positions:
        g = grads.get(i)
        if isinstance(g, torch.Tensor) and g.requires_grad:
            wi = torch.as_tensor(np.asarray(w[i]), dtype=g.dtype)
            term = (wi.conj() * g).real.sum() if g.is_complex() else (g * wi).sum()
            total = term if total is None else total + term
    return total


def _alternated(leaf: Any) -> Any:
    """``leaf`` with every second element (in C order) negated: a cotangent direction that is not ``ybar``'s own."""
    arr = np.array(leaf, copy=True)
    flat = arr.reshape(-1)  # a view of the fresh, contiguous copy
    flat[1::2] = -flat[1::2]
    return arr


def _gradient_kinks(case: Case, call: Any, u: tuple[Any, ...], w: tuple[Any, ...], where: list[tuple[int, int]]) -> bool:
    """Whether the rule's gradient for a cotangent of ones, read with a covector of ones, kinks or jumps at x along
    ``u`` or along an input element where PyTorch's derivative of the backward is not finite
    (:func:`kinked_where_not_finite`)."""
    ones = tree_map(lambda y: None if y is None else np.ones_like(np.asarray(y)), call.outputs_numpy())
    every = tree_map(lambda c: None if c is None else np.ones_like(np.asarray(c)), w)
    rrule = _as_declared(case.rule)

    def pulled(*a: Any) -> Any:
        return rrule(*a)[1](copy_tree(ones))

    return kinked_where_not_finite(pulled, case.fresh(), u, every, where)


def _on_structure(case: Case, u: tuple[Any, ...]) -> tuple[Any, ...]:
    """``u`` moved onto each structured argument's tangent space at ``x`` (:func:`structure.project_tangent`): the
    rule is differentiated as declared, off the structure's projections, so a step off the structure asks the
    Function about inputs it was never meant for. linear_operator's Cholesky solve reads A's lower triangle only:
    along a direction that is not symmetric its gradient moves by 3.33041, along the symmetric part by -1.55052,
    PyTorch's own double backward."""
    from gradguard.checker.specs import structures_of
    from gradguard.checker.structure import project_tangent

    structures = structures_of(case.rule.arg_specs or ())
    if not structures:
        return u
    moved = tuple(v if v is None or i not in structures else project_tangent(structures[i], v, case.args[i])
                  for i, v in enumerate(u))
    if any(v is not None and not np.array_equal(np.asarray(v), np.asarray(m)) for v, m in zip(u, moved)):
        kinds = " and ".join(sorted({structures[i] for i in structures if i < len(u)}))
        case.used_instead(f"direction as used (moved onto the declared {kinds} structure)", moved)
    return moved


def _as_declared(rule: Any) -> Any:
    """The rrule as declared, whose backward PyTorch differentiates: not read through a structure's projections (a
    rotation's depends on the point, and PyTorch's derivative does not see it)."""
    return rule.extra.get(UNSTRUCTURED_RRULE, rule.rrule)


def _once_differentiable(function: Any) -> bool:
    """Whether ``function.backward`` is wrapped by ``torch.autograd.function.once_differentiable``."""
    from torch.autograd.function import once_differentiable

    backward = getattr(function, "backward", None)
    marker = once_differentiable(lambda ctx: None).__code__
    return getattr(backward, "__code__", None) is marker


_DOUBLE_FIX = ("Write backward with differentiable torch operations on the saved tensors (no .detach(), .numpy(), "
               "torch.no_grad() or @once_differentiable), or give the part that cannot be differentiated its own "
               "Function with a backward of its own.")
# The backward carries a graph, and its derivative is wrong: a detached or NumPy-computed part, or a saved output of
# the Function itself, whose derivative is then this same backward's (right only if the first order is: GG201).
# The backward's own derivative is NaN or infinite where its finite differences are not (spikingjelly's s2nn at x = -1:
# torch.where's untaken branch beta / (x + 1) divides by zero, and 0 * inf is NaN): advice about detached parts misleads.
_NONFINITE_DOUBLE_FIX = ("Keep inf and NaN out of the backward's own graph: a torch.where or clamp whose untaken branch "
                         "divides by zero or takes a log or sqrt of 0 still contributes 0 * inf to the double backward. "
                         "Guard the operand itself (torch.where(mask, x, 1) inside the risky operation, then "
                         "torch.where(mask, that, other)), as for a first-order NaN (GG206, GG301).")
_FIRST_ORDER_FIRST = ("If the first order is wrong too (GG201), fix it first: a backward that reads the Function's "
                      "saved output is differentiated through this same backward. ")
# A rule that leaves GG201 out (a straight-through estimator, a surrogate gradient) has a first order that is not the
# derivative on purpose: what this check judges is the derivative of that backward as written (bitsandbytes' int8
# matmul, whose fix sent its reader to the check it had left out)
_SURROGATE_FIRST = ("The rule leaves GG201 out (a surrogate first order): this compares the derivative of its backward "
                    "as written with finite differences of that same backward. ")
_WRONG_DOUBLE_FIX = ("Otherwise write backward with "
                     "differentiable torch operations on the saved tensors (no .detach(), .numpy() or torch.no_grad() "
                     "on any part of it), and recompute in backward what forward computed and saved besides the "
                     "inputs and outputs (forward runs without a graph, so such a tensor is a constant to double "
                     "backward: residual-flows' SwishFn saves sigmoid(beta x)), or give the part that cannot be "
                     "differentiated its own Function with a backward of its own.")

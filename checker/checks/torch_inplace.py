"""PyTorch-specific in-place checks for `torch.autograd.Function` rules: a saved tensor changed in place
between forward and backward without PyTorch's version counter noticing (GG703), a forward that
writes into an input without ``ctx.mark_dirty`` (GG704), and a backward that writes an input's ``.grad``
itself (GG706)."""

from __future__ import annotations

import warnings
from typing import Any, Iterable

import numpy as np

from gradguard.checker.case import Case, RuleRaised
from gradguard.checker.checks.registry import Problem, Skip, check
from gradguard.checker.checks.torch_checks import TORCH_GIVEN, first_difference, grads_of, numpy_grads, run_call
from gradguard.checker.compare import at, where
from gradguard.checker.inputs import show
from gradguard.engines import torch_engine

__all__ = ["saved_tensor_version", "mark_dirty", "writes_input_grad"]

# PyTorch's errors when a tensor autograd needs was changed in place (a saved tensor's version counter,
# or the base of a view a Function returned) all say so.
_LOUD = "inplace"


# -- GG703 ------------------------------------------------------------------------------------------
@check(
    "GG703",
    family="torch",
    title="a tensor saved for backward can change in place unnoticed (no version counter check)",
    compares_calls=True,
    kinds=("torch",),
    given=TORCH_GIVEN,
    broken="""
        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.x = x                    # kept as an attribute: no version check
                return x * x

            @staticmethod
            def backward(ctx, grad):
                return 2 * ctx.x * grad

        square_rule = torch_rule(Square, arrays(shape=(3,)))
    """,
    fixed="""
        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return 2 * x * grad

        square_rule = torch_rule(Square, arrays(shape=(3,)))
    """,
)
def saved_tensor_version(case: Case) -> Iterable[Problem]:
    """A program may change a tensor in place after a Function used it (``x.add_(1)``, an optimizer step,
    a buffer reused). Tensors saved with ``ctx.save_for_backward`` carry a version number, and PyTorch
    raises at backward time if one changed; tensors kept on ``ctx`` as plain attributes do not, and
    backward silently computes with the new values. The check changes each tensor input and each output
    in place between forward and backward and requires either PyTorch's error or an unchanged gradient."""
    import torch

    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    first = run_call(case)
    ybar = case.cotangent_like(first.outputs_numpy())
    want = numpy_grads(case, grads_of(case, first, ybar))
    name = case.rule.name
    targets: list[tuple[str, Any]] = [(f"input {i}", lambda c, i=i: c.inputs[i]) for i in case.diff_positions]
    nout = len(first.flat_outputs())
    targets += [(f"output {k}" if nout > 1 else "the output", lambda c, k=k: c.flat_outputs()[k]) for k in range(nout)]
    for label, pick in targets:
        call = run_call(case)
        t = pick(call)
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            continue
        if not torch_engine.readable(t):
            continue  # the Function freed its memory until backward (a reversible block): no program writes into it
        with torch.no_grad():
            kept = t.detach().clone()
            t.mul_(1.5).add_(0.25)
        try:
            got = numpy_grads(case, grads_of(case, call, ybar))
        except RuleRaised as raised:
            if _LOUD in str(raised.exc):
                continue  # PyTorch noticed the change and raised: loud, not wrong
            raise
        finally:
            # An output may be the caller's own tensor (a constant the Function returns as it is, NeMo's
            # GradInsert): what the program changed goes back, or every later draw would see it changed
            if torch_engine.readable(t):  # not freed by backward (a reversible block frees what it recomputed)
                with torch.no_grad():
                    t.copy_(kept)
        for j in case.diff_positions:
            bad = first_difference(got[j], want[j], case)
            if bad is None:
                continue
            idx, g, w = bad
            yield Problem(
                message=(f"the backward of {name} reads {label} as changed in place after forward: changing it "
                         f"between forward and backward (x.mul_(1.5).add_(0.25)) changed the gradient of input {j}"
                         f"{at(idx)} from {show(w)} to {show(g)}, and PyTorch raised nothing."),
                location=where(j, idx),
                expected=show(w),
                actual=show(g),
                fix=("Save the tensors backward reads with ctx.save_for_backward (not as ctx attributes or in "
                     "closures), so that PyTorch's version counter raises when a program changes them in place."),
            )
            return


# -- GG704 ------------------------------------------------------------------------------------------
@check(
    "GG704",
    family="torch",
    title="forward modifies an input in place without ctx.mark_dirty",
    kinds=("torch",),
    given=TORCH_GIVEN,
    broken="""
        class Double_(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x.mul_(2)                    # in place, not marked
                return x

            @staticmethod
            def backward(ctx, grad):
                return 2 * grad

        double_rule = torch_rule(Double_, arrays(shape=(3,)), mutates=0)
    """,
    fixed="""
        class Double(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2                 # a new tensor (or x.mul_(2); ctx.mark_dirty(x); return x)

            @staticmethod
            def backward(ctx, grad):
                return 2 * grad

        double_rule = torch_rule(Double, arrays(shape=(3,)))
    """,
)
def mark_dirty(case: Case) -> Iterable[Problem]:
    """A forward that writes into an input tensor must say so with ``ctx.mark_dirty(x)`` and return it:
    autograd then rebases the input's history on the Function, so later uses of the modified tensor get
    their gradient through ``backward``. Unmarked, autograd keeps treating the tensor as the old value and
    gradients through it skip the Function. The check reads each tensor input's version counter (PyTorch
    bumps it on every in-place write) before and after ``forward`` and requires a bumped input to be
    marked dirty."""
    call = run_call(case)
    if call.node is None:
        raise Skip("no output of the Function requires grad: autograd records nothing to mark")
    dirty = set(call.dirty())
    for i, (before, after) in sorted(call.versions.items()):
        if after > before and i not in dirty:
            yield Problem(
                message=(f"the forward of {case.rule.name} writes into input {i} in place (its version counter "
                         f"went from {before} to {after}) without ctx.mark_dirty on it."),
                location=f"argument {i}",
                expected="ctx.mark_dirty(input)",
                actual=f"version {before} -> {after}, not marked dirty",
                fix=("Call ctx.mark_dirty(x) in forward for every input it modifies in place, and return that "
                     "tensor; or write the result into a new tensor (x * 2 instead of x.mul_(2))."),
            )
            return


# -- GG706 ------------------------------------------------------------------------------------------
@check(
    "GG706",
    family="torch",
    title="backward writes an input's .grad itself (a leaf input's gradient counted twice)",
    kinds=("torch",),
    given=TORCH_GIVEN,
    broken="""
        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                gx = 2 * x * grad
                x.grad = gx                  # "mimics" .backward(): autograd then adds the returned gx to it
                return gx

        square_rule = torch_rule(Square, arrays(shape=(3,)))
    """,
    fixed="""
        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return 2 * x * grad          # returned only: autograd accumulates it where it belongs

        square_rule = torch_rule(Square, arrays(shape=(3,)))
    """,
)
def writes_input_grad(case: Case) -> Iterable[Problem]:
    """A backward that sets ``x.grad`` on a tensor it received and returns a gradient for it as well (memcnn's
    InvertibleCheckpointFunction "mimics backwards" so): where ``x`` is a leaf (a parameter, an input created with
    ``requires_grad=True``) and the program calls ``.backward()``, autograd adds the returned gradient to what
    backward wrote, and ``x.grad`` holds both. The check takes the gradients with ``torch.autograd.grad``, which
    writes no ``.grad``, so a ``.grad`` on the tensors the Function received is backward's own; it then runs the
    Function on leaf tensors with ``.backward()``, as such a program does, and reports what their ``.grad`` holds
    against the gradient backward returns."""
    import torch

    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    call = run_call(case)
    if call.node is None:
        raise Skip("no output of the Function requires grad: autograd records no backward")
    ybar = case.cotangent_like(call.outputs_numpy())
    want = numpy_grads(case, grads_of(case, call, ybar))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # .grad of a tensor that is not a leaf: PyTorch warns on reading it
        written = [i for i in case.diff_positions
                   if isinstance(call.inputs[i], torch.Tensor) and call.inputs[i].grad is not None]
    # A backward that writes .grad and returns no gradient for that input gives a leaf the gradient it wrote once; that
    # the tensors that are not leaves get none is GG201's to find
    written = [i for i in written if np.any(want[i])]
    if not written:
        return
    i = written[0]
    name = case.rule.name
    got = _leaf_backward(case, ybar, i)
    if isinstance(got, str):
        raise Skip(f"the backward of {name} writes input {i}'s .grad itself, but the Function does not run on leaf "
                   f"tensors that require grad ({got}), where a program's .backward() would add its returned gradient "
                   "to that .grad")
    bad = first_difference(got, want[i], case)
    if bad is None:
        return  # what a leaf's .grad holds is the gradient (backward returned none for it): nothing counted twice
    idx, g, w = bad
    yield Problem(
        message=(f"the backward of {name} writes a gradient into input {i}'s .grad itself and returns one for it as "
                 f"well: where that input is a leaf tensor (a parameter, an input created with requires_grad=True) "
                 f"and the program calls .backward(), autograd adds the returned gradient to the one backward wrote, "
                 f"and its .grad{at(idx)} is {show(g)} where the gradient backward returns is {show(w)}."),
        location=where(i, idx),
        expected=show(w),
        actual=show(g),
        fix=("Return the gradients from backward and leave .grad alone: autograd accumulates what backward returns "
             "into each leaf's .grad (and passes it on for a tensor that is not a leaf); a .grad that backward sets "
             "is added to, not replaced."),
    )


def _leaf_backward(case: Case, ybar: Any, i: int) -> np.ndarray | str:
    """What input ``i``'s ``.grad`` holds after the Function runs on leaf tensors and the program calls
    ``.backward()`` for ``ybar``; where it cannot run so (it writes into or frees a leaf that requires grad, which
    PyTorch refuses), what stopped it."""
    import torch

    from gradguard.checker.checks.torch_checks import _function

    try:
        call = torch_engine.run_function(_function(case), case.fresh(), case.diff_positions,
                                         kwargs=case.rule.extra.get("kwargs"), leaf_inputs=True)
        if i not in call.leaves:
            return "the input is not a tensor"
        outs, cts = call.cotangents(ybar)
        if not outs:
            return "no output requires grad"
        torch.autograd.backward(outs, cts)
    except Exception as exc:  # noqa: BLE001 - a Function that writes into its leaf input, or refuses it: loud
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    grad = call.leaves[i].grad
    return np.zeros_like(np.asarray(case.args[i]), dtype=float) if grad is None else np.asarray(torch_engine.to_numpy(grad))

"""GG707: a `torch.autograd.Function`'s backward handed a gradient that is not contiguous.

PyTorch hands ``backward`` each output's gradient in whatever memory layout the backward of the next operation
produced: ``y.sum()`` gives one value expanded over the output (every stride 0), ``y.sum(0)`` one row expanded
along axis 0, ``y.mT @ w`` a transposed one. The anchors' testers hand contiguous gradients only (``gradcheck``
unit vectors, a random ``grad_outputs``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from gradguard.checker.case import Case, RuleRaised
from gradguard.checker.checks.registry import Problem, Skip, check
from gradguard.checker.checks.torch_checks import TORCH_GIVEN, first_difference, grads_of, numpy_grads, run_call
from gradguard.checker.compare import at, where
from gradguard.checker.inputs import show
from gradguard.checker.trees import children, rebuild

__all__ = ["noncontiguous_gradient"]


def _one_value(torch: Any, c: np.ndarray, dtype: Any) -> tuple[np.ndarray, Any] | None:
    """(values, tensor): ``c``'s first entry expanded over its shape (every stride 0), as the backward of
    ``y.sum()`` makes it; None where the output has fewer than two entries."""
    if c.size < 2:
        return None
    first = c.reshape(-1)[:1]
    one = torch.as_tensor(np.ascontiguousarray(first).reshape(())).to(dtype)
    return np.broadcast_to(first.reshape(()), c.shape).copy(), one.expand(*c.shape)


def _expanded(torch: Any, c: np.ndarray, dtype: Any) -> tuple[np.ndarray, Any] | None:
    """(values, tensor): ``c``'s first slice along axis 0, expanded over axis 0 (stride 0 there), as the backward
    of ``y.sum(0)`` makes it; None where the output has fewer than two axes (`_one_value`'s layout then) or fewer
    than two entries along axis 0."""
    if c.ndim < 2 or c.shape[0] < 2:
        return None
    row = torch.as_tensor(np.ascontiguousarray(c[:1])).to(dtype)
    return np.broadcast_to(c[:1], c.shape).copy(), row.expand(*c.shape)


def _transposed(torch: Any, c: np.ndarray, dtype: Any) -> tuple[np.ndarray, Any] | None:
    """(values, tensor): ``c`` itself, laid out with its last two axes swapped in memory, as the backward of
    ``y.mT`` makes it; None where those axes do not both have two entries or more."""
    if c.ndim < 2 or min(c.shape[-2:]) < 2:
        return None
    swapped = torch.as_tensor(np.ascontiguousarray(np.swapaxes(c, -1, -2))).to(dtype)
    return c.copy(), swapped.transpose(-1, -2)


# name, how PyTorch comes to hand such a gradient, the maker
_LAYOUTS: tuple[tuple[str, str, Callable[..., tuple[np.ndarray, Any] | None]], ...] = (
    ("expanded from a single value", "as the backward of y.sum() hands it", _one_value),
    ("expanded along axis 0", "as the backward of y.sum(0) hands it", _expanded),
    ("transposed in memory", "as the backward of y.mT or y.t() hands it", _transposed),
)


@check(
    "GG707",
    family="torch",
    title="backward wrong or raising on a gradient that is not contiguous (what y.sum(), y.sum(0) or y.mT hands it)",
    compares_calls=True,
    kinds=("torch",),
    given=TORCH_GIVEN,
    broken="""
        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return 3 * x

            @staticmethod
            def backward(ctx, grad):
                flat = grad.view(-1)             # a view needs a layout that a flat index can walk
                return (3 * flat).view(grad.shape)

        scale_rule = torch_rule(Scale, arrays(shape=(3, 4)))
    """,
    fixed="""
        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return 3 * x

            @staticmethod
            def backward(ctx, grad):
                flat = grad.reshape(-1)          # copies where the layout needs it
                return (3 * flat).reshape(grad.shape)

        scale_rule = torch_rule(Scale, arrays(shape=(3, 4)))
    """,
)
def noncontiguous_gradient(case: Case) -> Iterable[Problem]:
    """PyTorch hands ``backward`` an output's gradient in the memory layout the next operation's backward made:
    after ``y.sum()`` it is one value expanded over the output's shape, every stride 0; after
    ``y.sum(0)`` it is expanded along axis 0; after ``y.mT`` or ``y.t()`` it is transposed in memory. ``grad.view()``
    raises on some of these, a NumPy bridge that views pairs of floats as complex numbers on others, and code that
    reads the gradient's memory as if it were contiguous (``data_ptr`` in a C++ or CUDA kernel) reads the wrong
    entries, silently. ``gradcheck`` and a random ``grad_outputs`` hand contiguous gradients only. The check hands
    the backward each such layout in turn and compares its gradients with those for the same values laid out
    contiguously, from a fresh call of the Function each time."""
    import torch

    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    name = case.rule.name
    probe = run_call(case)
    if probe.node is None:
        raise Skip("no output of the Function requires grad: autograd records no backward")
    ybar = case.cotangent_like(probe.outputs_numpy())
    single = not isinstance(probe.output, (tuple, list))
    leaves = [ybar] if single else list(children(ybar))
    outputs = probe.flat_outputs()

    def pack(parts: list[Any]) -> Any:
        return parts[0] if single else rebuild(ybar, parts)

    tried = False
    for layout, how, make in _LAYOUTS:
        made = {k: m for k, (y, c) in enumerate(zip(outputs, leaves))
                if isinstance(y, torch.Tensor) and y.requires_grad and isinstance(c, np.ndarray)
                and (m := make(torch, c, y.dtype)) is not None}
        if not made:
            continue
        tried = True
        failed = _try(case, made, leaves, pack)
        if failed is None:
            continue
        if len(made) > 1:  # name the outputs whose layout alone fails, where one does
            alone = {k: f for k in made if (f := _try(case, {k: made[k]}, leaves, pack)) is not None}
            if alone:
                made = {k: made[k] for k in alone}
                failed = alone[min(alone)]
        laid = [(k, tuple(m[1].stride())) for k, m in sorted(made.items())]
        which = _which(laid, len(outputs))
        if isinstance(failed, BaseException):
            text = str(failed).strip()
            yield Problem(
                message=(f"the backward of {name} raises when {which} {_is(laid)} {layout} ({_strides(laid)}), {how}, "
                         f"though it runs on a contiguous gradient with the same values: {type(failed).__name__}: "
                         f"{text.splitlines()[0] if text else ''}"),
                location=f"output {laid[0][0]}" if len(outputs) > 1 else "output",
                fix=_WRITE_FIX if _WRITES_SHARED in text else _LAYOUT_FIX,
            )
            return
        i, idx, g, w = failed
        yield Problem(
            message=(f"when {which} {_is(laid)} {layout} ({_strides(laid)}), {how}, the backward of {name} gives input "
                     f"{i} the gradient {show(g)}{at(idx)}, but {show(w)} for the same values laid out contiguously."),
            location=where(i, idx),
            expected=show(w),
            actual=show(g),
            fix=_LAYOUT_FIX,
        )
        return
    if not tried:
        raise Skip("no output of the Function has two entries or more along an axis: every layout of its gradient is "
                   "contiguous")


def _try(case: Case, made: dict[int, tuple[np.ndarray, Any]], leaves: list[Any],
         pack: Callable[[list[Any]], Any]) -> BaseException | tuple[int, tuple[int, ...], float, float] | None:
    """The backward's gradients for the outputs in ``made`` laid out as made (the others' as drawn) against those for
    the same values laid out contiguously, each from a fresh call: the exception the laid-out one raised, or the
    first input whose gradient differs (input, index, got, want), or None."""
    values = [made[k][0] if k in made else c for k, c in enumerate(leaves)]
    given = [made[k][1] if k in made else c for k, c in enumerate(leaves)]
    want = numpy_grads(case, grads_of(case, run_call(case), pack(values)))
    call = run_call(case)
    try:
        got = numpy_grads(case, grads_of(case, call, pack(given), copy=False))
    except RuleRaised as raised:
        return raised.exc
    for i in case.diff_positions:
        bad = first_difference(got[i], want[i], case)
        if bad is not None:
            return (i, *bad)
    return None


def _is(laid: list[tuple[int, tuple[int, ...]]]) -> str:
    return "is" if len(laid) == 1 else "are"


def _which(laid: list[tuple[int, tuple[int, ...]]], n_outputs: int) -> str:
    if n_outputs == 1:
        return "the gradient of its output"
    ks = [str(k) for k, _ in laid]
    return f"the gradient of output {ks[0]}" if len(ks) == 1 else f"the gradients of outputs {', '.join(ks)}"


def _strides(laid: list[tuple[int, tuple[int, ...]]]) -> str:
    if len(laid) == 1:
        return f"strides {laid[0][1]}"
    return "; ".join(f"output {k}: strides {s}" for k, s in laid)


_LAYOUT_FIX = ("Make the gradient contiguous before viewing it or reading its memory: grad = grad.contiguous() (a "
               "no-op where it already is), or use grad.reshape() instead of grad.view(). Backward receives each "
               "gradient in whatever layout the next operation's backward produced.")
# PyTorch's refusal of an in-place write into an expanded tensor, whose entries share memory
_WRITES_SHARED = "more than one element of the written-to tensor refers to a single memory location"
_WRITE_FIX = ("Compute into a new tensor (grad * 2, not grad.mul_(2)): the gradient backward receives is not its own to "
              "write, and an expanded one's entries share memory.")

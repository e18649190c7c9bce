"""PyTorch as a safety-matrix column (when PyTorch is installed): every context program under autograd.

NumPy rules run through `gradguard.engines.torch_adapter.to_function`: an `autograd.Function` whose
forward calls the rrule on the tensors' NumPy views (shared memory: a mutation is real, and PyTorch's
version counter does not see it) and whose backward calls the pullback. Torch rules run natively, their
own ``Function.apply``. The program's inputs are leaf tensors cloned once (so an in-place forward with
``ctx.mark_dirty`` is legal, as on any intermediate value); the gradient is ``torch.autograd.grad``
with respect to the leaves. PyTorch's convention for an unused output: the pullback gets materialised
zeros when another output of the call is used, and is not called when none is (``materialize_grads``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from gradguard.checker.contexts._engine import Engine, RuleView, scalar
from gradguard.checker.contexts._ops import Ops
from gradguard.checker.contexts._programs import Plan
from gradguard.checker.specs import structures_of
from gradguard.checker.structure import project_tensor
from gradguard.checker.torch_rules import TORCH_FUNCTION, TORCH_KWARGS
from gradguard.engines.torch_engine import apply, gradients, readable

__all__ = ["ENGINE"]


# A program that reads a tensor a Function freed (a reversible block's input, until its backward restores it)
# reads freed memory and crashes in PyTorch, loudly; the context says so instead of crashing the checker.
_FREED = "the program reads a tensor whose memory the rule freed (its storage holds {nbytes} bytes)"


class _Namespace:
    """The NumPy functions context programs use, on tensors (NumPy operands become tensors)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def _t(self, x: Any) -> Any:
        if not isinstance(x, self.torch.Tensor):
            return self.torch.as_tensor(np.asarray(x))
        if not readable(x):
            raise RuntimeError(_FREED.format(nbytes=x.untyped_storage().nbytes()))
        return x

    def add(self, a: Any, b: Any) -> Any:
        return self.torch.add(self._t(a), self._t(b))

    def multiply(self, a: Any, b: Any) -> Any:
        return self.torch.mul(self._t(a), self._t(b))

    def divide(self, a: Any, b: Any) -> Any:
        return self.torch.div(self._t(a), self._t(b))

    def sin(self, a: Any) -> Any:
        return self.torch.sin(self._t(a))

    def sum(self, a: Any) -> Any:
        return self.torch.sum(self._t(a))

    def real(self, a: Any) -> Any:
        a = self._t(a)
        return self.torch.real(a) if a.is_complex() else a

    def ascontiguousarray(self, a: Any) -> Any:
        return self._t(a).contiguous()

    def reshape(self, a: Any, shape: Any) -> Any:
        return self.torch.reshape(self._t(a), shape)

    def dot(self, a: Any, b: Any) -> Any:
        a, b = self._t(a), self._t(b)
        dtype = self.torch.promote_types(a.dtype, b.dtype)
        return self.torch.dot(a.to(dtype), b.to(dtype))


def _available() -> str | None:
    from gradguard.engines.torch_engine import available

    return available()


def _scalars(view: RuleView) -> tuple[int, ...]:
    """Positions the rule was declared with Python floats in: they get floats back from 0-d tensors."""
    return tuple(i for i, a in enumerate(view.example_args) if isinstance(a, (float, complex)))


def _adapt(view: RuleView) -> Any:
    rule = view.rule
    if rule.kind == "torch":
        return rule.extra[TORCH_FUNCTION]
    from gradguard.engines.torch_adapter import to_function

    return to_function(rule.rrule, name=view.name, scalars=_scalars(view))


def _on_structure(args: tuple[Any, ...], structures: dict[int, str], mutated: frozenset[int]) -> tuple[Any, ...]:
    """A torch rule's arguments declared with ``structure=`` read through the structure's projection, in
    differentiable tensor operations (`project_tensor`), as the checker reads the rule everywhere else: finite
    differences of a program move inside the structure, and autograd now pulls the Function's gradient back
    through the projection too (a symmetric input's gradient returned transposed drew a false GG501 in every
    context). One projection per tensor and call, so a call given one tensor twice still gets one object twice;
    an argument the rule writes into is handed over as it is (its write must reach the caller's tensor)."""
    import torch

    done: dict[int, Any] = {}
    out = []
    for i, a in enumerate(args):
        if i in structures and i not in mutated and isinstance(a, torch.Tensor):
            a = done.setdefault(id(a), project_tensor(structures[i], a))
        out.append(a)
    return tuple(out)


def _ops(view: RuleView) -> Ops:
    import torch

    function = view.adapted("torch", _adapt)
    kwargs = view.rule.extra.get(TORCH_KWARGS) or {}  # a torch rule's fixed keyword arguments
    native = view.rule.kind == "torch"
    structures = structures_of(view.rule.arg_specs or ()) if native else {}

    def call(*args: Any) -> Any:
        if native:  # a torch Function takes tensors where the rule was declared with arrays
            args = tuple(torch.from_numpy(np.array(a)) if isinstance(a, np.ndarray) else a for a in args)
            if structures:
                args = _on_structure(args, structures, view.rule.mutates)
            # Strided tensors only: a sparse argument (a fixed sparse matrix) has no storage to read or free
            tensors = [a for a in args if isinstance(a, torch.Tensor) and a.layout == torch.strided]
            for a in tensors:
                if not readable(a):
                    raise RuntimeError(_FREED.format(nbytes=a.untyped_storage().nbytes()))
            sizes = [a.untyped_storage().nbytes() for a in tensors]
            out = apply(function, *args, **kwargs)  # from the fixed random state every forward starts from
            for a, size in zip(tensors, sizes):
                if a.untyped_storage().nbytes() < size and a.numel() * a.element_size() < size:
                    # It freed the memory of a view holding fewer elements than its storage (x[::2], a slice): a
                    # backward that restores the view's own size leaves PyTorch writing past the end of it
                    raise RuntimeError(f"the rule freed the memory of a view it was given ({size} bytes shared "
                                       f"with a larger tensor); no program can use the result safely")
            return out
        from gradguard.engines.torch_adapter import call as adapted_call

        return adapted_call(function, *args)  # a nested output in the structure the rrule returned

    return Ops("torch", _Namespace(torch), call, ndim=lambda x: x.dim() if isinstance(x, torch.Tensor) else np.ndim(x))


def _differentiate(view: RuleView, plan: Plan, ops: Ops) -> tuple[float, tuple]:
    import torch

    leaves = [torch.tensor(np.array(x), requires_grad=True) for x in plan.inputs]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # x.T on arrays of other than two axes
        value = plan.program(ops, plan.consts, *(leaf.clone() for leaf in leaves))
        if not isinstance(value, torch.Tensor) or not value.requires_grad:
            return scalar(value.detach() if isinstance(value, torch.Tensor) else value), tuple(
                np.zeros_like(np.asarray(x)) for x in plan.inputs)
        grads = gradients(value, leaves)
    out = []
    for x, leaf, g in zip(plan.inputs, leaves, grads):
        arr = np.zeros_like(np.asarray(x)) if g is None else g.detach().numpy()
        out.append(arr if isinstance(x, np.ndarray) else arr[()])
    return scalar(value.detach()), tuple(out)


ENGINE = Engine(
    name="torch",
    family="torch",
    label="PyTorch",
    ops=_ops,
    differentiate=_differentiate,
    runs_mutation=True,
    unused="zero",  # materialised zeros; backward not called when no output of the call is used
    kinds=frozenset({"numpy", "torch"}),
    complex_conventions=frozenset(),
    complex_note="does not convert to PyTorch's convention for complex gradients",
    available=_available,
)

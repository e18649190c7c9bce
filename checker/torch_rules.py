"""PyTorch rules: a `torch.autograd.Function` as a checker rule.

    class Exp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad * y

    exp_rule = torch_rule(Exp, arrays(shape=(3,)))

The rule's forward is ``Exp.apply`` on tensors made from the drawn NumPy arrays (same dtype), recorded by
PyTorch's autograd; its pullback is ``torch.autograd.grad`` through that record, so ``backward`` runs as
PyTorch runs it (``needs_input_grad``, materialized zero gradients for unused outputs, version counters
on saved tensors, the checks PyTorch makes on what ``backward`` returns). Both hand NumPy arrays back, so
every check written for NumPy rules applies; the torch-specific checks (GG701-GG705,
:mod:`gradguard.checker.checks.torch_checks`) find the Function in ``RuleSpec.extra["torch_function"]``.
Both Function styles work: ``forward(ctx, ...)``, and ``forward(...)`` with ``setup_context``.

Nothing here imports PyTorch at module import: `import gradguard` stays torch-free.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable

import numpy as np
from hypothesis.strategies import SearchStrategy

from gradguard.checker.problems import Skip
from gradguard.checker.errors import SpecError
from gradguard.checker.specs import CONSTANT_OUTPUTS, RuleSpec, build_spec
from gradguard.engines.values import differentiable

__all__ = ["torch_rule", "TORCH_FUNCTION", "TORCH_KWARGS"]

TORCH_FUNCTION = "torch_function"  # RuleSpec.extra key: the autograd.Function under test
TORCH_KWARGS = "torch_kwargs"  # RuleSpec.extra key: the keyword arguments its apply is called with


def torch_rule(
    function: Any,
    *arg_specs: SearchStrategy,
    args: SearchStrategy | None = None,
    mutates: Iterable[int] | int = (),
    nondiff: Iterable[int] | int = (),
    name: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    kwargs: dict[str, Any] | None = None,
    primal: Callable[..., Any] | None = None,
    unused_cotangent: str = "zeros",
    ignore: Any = None,
    nondiff_outputs: Iterable[int] | int = (),
) -> RuleSpec:
    """Declare a `torch.autograd.Function` subclass as a rule to check; returns a :class:`RuleSpec`.

    The options are those of `gradguard.checker.rrule` (one spec per argument of ``forward``, without
    ``ctx``). ``primal`` is the function the Function claims to compute (NumPy in, NumPy out), for GG102;
    by default it is ``function.apply`` under ``torch.no_grad()``. A forward that writes into an input
    (``ctx.mark_dirty``) is declared with ``mutates=`` like any mutating rule. ``unused_cotangent`` is
    ``"zeros"`` by default: PyTorch materialises zero gradients for unused outputs. ``ignore`` leaves checks out of
    this rule's runs (a surrogate gradient's ``ignore=["GG201", "GG501"]``), as for `rrule`. Outputs marked with
    ``ctx.mark_non_differentiable`` need no declaration; ``nondiff_outputs`` names others that programs never
    differentiate, as for `rrule`.
    """
    from gradguard.engines import torch_engine
    from gradguard.engines.errors import AdapterError

    try:
        ok = torch_engine.is_function(function)
    except AdapterError as exc:
        raise SpecError(f"torch_rule: {exc}") from None
    if not ok:
        raise SpecError(
            f"Got {function!r}, but torch_rule takes a subclass of torch.autograd.Function (the class itself, "
            "with static forward and backward), e.g. torch_rule(MyFunction, arrays(shape=(3,)))."
        )
    if primal is not None and not callable(primal):
        raise SpecError(f"Got primal={primal!r}, but primal must be a function of NumPy arrays.")
    fname = function.__name__
    positions: dict[str, Any] = {"nondiff": frozenset(), "spec": None}

    def diff_of(values: tuple[Any, ...]) -> list[int]:
        return [i for i, a in enumerate(values) if i not in positions["nondiff"] and differentiable(a)]

    def rule(*given: Any, **kw: Any) -> tuple[Any, Callable[[Any], Any]]:
        diff = diff_of(given)
        call = torch_engine.run_function(function, given, diff, kwargs=kw)
        y = _opaque_as_none(call)
        if diff and positions.get("spec") is not None:
            _record_constant_outputs(positions["spec"], call)

        def pullback(ybar: Any) -> tuple[Any, ...]:
            try:
                grads = call.grad(ybar)
            except RuntimeError as exc:
                if any(text in str(exc) for text in torch_engine.STRUCTURE_ERRORS):
                    # PyTorch refuses what backward returned, loudly; GG701 names the cause, the others skip
                    raise Skip(f"PyTorch refuses what the backward of {fname} returns (see GG701): {exc}") from None
                raise
            out: list[Any] = []
            for i, a in enumerate(given):
                if i not in grads:
                    out.append(None)
                    continue
                g = grads[i]
                t = np.zeros_like(np.asarray(a)) if g is None else torch_engine.to_numpy(g)
                out.append(t if isinstance(a, np.ndarray) else (t[()] if isinstance(a, np.generic) else t.item()))
            return tuple(out)

        pullback.__qualname__ = f"pullback of {fname}"
        return y, pullback

    def default_primal(*given: Any, **kw: Any) -> Any:
        call = torch_engine.run_function(function, given, diff_of(given), kwargs=kw, grad_enabled=False)
        return _opaque_as_none(call)

    rule.__name__ = rule.__qualname__ = fname
    rule.__doc__ = f"rrule running the torch.autograd.Function {fname} through PyTorch's autograd."
    chosen = primal
    if chosen is None:
        chosen = default_primal
        chosen.__name__ = chosen.__qualname__ = fname
        sig = torch_engine.forward_parameters(function)
        if sig is not None:
            chosen.__signature__ = sig  # type: ignore[attr-defined]  # arity errors name forward's parameters
    spec = build_spec(
        rule, chosen, arg_specs, args=args, mutates=mutates, nondiff=nondiff, name=name or fname, rtol=rtol,
        atol=atol, kind="torch", kwargs=kwargs, unused_cotangent=unused_cotangent, ignore=ignore,
        nondiff_outputs=nondiff_outputs,
    )
    positions["nondiff"] = spec.nondiff
    positions["spec"] = spec
    spec.extra[TORCH_FUNCTION] = function
    spec.extra[TORCH_KWARGS] = dict(kwargs or {})
    spec.module = getattr(function, "__module__", None)
    spec.source_file, spec.source_lines = _source_span(function)
    return spec


def _opaque_as_none(call: Any) -> Any:
    """The Function's outputs as NumPy values, with None for a top-level output that is no tensor and holds
    something other than arrays and numbers (a class, a string, a module's object): PyTorch returns such outputs
    as they are and never differentiates them, and they have no values to compare. torchopt's implicit gradient
    returns ``(*output, aux, output_is_tensor, type(output))``, and the class object made every check an error."""
    import torch

    from gradguard.checker.case import _unsupported_leaf

    y = call.outputs_numpy()
    if not isinstance(call.output, (tuple, list)) or hasattr(call.output, "_fields"):
        return y
    parts = [None if not isinstance(raw, torch.Tensor) and _unsupported_leaf(value) is not None else value
             for raw, value in zip(call.output, y)]
    return type(y)(parts)


def _record_constant_outputs(spec: RuleSpec, call: Any) -> None:
    """Which outputs of a tuple carry no derivative in PyTorch: float tensors the Function marked non-differentiable
    (``ctx.mark_non_differentiable``: one that does not require grad beside one that does, with inputs that do),
    and every output that is no tensor (a NumPy array, a Python float, or a list of tensors beside the tensors:
    autograd tracks only the tensors the tuple holds itself, and backward gets None for the others; theseus'
    forward kinematics returns its poses as a list). The checks draw no cotangent for them and the contexts'
    programs give them no weight: PyTorch passes no gradient through them, so their derivative is no part of what
    the backward must compute."""
    import torch

    if not isinstance(call.output, (tuple, list)):
        return
    flat = call.flat_outputs()
    tensors = [isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) for t in flat]
    constant = frozenset(k for k, t in enumerate(flat)
                         if (tensors[k] and not t.requires_grad) or _untracked_float(t) or _untracked_container(t))
    if constant and any(tensors[k] and t.requires_grad for k, t in enumerate(flat)):
        spec.extra[CONSTANT_OUTPUTS] = constant


def _untracked_container(value: Any) -> bool:
    """A list, tuple or dict returned inside the Function's output tuple: autograd does not look inside it."""
    return isinstance(value, (list, tuple, dict))


def _untracked_float(value: Any) -> bool:
    """A float or complex value autograd does not track: not a tensor (a NumPy array, a Python or NumPy scalar)."""
    return isinstance(value, (float, complex, np.floating, np.complexfloating)) or (
        isinstance(value, np.ndarray) and value.dtype.kind in "fc")


def _source_span(function: Any) -> tuple[str | None, tuple[int, int] | None]:
    try:
        path = inspect.getsourcefile(function)
        lines, start = inspect.getsourcelines(function)
    except (TypeError, OSError):
        return None, None
    return path, (start, start + len(lines) - 1)

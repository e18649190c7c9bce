"""The PyTorch anchor: a rule as a `torch.autograd.Function`, checked by gradcheck and its variants.

The wrapping is what a PyTorch user writes for a NumPy rule: ``forward`` runs
the rrule on ``tensor.detach().numpy()`` views and keeps the pullback on
``ctx``; ``backward`` calls it. Inputs are float64 (complex128 for complex
rules), as gradcheck requires. JAX-native rules are wrapped the same way
through their NumPy adapter; for them a second Function makes ``backward``
itself differentiable (through ``jax.vjp`` of the rule's own ``bwd``), which
is what ``gradgradcheck`` needs. PyTorch is imported on first use: it is a
benchmark-only extra.

Rules declared with ``torch_rule`` need no wrapping: :func:`run_native` hands
the ``torch.autograd.Function`` itself to gradcheck and gradgradcheck (each
also in ``fast_mode``), on the case's drawn input as double-precision tensors,
the way a PyTorch user calls them on their own Function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from _cases import BenchCase
from _programs import build

VARIANTS = {
    "gradcheck": {"check_undefined_grad": False},
    "gradcheck[undefined]": {"check_undefined_grad": True},
    "gradcheck[fast]": {"fast_mode": True, "check_undefined_grad": False},
    "gradgradcheck": None,  # jax-native rules only: a NumPy backward is not differentiable
}
NATIVE = {  # torch rules: each check as a user calls it on the Function (PyTorch's defaults unless named)
    "gradcheck": {"check_undefined_grad": False},
    "gradcheck[undefined]": {"check_undefined_grad": True},
    "gradcheck[fast]": {"fast_mode": True, "check_undefined_grad": False},
    "gradgradcheck": {},
    "gradgradcheck[fast]": {"fast_mode": True},
}


def available() -> str | None:
    """None if PyTorch can be imported, else why not."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        return f"PyTorch is not installed ({exc}); install the bench extra: pip install torch==2.13.0"
    return None


def _torch() -> Any:
    import torch

    torch.set_default_dtype(torch.float64)
    return torch


def _tensor_dtype(value: Any) -> Any:
    torch = _torch()
    return torch.complex128 if np.iscomplexobj(value) else torch.float64


def to_input(value: Any) -> Any:
    torch = _torch()
    arr = np.asarray(value)
    t = torch.tensor(arr.astype(np.complex128 if np.iscomplexobj(arr) else np.float64))
    return t.requires_grad_(True)


def _to_numpy(a: Any, like: Any) -> Any:
    torch = _torch()
    if isinstance(a, torch.Tensor):
        arr = a.detach().resolve_conj().numpy()
        return float(arr) if isinstance(like, float) else arr
    return a


def _to_torch(v: Any) -> Any:
    torch = _torch()
    if isinstance(v, np.ndarray):
        try:
            return torch.as_tensor(v)
        except ValueError:  # negative strides
            return torch.as_tensor(np.ascontiguousarray(v))
    return torch.tensor(v)


def jax_tree_ones(y: Any) -> Any:
    """A cotangent of ones for a rule's output ``y`` (an array or a tuple of them)."""
    return tuple(np.ones_like(np.asarray(v)) for v in y) if isinstance(y, tuple) else np.ones_like(np.asarray(y))


def function(case: BenchCase, counter: Callable[[str], None] | None = None) -> Callable[..., Any]:
    """``apply(*full_args)``: the rule as a torch.autograd.Function (tensors at differentiable positions)."""
    torch = _torch()
    rule, like = case.rule, case.args
    # PyTorch's complex convention is ChainRules' (the adjoint); a custom_vjp's bwd follows JAX's.
    convert = rule.kind == "jax" and any(np.iscomplexobj(like[i]) for i in case.diff)

    if rule.kind == "jax":
        # gradguard's adapter runs a JAX rule's fwd and bwd eagerly on their first call and compiled after, where the
        # two agree; bitwise they may not, and gradcheck's reentrancy test (two backward calls, nondet_tol=0) failed
        # correct rules on their first use in a process. One call first, as any earlier use in the process made.
        try:
            y, pb = rule.rrule(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in like])
            pb(jax_tree_ones(y))
        except Exception:  # noqa: BLE001 - a rule that raises does so again under gradcheck, which records it
            pass

    class Rule(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: Any) -> Any:
            if counter:
                counter("forward")
            y, pb = rule.rrule(*(_to_numpy(a, l) for a, l in zip(args, like)))
            ctx.pb, ctx.tuple_out = pb, isinstance(y, tuple)
            return tuple(_to_torch(v) for v in y) if ctx.tuple_out else _to_torch(y)

        @staticmethod
        def backward(ctx: Any, *gs: Any) -> Any:
            if counter:
                counter("pullback")
            g = [None if x is None else x.detach().resolve_conj().numpy() for x in gs]
            if convert:
                g = [None if x is None else np.conj(x) for x in g]
            tangents = ctx.pb(tuple(g) if ctx.tuple_out else g[0])
            if convert:
                tangents = tuple(None if t is None else np.conj(t) for t in tangents)
            return tuple(None if t is None else _to_torch(np.asarray(t)) for t in tangents)

    return Rule.apply


def _jax_double_backward(case: BenchCase) -> Callable[..., Any]:
    """For a JAX-native rule: a Function whose backward is a Function too (for gradgradcheck)."""
    torch = _torch()
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    diff, args = case.diff, case.args
    fn = case.rule.jax_fn

    def f(*xs: Any) -> Any:
        full = list(args)
        for i, x in zip(diff, xs):
            full[i] = x
        return fn(*full)

    def vjp(xs: tuple, gs: tuple) -> Any:
        _, pb = jax.vjp(f, *xs)
        return pb(gs if len(gs) > 1 else gs[0])

    def to_jax(ts: Any) -> tuple:
        return tuple(jnp.asarray(t.detach().numpy()) for t in ts)

    def to_torch(values: Any) -> tuple:
        return tuple(torch.as_tensor(np.array(v)) for v in values)

    class Pullback(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, n_out: int, *gs_and_xs: Any) -> Any:
            ctx.n_out = n_out
            ctx.save_for_backward(*gs_and_xs)
            gs, xs = to_jax(gs_and_xs[:n_out]), to_jax(gs_and_xs[n_out:])
            return to_torch(vjp(xs, gs))

        @staticmethod
        def backward(ctx: Any, *tbars: Any) -> Any:
            saved = to_jax(ctx.saved_tensors)
            n = ctx.n_out
            _, second = jax.vjp(lambda *gx: vjp(gx[n:], gx[:n]), *saved)
            return (None, *to_torch(second(tuple(jnp.asarray(t.detach().numpy()) for t in tbars))))

    class Rule(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *xs: Any) -> Any:
            ctx.save_for_backward(*xs)
            out = f(*to_jax(xs))
            ctx.tuple_out = isinstance(out, (tuple, list))
            return to_torch(out) if ctx.tuple_out else torch.as_tensor(np.array(out))

        @staticmethod
        def backward(ctx: Any, *gs: Any) -> Any:
            out = Pullback.apply(len(gs), *gs, *ctx.saved_tensors)
            return out if len(out) > 1 else out[0]

    return Rule.apply


def run(case: BenchCase, variant: str, programs: list[str] | None) -> tuple[str, str]:
    """``(outcome, detail)`` of one variant on one case: caught / passed / errored / n/a."""
    torch = _torch()
    if variant == "gradgradcheck":
        if case.rule.kind != "jax" or programs:
            return "n/a", "NumPy backward is not differentiable"
        if any(np.iscomplexobj(case.args[i]) for i in case.diff):
            return "n/a", "complex: JAX's second-order convention is not PyTorch's"
        try:
            fn = _jax_double_backward(case)
            ok = torch.autograd.gradgradcheck(fn, [to_input(case.args[i]) for i in case.diff], raise_exception=False)
        except Exception as exc:  # noqa: BLE001
            return "errored", f"{type(exc).__name__}: {exc}"
        return ("passed", "") if ok else ("caught", "gradgradcheck returned False")
    options = VARIANTS[variant]
    apply = function(case)
    y = case.primal_output()
    names = programs or [None]
    outcomes = []
    for name in names:
        if name is None:
            built = ((lambda *xs: apply(*case.with_diff(xs))), [case.args[i] for i in case.diff])
        else:
            built = build(case, name, _XP, lambda *a: apply(*a), y)
            if built is None:
                continue
        prog, inputs = built
        try:
            ok = torch.autograd.gradcheck(prog, [to_input(v) for v in inputs], raise_exception=False, **options)
            outcomes.append(("passed", "") if ok else ("caught", f"gradcheck returned False{f' in {name}' if name else ''}"))
        except Exception as exc:  # noqa: BLE001 - the wrapped rule or autograd raised
            outcomes.append(("errored", f"{name + ': ' if name else ''}{type(exc).__name__}: {str(exc)[:200]}"))
    return combine(outcomes)


def native_inputs(case: BenchCase) -> list[Any]:
    """The case's drawn input for a torch rule's ``apply``: differentiable arrays and floats as float64
    (complex128) tensors that require grad, other arrays as tensors, anything else as drawn."""
    torch = _torch()
    diff = set(case.diff)
    inputs = []
    for i, a in enumerate(case.args):
        if i in diff:
            inputs.append(to_input(a))
        elif isinstance(a, np.ndarray):
            inputs.append(torch.as_tensor(a.astype(np.float64) if a.dtype.kind == "f" else a))
        else:
            inputs.append(a)
    return inputs


def run_native(case: BenchCase, variant: str) -> tuple[str, str]:
    """``(outcome, detail)`` of gradcheck or gradgradcheck (``variant``) on a torch rule's own Function."""
    from gradguard.checker.torch_rules import TORCH_FUNCTION

    torch = _torch()
    check = torch.autograd.gradgradcheck if variant.startswith("gradgradcheck") else torch.autograd.gradcheck
    function = case.rule.extra[TORCH_FUNCTION]
    try:
        ok = check(function.apply, native_inputs(case), raise_exception=False, **NATIVE[variant])
    except Exception as exc:  # noqa: BLE001 - the Function or autograd raised
        return "errored", f"{type(exc).__name__}: {str(exc)[:200]}"
    return ("passed", "") if ok else ("caught", f"{variant.split('[')[0]} returned False")


def combine(outcomes: list[tuple[str, str]]) -> tuple[str, str]:
    """Over several programs: caught if any program caught it, else errored if any raised, else passed."""
    if not outcomes:
        return "n/a", "no program fits the rule"
    for kind in ("caught", "errored"):
        hit = [d for o, d in outcomes if o == kind]
        if hit:
            return kind, hit[0]
    return "passed", ""


class _TorchXP:
    def __getattr__(self, name: str) -> Any:
        torch = _torch()
        return {
            "real": lambda x: x.real if torch.is_tensor(x) and x.is_complex() else x,
            "sum": lambda x: x.sum() if torch.is_tensor(x) else x,
            "conj": lambda x: x.conj() if torch.is_tensor(x) and x.is_complex() else x,
            "const": lambda w: torch.as_tensor(np.asarray(w)),
            "transpose": lambda x: x.T,
        }[name]


_XP = _TorchXP()

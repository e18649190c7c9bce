"""PyTorch: a `torch.autograd.Function` run on NumPy arrays, differentiated by PyTorch's own autograd.

    call = run_function(Exp, (x,), diff=(0,))     # forward through Function.apply, recorded by autograd
    y = call.outputs_numpy()
    grads = call.grad(ybar)                       # torch.autograd.grad: backward as PyTorch runs it

Arguments cross the boundary as tensors of the same dtype: a differentiable NumPy array becomes a leaf
tensor that requires grad, then a clone of it is what ``apply`` receives (so an in-place forward with
``ctx.mark_dirty`` is legal, as it is for any tensor computed in a program); what the forward or the
backward writes into that clone is written back into the caller's array, so gradguard's mutation checks
see it. Gradients are those of the leaf: the input's value before the call. Non-differentiable arrays
become tensors that do not require grad, Python floats in differentiable positions 0-d float64 tensors,
anything else passes unchanged. Outputs come back as NumPy arrays of the tensor's dtype.

PyTorch is imported on first use (``pip install gradguard[torch]``).
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from gradguard.engines.errors import AdapterError, NoNumpyDtype

__all__ = [
    "TorchCall",
    "available",
    "load",
    "is_function",
    "forward_parameters",
    "run_function",
    "apply",
    "to_numpy",
    "gradients",
    "VERSION_ERROR",
    "STRUCTURE_ERRORS",
]

# PyTorch's message when a tensor saved for backward was modified in place after it was saved.
VERSION_ERROR = "modified by an inplace operation"
# PyTorch's messages when backward returns a structure it refuses (GG701 reports the cause).
STRUCTURE_ERRORS = ("returned an incorrect number of gradients", "returned a gradient different than None at position",
                    "expected Variable or None (got",
                    "input_is_complex == grad_is_complex")  # a complex gradient for a real input


def available() -> str | None:
    """None when PyTorch can be imported, else why not."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        return f"PyTorch is not installed ({exc}); install it with: pip install 'gradguard[torch]'"
    return None


def load() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise AdapterError(f"PyTorch is not installed ({exc}); install it with: pip install 'gradguard[torch]'") from None
    return torch


def is_function(obj: Any) -> bool:
    """Whether ``obj`` is a subclass of ``torch.autograd.Function`` (False, without importing torch, if it is not)."""
    if not isinstance(obj, type) or not any(c.__module__.startswith("torch") for c in obj.__mro__[1:]):
        return False
    torch = load()
    return issubclass(obj, torch.autograd.Function) and obj is not torch.autograd.Function


def uses_setup_context(function: Any) -> bool:
    """True for the style where ``forward`` takes no ``ctx`` and ``setup_context(ctx, inputs, output)`` saves."""
    torch = load()
    return function.setup_context is not torch.autograd.Function.setup_context


def forward_parameters(function: Any) -> inspect.Signature | None:
    """``forward``'s signature as callers of ``apply`` see it (without ``ctx`` in the classic style)."""
    try:
        sig = inspect.signature(function.forward)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if not uses_setup_context(function) and params:
        params = params[1:]
    return sig.replace(parameters=params)


# Where a graph refuses torch.autograd.grad, its message names .grad() and asks for .backward(): reentrant
# checkpointing (torch.utils.checkpoint with use_reentrant=True: "incompatible with .grad()"; fairscale's
# CheckpointFunction: "not compatible with .grad(), please use .backward()") runs only under .backward().
def _refuses_grad(exc: BaseException) -> bool:
    text = str(exc)
    return "compatible with .grad()" in text and ".backward()" in text


def gradients(outputs: Any, inputs: list[Any], grad_outputs: Any = None, *, create_graph: bool = False) -> tuple[Any, ...]:
    """``torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True)``, keeping the graph; where the graph
    refuses ``.grad()`` (reentrant checkpointing), the same gradients by ``torch.autograd.backward``, read from the inputs'
    ``.grad`` (leaf tensors), which are restored afterwards. Leaves the graph captured besides ``inputs`` (a
    module's parameters) then accumulate the gradient, as they would in the program's own ``.backward()``."""
    torch = load()
    try:
        return torch.autograd.grad(outputs, inputs, grad_outputs, retain_graph=True, allow_unused=True,
                                   create_graph=create_graph)
    except RuntimeError as exc:
        if not _refuses_grad(exc):
            raise
    saved = [x.grad for x in inputs]
    for x in inputs:
        x.grad = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_graph's reference cycle through .grad: broken below
            torch.autograd.backward(outputs, grad_outputs, retain_graph=True, create_graph=create_graph)
        return tuple(x.grad for x in inputs)
    finally:
        for x, g in zip(inputs, saved):
            x.grad = g


RANDOM_SEED = 0  # the seed of the state PyTorch's global generators hold when a Function's forward starts
_fixed_cpu_state: list[Any] = []  # that state of the CPU generator, made once (seeding costs 0.1 ms a call)


def apply(function: Any, *inputs: Any, **kwargs: Any) -> Any:
    """``function.apply(*inputs, **kwargs)`` started from one fixed state of PyTorch's global random generators, and
    of the Function's own generators, the caller's states restored afterwards.

    A Function may draw from the global generators (``torch.rand_like``: a dropout mask saved for backward): that is
    how PyTorch's own dropout works, a program is reproducible under ``torch.manual_seed``, and checkpointing
    restores the state before it runs a forward again. So every forward gradguard runs starts from the same state,
    as a program re-run under one seed does: two calls on one input draw the same mask, and what the checks compare
    (two calls, the primal, finite differences) is one function. A generator of the Function's own (a seeded
    ``torch.Generator`` its forward closes over, holds as a class attribute or is given as an argument: brevitas'
    stochastic rounding) is held the same way, at the state it had when gradguard first met it. Randomness from
    anywhere else (an unseeded generator made in forward, the clock) still differs from call to call (GG406), and so
    does a backward that draws again instead of saving what its forward drew: it runs from the caller's state, not
    the forward's."""
    torch = load()
    if not _fixed_cpu_state:
        _fixed_cpu_state.append(torch.Generator().manual_seed(RANDOM_SEED).get_state())
    own = _own_generators(function, inputs, kwargs)
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    callers = [(g, g.get_state()) for g, _ in own]
    torch.set_rng_state(_fixed_cpu_state[0])
    if cuda is not None:
        torch.cuda.manual_seed_all(RANDOM_SEED)
    for g, first in own:
        g.set_state(first)
    try:
        return function.apply(*inputs, **kwargs)
    finally:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        for g, state in callers:
            g.set_state(state)


# a Function's own generators and the state each had when first met, by generator (weakly: a Function may be made per
# call, as brevitas' factory makes one per module)
_first_states: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _own_generators(function: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[Any, Any]]:
    """The ``torch.Generator`` objects the Function's forward closes over, reads as globals or class attributes, or
    is given as arguments, each with its first-met state."""
    torch = load()
    found: dict[int, Any] = {}

    def take(value: Any) -> None:
        if isinstance(value, torch.Generator):
            found.setdefault(id(value), value)

    for value in (*inputs, *kwargs.values()):
        take(value)
    for name, value in vars(function).items() if isinstance(function, type) else ():
        take(value)
    forward = getattr(function, "forward", None)
    code = getattr(forward, "__code__", None)
    for cell in getattr(forward, "__closure__", None) or ():
        try:
            take(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    if code is not None:
        names = getattr(forward, "__globals__", {})
        for name in code.co_names:
            take(names.get(name))
    out = []
    for g in found.values():
        if g not in _first_states:
            _first_states[g] = g.get_state()
        out.append((g, _first_states[g]))
    return out


def to_numpy(value: Any) -> Any:
    """Tensors (nested in tuples and lists) as NumPy arrays of the same dtype; other values unchanged."""
    torch = load()
    if isinstance(value, torch.Tensor):
        try:
            return _exported(value).numpy()
        except TypeError as exc:  # "Got unsupported ScalarType BFloat16": a dtype NumPy has none like
            if "unsupported ScalarType" in str(exc):
                raise NoNumpyDtype(str(value.dtype)) from None
            raise
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(to_numpy(v) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(to_numpy(v) for v in value)
    return value


def _exported(value: Any) -> Any:
    """``value`` detached, on the CPU, ready for ``.numpy()``: a copy where ``value`` owns storage PyTorch may
    still resize.

    ``.numpy()`` marks the storage it shares as never resizable again, for good (the NumPy array could
    otherwise outlive the memory). A Function that frees its input's or output's storage in forward and
    reallocates it in backward (a reversible block recomputing what it freed: ``untyped_storage().resize_(0)``
    then ``resize_(n)``) would then raise in backward on gradguard's call and nowhere else. Storage that is
    already not resizable (a tensor made from a NumPy array) is shared as before."""
    t = value.detach().cpu().resolve_conj().resolve_neg()
    if not readable(t):
        raise AdapterError(f"a tensor of shape {tuple(t.shape)} has lost its memory: its storage holds "
                           f"{t.untyped_storage().nbytes()} bytes (freed with untyped_storage().resize_())")
    return t.clone() if t.untyped_storage().resizable() else t


def readable(t: Any) -> bool:
    """Whether every element of tensor ``t`` lies inside its storage. A Function may free a tensor's memory
    (``untyped_storage().resize_(0)``) and restore it later; reading it in between crashes the process, in
    PyTorch as anywhere."""
    n = t.numel()
    if n == 0 or t.layout != load().strided:  # a sparse tensor has no storage of its own to free or read past
        return True
    nbytes = t.untyped_storage().nbytes()
    if t.is_contiguous():  # every call of every check converts tensors: the common case without the loop
        return (t.storage_offset() + n) * t.element_size() <= nbytes
    last = t.storage_offset() + sum((k - 1) * abs(s) for k, s in zip(t.shape, t.stride()))
    return (last + 1) * t.element_size() <= nbytes


def _tensor(value: Any, torch: Any) -> Any:
    """``value`` as a CPU tensor sharing its memory where PyTorch can (a copy for negative strides)."""
    arr = np.asarray(value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # from_numpy warns about read-only arrays; nothing writes to these
        try:
            return torch.from_numpy(arr)
        except (ValueError, TypeError, RuntimeError):
            return torch.from_numpy(np.ascontiguousarray(arr).copy())


@dataclass
class TorchCall:
    """One ``function.apply`` on converted arguments, kept with what autograd recorded."""

    function: Any
    args: tuple[Any, ...]  # the caller's values (NumPy arrays are written back into)
    inputs: tuple[Any, ...]  # what apply received
    leaves: dict[int, Any]  # position -> leaf tensor that requires grad
    output: Any  # what apply returned (tensors)
    written: list[tuple[np.ndarray, Any]] = field(default_factory=list)  # (caller's array, tensor given to apply)
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)  # position -> tensor version before, after apply

    # -- outputs ------------------------------------------------------------------------------------
    def flat_outputs(self) -> list[Any]:
        return list(self.output) if isinstance(self.output, (tuple, list)) else [self.output]

    def outputs_numpy(self) -> Any:
        return to_numpy(self.output)

    @property
    def node(self) -> Any:
        """The Function's backward node (its ``ctx``), None when no output is differentiable."""
        for out in self.flat_outputs():
            fn = getattr(out, "grad_fn", None)
            if fn is not None and getattr(fn, "_forward_cls", None) is not None:
                return fn
        return None

    # -- backward -----------------------------------------------------------------------------------
    def cotangents(self, ybar: Any) -> tuple[list[Any], list[Any]]:
        """(outputs, cotangents as tensors) for the outputs that require grad and have a cotangent."""
        torch = load()
        flat_y = self.flat_outputs()
        flat_c = [ybar] if not isinstance(self.output, (tuple, list)) else (
            [None] * len(flat_y) if ybar is None else list(ybar))
        if len(flat_c) != len(flat_y):
            raise AdapterError(f"got a cotangent with {len(flat_c)} entries for {len(flat_y)} outputs of {self.name}")
        outs, cts = [], []
        for y, c in zip(flat_y, flat_c):
            if c is None or not isinstance(y, torch.Tensor) or not y.requires_grad:
                continue
            if isinstance(c, torch.Tensor):
                t = c
            else:
                t = _tensor(c, torch) if isinstance(c, np.ndarray) else torch.as_tensor(c)
            if t.dtype != y.dtype:
                t = t.to(y.dtype)
            outs.append(y)
            cts.append(t.reshape(y.shape) if t.shape != y.shape and t.numel() == y.numel() == 1 else t)
        return outs, cts

    def grad(self, ybar: Any, *, create_graph: bool = False) -> dict[int, Any]:
        """``torch.autograd.grad`` of the outputs against the leaves for ``ybar``: position -> tensor or None.

        None for a leaf the backward gave no gradient (PyTorch's zero). The graph is kept, so this may be
        called again. What the backward wrote into the inputs is written back into the caller's arrays.
        """
        torch = load()
        outs, cts = self.cotangents(ybar)
        positions = sorted(self.leaves)
        if not outs or not positions:
            return {i: None for i in positions}
        try:
            grads = gradients(outs, [self.leaves[i] for i in positions], cts, create_graph=create_graph)
        finally:
            self.write_back()
        return dict(zip(positions, grads))

    def write_back(self) -> None:
        """Copy what the Function wrote into the tensors it received back into the caller's arrays."""
        for arr, t in self.written:
            if not readable(t):
                continue  # its memory freed by the Function, until its backward restores it (read again then)
            new = _exported(t).numpy()  # not t.numpy(): the storage the Function received stays resizable
            if new.shape == arr.shape and not np.array_equal(new, arr, equal_nan=True) and arr.flags.writeable:
                arr[...] = new

    def raw_backward(self, ybar: Any) -> Any:
        """What ``backward`` itself returns for ``ybar`` (zeros for absent cotangents), called directly with the
        recorded ctx, before PyTorch validates it: the structure the Function's author wrote."""
        torch = load()
        node = self.node
        if node is None:
            raise AdapterError(f"{self.name} recorded no backward (no output requires grad)")
        flat_y = self.flat_outputs()
        flat_c = [ybar] if not isinstance(self.output, (tuple, list)) else ([None] * len(flat_y) if ybar is None else list(ybar))
        cts = []
        for y, c in zip(flat_y, flat_c):
            if not isinstance(y, torch.Tensor):
                cts.append(None)
            elif c is None:
                cts.append(torch.zeros_like(y))
            else:
                cts.append(torch.as_tensor(np.asarray(c)).to(y.dtype).reshape(y.shape))
        with torch.no_grad():
            return self.function.backward(node, *cts)

    def dirty(self) -> list[int]:
        """Positions of the inputs the forward marked with ``ctx.mark_dirty``: autograd rebased their history on
        the Function's node (PyTorch clears ``ctx.dirty_tensors`` once ``apply`` returns, so this is the trace)."""
        node = self.node
        if node is None:
            return []
        return [i for i, t in enumerate(self.inputs) if getattr(t, "grad_fn", None) is node]

    @property
    def name(self) -> str:
        return getattr(self.function, "__name__", "Function")


def run_function(function: Any, args: Sequence[Any], diff: Iterable[int], *, kwargs: dict[str, Any] | None = None,
                 requires_grad: Iterable[int] | None = None, grad_enabled: bool = True,
                 leaf_inputs: bool = False) -> TorchCall:
    """``function.apply`` on ``args`` converted to tensors, recorded by autograd.

    ``diff`` are the positions that carry a tangent; ``requires_grad`` (default: all of ``diff``) those whose
    leaf requires grad in this call (``ctx.needs_input_grad`` follows it). With ``grad_enabled=False`` the
    forward runs under ``torch.no_grad()`` (the primal, as users call it outside training). The Function gets
    copies of the leaves, which are not leaves themselves (``ctx.mark_dirty`` is legal on them); with
    ``leaf_inputs`` it gets the leaves, in storage of their own, as a program hands it its parameters.
    """
    torch = load()
    diff = set(diff)
    wanted = diff if requires_grad is None else set(requires_grad)
    inputs: list[Any] = []
    leaves: dict[int, Any] = {}
    written: list[tuple[np.ndarray, Any]] = []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray) or (i in diff and isinstance(a, (np.generic, float, complex))):
            if i in diff:
                arr = np.asarray(a)
                leaf = _tensor(np.array(arr, copy=True), torch)
                if leaf_inputs:
                    leaf = leaf.clone()  # storage PyTorch owns, resizable (a reversible block frees its input)
                if i in wanted:
                    leaf.requires_grad_(True)
                    leaves[i] = leaf
                t = leaf.clone() if leaf.requires_grad and not leaf_inputs else leaf  # a non-leaf: mark_dirty is legal on it
                if isinstance(a, np.ndarray):
                    written.append((a, t))
                inputs.append(t)
            else:
                inputs.append(_tensor(a, torch))
        else:
            inputs.append(a)
    call = TorchCall(function, tuple(args), tuple(inputs), leaves, None, written)
    before = {i: t._version for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)}
    with torch.set_grad_enabled(grad_enabled):
        try:
            call.output = apply(function, *inputs, **(kwargs or {}))
        finally:
            call.write_back()
    call.versions = {i: (v, inputs[i]._version) for i, v in before.items()}
    return call

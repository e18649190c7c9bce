"""A NumPy rrule as a `torch.autograd.Function`, so PyTorch's autograd differentiates programs that call it.

    Fn = to_function(addone_rrule, name="addone_")
    y = Fn.apply(x)              # forward: the rrule on x's NumPy view (shared memory)
    y.sum().backward()           # backward: the rrule's pullback on the cotangent's NumPy view
    y = call(Fn, x)              # the same, with a nested output rebuilt: (a, (b, c)) as the rrule returned it

The forward hands the rrule NumPy views of the tensors it receives (``tensor.detach().numpy()``), so what
the rrule writes into an argument lands in the tensor, as it would for a NumPy routine called on
``tensor.numpy()`` in a PyTorch program; PyTorch's version counter does not see such writes. The pullback
is kept on ``ctx`` and receives the cotangents as PyTorch gives them (materialised zeros for unused outputs
of a call whose other outputs are used; backward is not called at all when none is used). Positions listed
in ``scalars`` receive Python floats (0-d tensors become ``float``), as the rule was declared with. Outputs and
tangents share the rrule's memory where PyTorch can, as a hand-written Function calling
``torch.from_numpy`` would: a buffer the rule returns and a later call overwrites changes under
PyTorch too; one array returned as the tangent of two arguments is copied for the second (PyTorch would
otherwise accumulate into one gradient in place through the other). The same tensor in two argument slots reaches the rrule as
the very same array in both (``rule(x, x)``). Non-tensor arguments pass through and get no gradient.

An output nested in tuples and lists (``(a, (b, c))``, a NamedTuple) crosses the boundary as its leaves, one
tensor each, since PyTorch's Functions return flat tuples: ``call`` rebuilds the structure for the caller, and
the pullback receives its cotangent in the structure the rrule returned.

PyTorch is imported on first use (``pip install gradguard[torch]``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

import warnings

import numpy as np

from gradguard.engines.errors import AdapterError
from gradguard.engines.torch_engine import load

__all__ = ["to_function", "call"]


def to_function(rrule: Callable[..., Any], *, name: str = "rrule", scalars: Iterable[int] = ()) -> Any:
    """A `torch.autograd.Function` subclass whose ``apply`` runs ``rrule`` forward and its pullback backward."""
    torch = load()
    floats = frozenset(scalars)

    def forward(ctx: Any, *args: Any) -> Any:
        seen: dict[int, Any] = {}  # the same tensor in two slots is the same array in both
        views = tuple(seen.setdefault(id(a), _view(a, i in floats, torch)) if isinstance(a, torch.Tensor) else a
                      for i, a in enumerate(args))
        result = rrule(*views)
        if not (isinstance(result, tuple) and len(result) == 2 and callable(result[1])):
            raise AdapterError(f"the rrule of {name} must return (output, pullback), got {type(result).__name__}")
        out, pullback = result
        ctx.pullback = pullback
        ctx.inputs = [(isinstance(a, torch.Tensor), getattr(a, "dtype", None)) for a in args]
        outs, ctx.structure = _flatten(out)
        function.structure = ctx.structure  # for `call`, which rebuilds the output apply returns flat
        ctx.plain = [not isinstance(o, np.ndarray) for o in outs]  # scalars: the pullback gets a NumPy scalar
        tensors = tuple(_tensor(o, torch, name) for o in outs)
        return tensors if ctx.structure is not None else tensors[0]

    def backward(ctx: Any, *grads: Any) -> Any:
        cts = [None if g is None else (g.detach().numpy()[()] if plain else g.detach().numpy())
               for g, plain in zip(grads, ctx.plain)]
        tangents = ctx.pullback(_unflatten(ctx.structure, iter(cts)))
        if not isinstance(tangents, (tuple, list)) or len(tangents) != len(ctx.inputs):
            raise AdapterError(
                f"the pullback of {name} must return one tangent per argument ({len(ctx.inputs)}), "
                f"got {tangents!r:.200}"
            )
        out: list[Any] = []
        given: list[np.ndarray] = []  # the arrays handed to PyTorch so far
        for t, (is_tensor, dtype) in zip(tangents, ctx.inputs):
            if t is None or not is_tensor or not (dtype.is_floating_point or dtype.is_complex):
                out.append(None)
                continue
            if isinstance(t, np.ndarray):
                if any(np.may_share_memory(t, g) for g in given):
                    # One array as the tangent of two arguments (an add's pullback returns (g, g)): two tensors
                    # over one buffer would let PyTorch accumulate into one argument's gradient in place and so
                    # change the other's, which no NumPy engine does; each argument gets its own buffer.
                    t = t.copy()
                given.append(t)
            out.append(_tensor(t, torch, name).to(dtype))
        return tuple(out)

    function = type(f"{name}_Function", (torch.autograd.Function,),
                    {"forward": staticmethod(forward), "backward": staticmethod(backward), "structure": None})
    return function


def call(function: Any, *args: Any) -> Any:
    """``function.apply(*args)`` for a Function made by `to_function`, its output in the structure the rrule
    returned (PyTorch hands back a flat tuple of tensors for a nested output)."""
    flat = function.apply(*args)
    structure = function.structure
    return flat if structure is None else _unflatten(structure, iter(flat))


# A nested output's structure: None for a leaf, else (the tuple, list or dict itself, its children's structures).
Structure = Any


def _keys(node: dict) -> list[Any]:
    try:
        return sorted(node)  # JAX's order, as the checker's trees take a dict's values
    except TypeError:
        return list(node)


def _flatten(tree: Any) -> tuple[list[Any], Structure]:
    if not isinstance(tree, (tuple, list, dict)):
        return [tree], None
    flat, children = [], []
    for child in ([tree[k] for k in _keys(tree)] if isinstance(tree, dict) else tree):
        sub, structure = _flatten(child)
        flat.extend(sub)
        children.append(structure)
    return flat, (tree, children)


def _unflatten(structure: Structure, flat: Iterator[Any]) -> Any:
    if structure is None:
        return next(flat)
    node, children = structure
    values = [_unflatten(child, flat) for child in children]
    if isinstance(node, dict):
        by_key = dict(zip(_keys(node), values))
        return {k: by_key[k] for k in node}
    if isinstance(node, tuple) and hasattr(type(node), "_fields"):  # a NamedTuple takes its fields one by one
        return type(node)(*values)
    return type(node)(values)


def _view(value: Any, scalar: bool, torch: Any) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    arr = value.detach().numpy()  # shares the tensor's memory (views keep their strides)
    return float(arr) if scalar and arr.ndim == 0 else arr


def _tensor(value: Any, torch: Any, name: str) -> Any:
    """An output or tangent as a tensor over the same memory where PyTorch can share it (a later write into a
    buffer the rule returned shows, as in NumPy), else a copy."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - a structure the adapter cannot carry
        raise AdapterError(f"{name} returned a value that is not an array or a tuple of arrays: {exc}") from None
    if arr.dtype == object:
        raise AdapterError(f"{name} returned a value that is not an array ({type(value).__name__})")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # from_numpy warns about read-only arrays
        try:
            return torch.from_numpy(arr)
        except (ValueError, TypeError, RuntimeError):  # negative strides
            return torch.from_numpy(np.ascontiguousarray(arr).copy())

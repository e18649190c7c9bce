"""Small helpers over the values rules exchange: arrays, Python scalars, and tuples/lists/dicts of them.

A *tree* here is a leaf (ndarray, float, complex, None) or a tuple, list, NamedTuple or dict of trees: the
pytrees `jax.custom_vjp` accepts. A dict's children are its values in the order of its sorted keys, as JAX
flattens them, so a cotangent built for a dict lines up with the dict whatever order its keys were
inserted in; `rebuild` keeps the node's own key order.
The real inner product ``<a, b> = sum(Re(conj(a) * b))`` is the one every
numeric check uses, so complex tangents follow a single convention.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Callable

import numpy as np

__all__ = ["with_article", "leaves", "leaf_paths", "with_leaves", "tree_map", "rebuild", "inner", "abs_inner", "copy_tree", "same_bits", "is_leaf", "children", "keys_of",
           "same_structure", "describe", "max_abs", "REAL_KINDS", "is_narrow_float", "widened"]


def is_leaf(x: Any) -> bool:
    return not isinstance(x, (tuple, list, dict))


def children(node: Any) -> list[Any]:
    """A node's children in order: a dict's values by sorted key (JAX's order), a sequence's items."""
    if isinstance(node, dict):
        return [node[k] for k in keys_of(node)]
    return list(node)


def keys_of(node: dict) -> list[Any]:
    """A dict's keys in :func:`children`'s order."""
    try:
        return sorted(node)
    except TypeError:  # keys of mixed types: JAX refuses those too; keep the insertion order
        return list(node)


def leaves(tree: Any) -> list[Any]:
    if is_leaf(tree):
        return [tree]
    return [leaf for sub in children(tree) for leaf in leaves(sub)]


def leaf_paths(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(path, leaf)`` for each of ``tree``'s leaves in :func:`leaves`' order, the path as ``[1]['z_loss']``."""
    if is_leaf(tree):
        return [(prefix, tree)]
    out = []
    keys = keys_of(tree) if isinstance(tree, dict) else range(len(tree))
    for k, sub in zip(keys, children(tree)):
        out.extend(leaf_paths(sub, f"{prefix}[{k!r}]" if isinstance(tree, dict) else f"{prefix}[{k}]"))
    return out


def with_leaves(tree: Any, flat: Any) -> Any:
    """``tree``'s structure holding ``flat`` (its leaves, in :func:`leaves`' order)."""
    it = iter(flat)
    return tree_map(lambda _: next(it), tree)


def rebuild(node: Any, items: Any) -> Any:
    """A node of ``node``'s type holding ``items`` (in :func:`children`'s order): NamedTuples (``np.linalg.slogdet``'s
    ``SlogdetResult``) take their fields as separate arguments, plain tuples and lists one iterable, and a
    dict gets its keys back in its own order."""
    items = list(items)
    if isinstance(node, dict):
        by_key = dict(zip(keys_of(node), items))
        out = {k: by_key[k] for k in node}
        if type(node) is dict:
            return out
        try:
            return type(node)(out)  # OrderedDict and other mappings built from a dict
        except TypeError:
            return out
    if isinstance(node, tuple) and hasattr(type(node), "_fields"):
        return type(node)(*items)
    return type(node)(items)


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    if is_leaf(tree):
        return fn(tree, *rest)
    others = [children(r) for r in rest]
    return rebuild(tree, (tree_map(fn, t, *(o[i] for o in others)) for i, t in enumerate(children(tree))))


def same_structure(a: Any, b: Any) -> bool:
    if is_leaf(a) or is_leaf(b):
        return is_leaf(a) and is_leaf(b)
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict) and set(a) == set(b)):
            return False
    return len(a) == len(b) and all(same_structure(x, y) for x, y in zip(children(a), children(b)))


def copy_tree(tree: Any) -> Any:
    """Deep copy of arrays, NumPy's and PyTorch's (so a rule mutating its input never touches the original), except
    a ``torch.nn.Parameter``, which is passed as it is (below).

    A PyTorch tensor is copied with ``clone()``, which keeps a graph to the original where it carries one (a
    cotangent that a double-backward check differentiates along). Before, a tensor passed as a constant (a
    preallocated buffer) that one check's backward resized and filled with a graph-carrying value reached every
    later check, and GG103 called the pullback raising at an input where, run alone, it passes."""
    torch = sys.modules.get("torch")  # only where it is loaded: checking NumPy rules never imports it
    tensor = None if torch is None else torch.Tensor
    parameter = None if torch is None else torch.nn.Parameter

    def one(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            return np.array(x, copy=True)
        if parameter is not None and isinstance(x, parameter):
            # a module's own parameter, passed beside a function of that module (PyG's InvertibleFunction gets
            # `*self.parameters()` so that autograd.grad in backward reaches them): a clone is not in the graph the
            # module builds, and the backward raised "appears to not have been used in the graph"
            return x
        if tensor is not None and isinstance(x, tensor):
            return x.clone()
        return x

    return tree_map(one, tree)


_IMMUTABLE = (bool, int, float, complex, str, bytes, type(None), np.generic)
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def same_bits(a: Any, p: Any) -> bool:
    """Whether ``a`` is a C-contiguous array with exactly the bits of ``p`` (of the same shape and dtype), or
    the very same immutable value; False for anything else (containers among them)."""
    if not isinstance(a, np.ndarray):
        return a is p and isinstance(a, _IMMUTABLE)
    if (not isinstance(p, np.ndarray) or a.shape != p.shape or a.dtype != p.dtype or a.dtype.hasobject
            or not (a.flags.c_contiguous and p.flags.c_contiguous)):
        return False
    width = _UNSIGNED.get(a.dtype.itemsize, np.uint64 if a.dtype.itemsize % 8 == 0 else None)
    if width is None:
        return False
    return bool(np.array_equal(a.reshape(-1).view(width), p.reshape(-1).view(width)))


def inner(a: Any, b: Any) -> float:
    """Real inner product over matching trees; ``None`` on either side counts as zero."""
    total = 0.0
    for x, y in zip(leaves(a), leaves(b)):
        if x is None or y is None:
            continue
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype.kind in REAL_KINDS and y.dtype.kind in REAL_KINDS:
            # The same products and sum as below, without complex copies (four float64 copies each on large arrays).
            total += float(np.sum(np.multiply(x, y, dtype=np.float64)))
            continue
        total += float(np.sum(np.real(np.conj(np.asarray(x, dtype=np.complex128)) * np.asarray(y, dtype=np.complex128))))
    return total


REAL_KINDS = "biuf"  # dtype kinds whose values are real numbers


def abs_inner(a: Any, b: Any) -> float:
    """``sum |a_i| |b_i|`` over matching trees (``None`` counts as zero): the size of the terms of
    ``<a, b>``, which sets the rounding a comparison of inner products forgives."""
    pairs = [(x, y) for x, y in zip(leaves(a), leaves(b)) if x is not None and y is not None]
    return math.fsum(float(np.sum(np.abs(np.asarray(x)) * np.abs(np.asarray(y)))) for x, y in pairs)


def max_abs(tree: Any) -> float:
    vals = [float(np.max(np.abs(x))) for x in leaves(tree) if x is not None and np.size(x)]
    return max(vals, default=0.0)


def is_narrow_float(x: Any) -> bool:
    """Whether ``x`` is a NumPy array or scalar of a float narrower than float64 (complex narrower than complex128):
    float16, float32, complex64."""
    if not isinstance(x, (np.ndarray, np.generic)) or x.dtype.kind not in "fc":
        return False
    return x.dtype.itemsize < (8 if x.dtype.kind == "f" else 16)


def widened(x: Any) -> Any:
    """``x`` as a float64 (complex128) array where it holds floats (an array, a scalar); anything else (None,
    integers, other objects) as it is."""
    if x is None:
        return None
    arr = np.asarray(x)
    return arr.astype(np.result_type(arr.dtype, np.float64)) if arr.dtype.kind in "fc" else x


def describe(x: Any) -> str:
    """A short type description: ``float64 array of shape (3,)``, ``float``, ``tuple of 2``."""
    if x is None:
        return "None"
    if isinstance(x, np.ndarray):
        return f"{x.dtype} array of shape {x.shape}"
    if isinstance(x, (tuple, list, dict)):
        return f"{type(x).__name__} of {len(x)}"
    if isinstance(x, np.generic):
        return f"NumPy {x.dtype} scalar"
    return type(x).__name__


def with_article(text: str) -> str:
    """``a float64 array``, ``an int``: for messages."""
    return ("an " if text[:1].lower() in "aeiou" else "a ") + text

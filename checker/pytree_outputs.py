"""Registered pytree outputs of JAX rules: a dataclass or class registered with JAX is checked as a dict of its leaves.

A `jax.custom_vjp` may return any pytree: a flax ``struct.dataclass``, a class registered with
``jax.tree_util.register_dataclass`` or ``register_pytree_node_class`` (netket's ``Stats``, holding a mean, a
variance and an error), whose ``bwd`` then takes a cotangent of the same class. The checks compare outputs and
draw cotangents on arrays, numbers and the containers JAX and NumPy share (tuples, lists, NamedTuples, dicts), so
`jax_rule` reads such an output as the dict of its leaves, each keyed by its path in the node (``mean``,
``var``, ``inner_scale``), and hands the rule's ``bwd`` the cotangent rebuilt in the node's own class. Reports
name an output's leaves by those keys. Outputs made only of the containers above are passed as they are.

The same reading is applied to the rule, its primal and the custom_vjp the JAX checks differentiate, so the
three agree on every output's structure.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable

import numpy as np

__all__ = ["plain", "restored", "plain_outputs", "plain_rule"]


def _jax() -> Any:
    from gradguard.engines.jax_engine._runtime import load

    return load()


def _is_node(x: Any) -> bool:
    """A registered pytree node the checks do not read themselves: not a tuple, list, dict, None or leaf."""
    if x is None or isinstance(x, (tuple, list, dict, np.ndarray, np.generic, int, float, complex)):
        return False
    jax = _jax()
    if isinstance(x, jax.Array):
        return False
    return not jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(x))


def _key_text(key: Any) -> str:
    for attr in ("name", "key", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _keys(paths: list[Any]) -> list[str]:
    names = [re.sub(r"\W+", "_", "_".join(_key_text(k) for k in path)).strip("_") or str(i)
             for i, path in enumerate(paths)]
    if len(set(names)) != len(names):
        names = [f"{i}_{n}" for i, n in enumerate(names)]
    return names


def _node_leaves(node: Any) -> tuple[list[str], list[Any], Any]:
    jax = _jax()
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(node)
    return _keys([p for p, _ in with_paths]), [leaf for _, leaf in with_paths], treedef


def plain(tree: Any) -> Any:
    """``tree`` with each registered node replaced by the dict of its leaves keyed by their paths; tuples,
    NamedTuples, lists and dicts are kept, their children read the same way."""
    if _is_node(tree):
        keys, values, _ = _node_leaves(tree)
        return dict(zip(keys, values))
    if isinstance(tree, dict):
        return {k: plain(v) for k, v in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(plain(c) for c in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(plain(c) for c in tree)
    return tree


def restored(cotangent: Any, like: Any) -> Any:
    """A cotangent drawn for ``plain(like)`` in ``like``'s own structure: each registered node rebuilt in its class
    from the dict's values. Anything that does not have the plain structure is returned as it is (the adapter and
    the contract checks report what does not fit)."""
    if cotangent is None:
        return None
    if _is_node(like):
        keys, _, treedef = _node_leaves(like)
        if not isinstance(cotangent, dict) or set(cotangent) != set(keys):
            return cotangent
        return treedef.unflatten([cotangent[k] for k in keys])
    if isinstance(like, dict) and isinstance(cotangent, dict) and set(like) == set(cotangent):
        return {k: restored(cotangent[k], like[k]) for k in like}
    if isinstance(like, (tuple, list)) and isinstance(cotangent, (tuple, list)) and len(like) == len(cotangent):
        items = [restored(c, o) for c, o in zip(cotangent, like)]
        if isinstance(like, tuple) and hasattr(like, "_fields"):
            return type(like)(*items)
        return type(cotangent)(items)
    return cotangent


def _holds_node(tree: Any) -> bool:
    if _is_node(tree):
        return True
    if isinstance(tree, dict):
        return any(_holds_node(v) for v in tree.values())
    if isinstance(tree, (tuple, list)):
        return any(_holds_node(c) for c in tree)
    return False


def plain_outputs(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a primal, or the custom_vjp the JAX checks trace) returning :func:`plain` outputs."""

    @functools.wraps(fn)
    def with_plain_output(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        return plain(out) if _holds_node(out) else out

    with_plain_output.reads_outputs_of = fn  # type: ignore[attr-defined]  # (jvp_of finds a custom_jvp's parts there)
    return with_plain_output


def plain_rule(rule: Callable[..., Any]) -> Callable[..., Any]:
    """An adapted rrule whose output is :func:`plain` and whose pullback hands the rule its cotangent back in the
    output's own structure."""

    @functools.wraps(rule)
    def with_plain_output(*args: Any, **kwargs: Any) -> Any:
        result = rule(*args, **kwargs)
        if not (isinstance(result, tuple) and len(result) == 2 and callable(result[1])):
            return result
        y, pullback = result
        if not _holds_node(y):
            return result

        @functools.wraps(pullback)
        def plain_pullback(ybar: Any) -> Any:
            return pullback(restored(ybar, y))

        return plain(y), plain_pullback

    return with_plain_output

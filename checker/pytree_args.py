"""Pytree arguments of JAX rules: a NamedTuple, dict, tuple, list or registered argument is checked leaf by leaf.

`jax.custom_vjp` accepts any pytree as an argument (JAX's notebook passes a ``Point(x, y)`` NamedTuple; a model's
parameters come as a flax struct or a class registered with ``jax.tree_util``), and
its ``bwd`` returns a tangent of the same structure. The checks draw directions, move inputs and compare
tangents argument by argument, on arrays and numbers; so `jax_rule` reads such a rule on the leaves of its
pytree arguments, each leaf an argument of its own: ``point_rule(pt)`` with ``pt = Point(x, y)`` is checked
as ``point_rule(pt_x, pt_y)``, whose tangents are the leaves of the tangent ``bwd`` returns. Reports name
the leaves by their path in the argument (``pt_x``, ``pt_y``), and reproducers replay them as they are.

The structure (the pytree's type, fields and keys; not the leaves' shapes) is read from one draw of each
argument's spec when the rule is declared, and must be the same in every draw.
"""

from __future__ import annotations

import functools
import inspect
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from hypothesis.strategies import SearchStrategy

from gradguard.checker.errors import SpecError

__all__ = ["Flattening", "flattening"]


@dataclass(frozen=True)
class Flattening:
    """How the arguments of a rule map to the flat arguments the checks see."""

    treedefs: tuple[Any, ...]  # per original argument: its treedef, or None for an argument kept whole
    counts: tuple[int, ...]  # flat arguments per original argument
    names: tuple[str, ...]  # the flat arguments' names

    @property
    def nargs(self) -> int:
        return len(self.counts)

    def flat_positions(self, positions: Any) -> frozenset[int]:
        """The flat positions of the original ``positions`` (all leaves of a flattened argument)."""
        starts = [sum(self.counts[:i]) for i in range(self.nargs)]
        return frozenset(starts[i] + k for i in positions if i < self.nargs for k in range(self.counts[i]))

    def flatten(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        jax = _jax()
        flat: list[Any] = []
        for i, (a, treedef) in enumerate(zip(args, self.treedefs)):
            if treedef is None:
                flat.append(a)
                continue
            leaves, got = jax.tree_util.tree_flatten(a)
            if got != treedef:
                raise SpecError(f"argument {i} was drawn with the structure {got}, but its first draw had {treedef}: "
                                "a pytree argument must keep one structure (only its leaves' shapes may vary).")
            flat.extend(leaves)
        return tuple(flat) + tuple(args[len(self.treedefs):])

    def unflatten(self, flat: tuple[Any, ...]) -> tuple[Any, ...]:
        jax = _jax()
        out, at = [], 0
        for treedef, n in zip(self.treedefs, self.counts):
            chunk = flat[at:at + n]
            out.append(chunk[0] if treedef is None else jax.tree_util.tree_unflatten(treedef, list(chunk)))
            at += n
        return tuple(out) + tuple(flat[at:])

    def flat_tangents(self, tangents: Any) -> Any:
        """A pullback's tangents (one per original argument, pytrees for pytree arguments) as one per flat
        argument; returned as they are where they do not have that form, so the contract checks (GG103,
        GG104) report what the rule returned."""
        jax = _jax()
        if not isinstance(tangents, (tuple, list)) or len(tangents) != self.nargs:
            return tangents
        flat: list[Any] = []
        for t, treedef, n in zip(tangents, self.treedefs, self.counts):
            if treedef is None:
                flat.append(t)
            elif t is None:
                flat.extend([None] * n)
            else:
                # up to the argument's own structure: a None in the argument (equinox's partition leaves one in every
                # static slot) is an empty node there and in the tangent alike, and a None tangent for one of its
                # arrays is that leaf's zero (counted apart, the two made GG103 call a right tangent the wrong size)
                try:
                    leaves = treedef.flatten_up_to(t)
                except (ValueError, TypeError):
                    return tangents
                if len(leaves) != n:
                    return tangents
                flat.extend(leaves)
        return tuple(flat)

    def rule(self, rule: Callable[..., Any]) -> Callable[..., Any]:
        """``rule`` read on flat arguments, with a pullback returning flat tangents."""

        @functools.wraps(rule)
        def on_leaves(*flat: Any, **kwargs: Any) -> Any:
            result = rule(*self.unflatten(flat), **kwargs)
            if not (isinstance(result, tuple) and len(result) == 2 and callable(result[1])):
                return result
            y, pullback = result

            @functools.wraps(pullback)
            def flat_pullback(ybar: Any) -> Any:
                return self.flat_tangents(pullback(ybar))

            return y, flat_pullback

        on_leaves.__signature__ = self._signature()  # type: ignore[attr-defined]
        return on_leaves

    def function(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (a primal, or the custom_vjp itself for the JAX checks) called on flat arguments."""

        @functools.wraps(fn)
        def on_leaves(*flat: Any, **kwargs: Any) -> Any:
            return fn(*self.unflatten(flat), **kwargs)

        on_leaves.__signature__ = self._signature()  # type: ignore[attr-defined]
        return on_leaves

    def _signature(self) -> inspect.Signature:
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature([inspect.Parameter(n, kind) for n in self.names])


def _jax() -> Any:
    from gradguard.engines.jax_engine._runtime import load

    return load()


def _is_pytree(a: Any) -> bool:
    """A tuple, list or dict, or a class registered with JAX as a pytree node (a flax struct, a dataclass passed to
    ``jax.tree_util.register_dataclass``): not an array, number or unregistered object, which JAX reads as leaves."""
    if isinstance(a, (tuple, list, dict)):
        return True
    if a is None:
        return False
    jax = _jax()
    return not jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(a))


def _one_draw(strategy: SearchStrategy) -> Any:
    from gradguard.checker._hypothesis import first_draw

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return first_draw(strategy)


def _leaf_name(param: str, path: Any) -> str:
    text = param + "".join(_key_text(k) for k in path)
    name = re.sub(r"\W+", "_", text).strip("_")
    return name if name.isidentifier() else f"arg_{name}"


def _key_text(key: Any) -> str:
    for attr in ("name", "key", "idx"):
        if hasattr(key, attr):
            return f"_{getattr(key, attr)}"
    return f"_{key}"


def flattening(fun: Callable[..., Any], arg_specs: tuple[SearchStrategy, ...], args: SearchStrategy | None,
               nondiff: Any) -> Flattening | None:
    """How ``fun``'s drawn arguments flatten, from one draw of the specs; None where no differentiable
    argument is a pytree (the rule is checked as it is)."""
    jax = _jax()
    try:
        drawn = tuple(_one_draw(s) for s in arg_specs) if arg_specs else tuple(_one_draw(args))
    except Exception:  # noqa: BLE001 - a spec that cannot draw here: the checks report it when they draw
        return None
    from gradguard.checker.specs import constant_positions

    skip = set(nondiff) | constant_positions(arg_specs).keys()
    if not any(i not in skip and _is_pytree(a) for i, a in enumerate(drawn)):
        return None
    try:
        params = [p.name for p in inspect.signature(fun).parameters.values()]
    except (TypeError, ValueError):
        params = []
    treedefs, counts, names = [], [], []
    for i, a in enumerate(drawn):
        param = params[i] if i < len(params) else f"arg{i}"
        if i in skip or not _is_pytree(a):
            treedefs.append(None)
            counts.append(1)
            names.append(param)
            continue
        paths, treedef = jax.tree_util.tree_flatten_with_path(a)
        if not paths:
            raise SpecError(f"argument {i} ({param}) is a pytree without leaves; declare it with constant(...) "
                            "or leave it out.")
        treedefs.append(treedef)
        counts.append(len(paths))
        names.extend(_leaf_name(param, path) for path, _ in paths)
    if len(set(names)) != len(names):
        names = [f"{n}_{k}" for k, n in enumerate(names)]
    return Flattening(tuple(treedefs), tuple(counts), tuple(names))

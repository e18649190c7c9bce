"""Deterministic inputs for the contexts: draws from the rule's argument specs, fixed by the seed.

``strategy.example()`` is random on every call, and Hypothesis' first
examples are its simplest ones (zeros), where most hazards cancel out. So a
short seeded search collects a few examples on which the primal runs and
keeps the two with the most distinct well-scaled values. Every input a
context uses is such a draw (or the very same values in another layout): a
value derived by gradguard, like a reordered copy, can leave the rule's
declared domain (an increasing sequence reversed).

Contexts that need inputs of a special shape (``rule(x, x.T)``, tied weights)
may not fit the first draws when the specs draw their shapes; `search`
draws further from the same specs, within a budget, for inputs that fit.
"""

from __future__ import annotations

import random
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, find, given, seed as hyp_seed, settings
from hypothesis.errors import NoSuchExample

from gradguard.checker._hypothesis import keyless, own_constants_only
from gradguard.checker.specs import RuleSpec
from gradguard.engines.values import differentiable
from gradguard.checker.trees import copy_tree, leaves

__all__ = ["draw_inputs", "drawn_ranges", "drawn_shapes", "shapes_vary", "search", "Found", "NoInput", "SEARCH_DRAWS"]

_CANDIDATES = 16
_RICHNESS_SAMPLE = 4096
SEARCH_DRAWS = 100  # further draws `search` may take for the contexts whose shapes the first draws did not fit
_FITTING = 4  # ... stopping once every context has this many fitting draws to choose the richest from


class NoInput(Exception):
    """The argument specs gave no input on which the primal runs."""


def _richness(args: tuple[Any, ...]) -> tuple[int, int]:
    """(minus the awkward values, distinct well-scaled values). Hypothesis likes 0, 1e-300 and repeats:
    there a matrix is diagonal in all but name, a kink sits under the finite differences, and hazards
    cancel out."""
    values = [np.ravel(np.asarray(a)) for a in leaves(args) if differentiable(a)]
    if not values:
        return 0, 0
    flat = np.abs(np.concatenate(values))
    if not np.all(np.isfinite(flat)):
        return -flat.size - 1, 0
    if flat.size > _RICHNESS_SAMPLE:  # large inputs: judge an evenly spaced sample (sorting 10**6 values per
        flat = flat[:: flat.size // _RICHNESS_SAMPLE][:_RICHNESS_SAMPLE]  # candidate cost more than the rule)
    good = (flat >= 1e-2) & (flat <= 1e3)
    distinct = int(np.unique(flat[good]).size)
    return distinct - flat.size, distinct


# Draws are a pure function of (rule, seed): kept while the rule lives, copied out on every use.
_DRAWN: "weakref.WeakKeyDictionary[RuleSpec, dict[Any, Any]]" = weakref.WeakKeyDictionary()


def draw_inputs(rule: RuleSpec, seed: int) -> tuple[tuple[Any, ...], tuple[Any, ...] | None, Any]:
    """``(args, args2, output)``: the richest drawn input, a second distinct draw (or None), and the primal's
    output on the first. Raises `NoInput` with the last error when the primal fails on every draw."""
    return copy_tree(_drawn(rule, seed)[:3])


def drawn_ranges(rule: RuleSpec, seed: int) -> dict[int, tuple[float, float]]:
    """For each differentiable array argument, the smallest and largest value (real and imaginary parts) over
    every draw on which the primal ran: where the argument's spec declares no range (its own ``elements=``, a
    ``.map``, one ``args=`` strategy for all), what the draws show of its domain."""
    return dict(_drawn(rule, seed)[4])


def drawn_shapes(rule: RuleSpec, seed: int) -> dict[int, frozenset[tuple[int, ...]]]:
    """For each array argument, the shapes its draws took (over every draw on which the primal ran): the shapes
    its spec is known to make. A context that passes an argument in another shape (a non-square W as W.T) would
    take the rule outside its declared domain."""
    return dict(_drawn(rule, seed)[5])


def shapes_vary(rule: RuleSpec, seed: int) -> bool:
    """Whether the draws came in more than one shape: only then can further draws fit a context that these
    did not (a rule whose specs fix every shape never will)."""
    return _drawn(rule, seed)[3]


def _drawn(rule: RuleSpec, seed: int) -> tuple[Any, ...]:
    per_rule = _DRAWN.setdefault(rule, {})
    if seed not in per_rule:
        per_rule[seed] = _draw(rule, seed)
    return per_rule[seed]


def _draw(rule: RuleSpec, seed: int) -> tuple[Any, ...]:
    found: list[tuple[tuple[int, int], int, tuple[Any, ...], Any]] = []
    errors: list[BaseException] = []

    @settings(max_examples=_CANDIDATES, database=None, deadline=None, phases=(Phase.generate,),
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, print_blob=False)
    @hyp_seed(seed)
    @given(rule.args_strategy)
    def collect(args: Any) -> None:
        args = tuple(args)
        try:
            out = rule.primal(*copy_tree(args))
        except Exception as exc:  # noqa: BLE001 - outside the rule's domain: try another draw
            errors.append(exc)
            return
        found.append((_richness(args), -len(found), copy_tree(args), out))

    with own_constants_only():
        keyless(collect)()
    if not found:
        last = f": {type(errors[-1]).__name__}: {errors[-1]}" if errors else ""
        raise NoInput(f"the primal of {rule.name} raised on every drawn input{last}")
    found.sort(key=lambda f: (f[0], f[1]), reverse=True)
    _, _, args, out = found[0]
    # The second input is another draw (never a value derived from the first): as clean as the first and of
    # its shapes where there is one, then any of its shapes, then any other.
    others = [f for f in found[1:] if not _same(f[2], args)]
    alike = [f for f in others if _shapes(f[2]) == _shapes(args)]
    ranked = [f for f in alike if f[0][0] == 0] + alike + [f for f in others if f[0][0] == 0] + others
    second = ranked[0][2] if ranked else None
    draws = [f[2] for f in found]
    return args, second, out, len({tuple(_shapes(f[2])) for f in found}) > 1, _ranges(draws), _slot_shapes(draws)


def _slot_shapes(draws: list[tuple[Any, ...]]) -> dict[int, frozenset[tuple[int, ...]]]:
    shapes: dict[int, set[tuple[int, ...]]] = {}
    for args in draws:
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                shapes.setdefault(i, set()).add(a.shape)
    return {i: frozenset(s) for i, s in shapes.items()}


def _ranges(draws: list[tuple[Any, ...]]) -> dict[int, tuple[float, float]]:
    lows: dict[int, float] = {}
    highs: dict[int, float] = {}
    for args in draws:
        for i, a in enumerate(args):
            if not (isinstance(a, np.ndarray) and differentiable(a) and a.size):
                continue
            parts = (a.real, a.imag) if np.iscomplexobj(a) else (a,)
            with np.errstate(all="ignore"):
                lo, hi = min(float(np.min(p)) for p in parts), max(float(np.max(p)) for p in parts)
            lows[i], highs[i] = min(lo, lows.get(i, lo)), max(hi, highs.get(i, hi))
    return {i: (lows[i], highs[i]) for i in lows}


@dataclass
class Found:
    """What `search` found for one context: the richest fitting draw and the primal's output on it (None
    where no draw fit), how many draws fit, and how many further draws the search looked at."""

    args: tuple[Any, ...] | None
    output: Any
    fitting: int
    tried: int


def search(rule: RuleSpec, seed: int, fits: dict[str, Callable[[tuple[Any, ...], Any], bool]]) -> dict[str, Found]:
    """Further draws from the rule's own argument specs (up to SEARCH_DRAWS, seeded) for each context in
    ``fits``: ``fits[name](args, output)`` says whether a draw on which the primal runs fits that context.
    Each context gets the richest of its first few fitting draws; the search stops once every context has
    them. Kept per (rule, seed, contexts), like the first draws."""
    key = ("search", seed, tuple(sorted(fits)))
    per_rule = _DRAWN.setdefault(rule, {})
    if key not in per_rule:
        per_rule[key] = _search(rule, seed, fits)
    return {name: Found(copy_tree(f.args), copy_tree(f.output), f.fitting, f.tried) for name, f in per_rule[key].items()}


def _search(rule: RuleSpec, seed: int, fits: dict[str, Callable[[tuple[Any, ...], Any], bool]]) -> dict[str, Found]:
    hits: dict[str, list[tuple[tuple[int, int], int, tuple[Any, ...], Any]]] = {name: [] for name in fits}
    tried = 0

    def complete() -> bool:
        return all(len(h) >= _FITTING for h in hits.values())

    def enough(args: Any) -> bool:
        nonlocal tried
        if complete():
            return True  # Hypothesis replays the draw that ended the search
        args = tuple(args)
        tried += 1
        try:
            out = rule.primal(*copy_tree(args))
        except Exception:  # noqa: BLE001 - outside the rule's domain: try another draw
            return False
        for name, fit in fits.items():
            if len(hits[name]) < _FITTING and _fits(fit, args, out):
                hits[name].append((_richness(args), -tried, copy_tree(args), out))
        return complete()

    quiet = settings(max_examples=SEARCH_DRAWS, database=None, deadline=None, phases=(Phase.generate,),
                     suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet)
    with own_constants_only():
        try:
            find(rule.args_strategy, enough, settings=quiet, random=random.Random(seed))
        except NoSuchExample:
            pass
    out: dict[str, Found] = {}
    for name, found in hits.items():
        if not found:
            out[name] = Found(None, None, 0, tried)
            continue
        best = max(found, key=lambda f: (f[0], f[1]))
        out[name] = Found(best[2], best[3], len(found), tried)
    return out


def _fits(fit: Callable[[tuple[Any, ...], Any], bool], args: tuple[Any, ...], out: Any) -> bool:
    try:
        return bool(fit(copy_tree(args), out))
    except Exception:  # noqa: BLE001 - a draw the context cannot even look at does not fit it
        return False


def _primal_runs(rule: RuleSpec, args: tuple[Any, ...]) -> bool:
    try:
        rule.primal(*copy_tree(args))
        return True
    except Exception:  # noqa: BLE001 - outside the rule's domain
        return False


def _shapes(args: tuple[Any, ...]) -> list[tuple[int, ...]]:
    return [np.shape(x) for x in leaves(args)]


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    la, lb = leaves(a), leaves(b)
    if len(la) != len(lb):
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a SciPy sparse constant warns that == is slow
            return all(np.shape(x) == np.shape(y) and bool(np.all(np.asarray(x) == np.asarray(y))) for x, y in zip(la, lb))
    except Exception:  # noqa: BLE001 - incomparable leaves are different
        return False

"""The labelled corpus as benchmark cases: each rule, its label, and one drawn input for the anchors.

Anchors (gradcheck, check_grads) test one point, the way their users call
them with a random input; each case gets one input drawn deterministically
from the rule's own argument specs (so it lies in the rule's domain), the
most generic of a few drawn (most distinct non-zero values), and a second one
for programs that call the rule twice.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hyp_seed

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gradguard.checker.loader import load_module, rules_in
from gradguard.checker.specs import RuleSpec
from gradguard.engines.values import differentiable

CORPUS = ROOT / "tests" / "corpus"
REALWORLD = ROOT / "tests" / "realworld"
CLASSES = ("contract", "numeric", "cotangent", "state", "context", "aliasing", "jax-composition", "torch")
CONTEXT_CLASSES = ("context", "aliasing")


@dataclass
class BenchCase:
    module: str
    name: str
    rule: RuleSpec
    bug: str
    expect: list[str]
    label: dict[str, Any]
    args: tuple[Any, ...] = ()
    args2: tuple[Any, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def buggy(self) -> bool:
        return self.bug != "correct"

    @property
    def in_context(self) -> bool:
        """Wrong only inside a program: the anchors run on the context programs, not the rule alone."""
        return self.bug in CONTEXT_CLASSES

    @property
    def diff(self) -> list[int]:
        return [i for i, a in enumerate(self.args) if i not in self.rule.nondiff and differentiable(a)]

    @property
    def key(self) -> str:
        return f"{self.module}:{self.name}"

    def with_diff(self, xs: tuple) -> tuple:
        """The case's arguments with the differentiable ones replaced by ``xs`` (an anchor's own arrays)."""
        full = list(self.args)
        for i, x in zip(self.diff, xs):
            full[i] = x
        return tuple(full)

    def primal_output(self) -> Any:
        """The primal's output on fresh copies (0.0 when the primal fails: the anchor then reports it)."""
        try:
            return self.rule.primal(*copy_args(self.args))
        except Exception:  # noqa: BLE001
            return 0.0


def load_cases(corpus: Path = CORPUS, *, names: list[str] | None = None, torch: bool = False) -> list[BenchCase]:
    """Every labelled rule of every corpus module (sorted by module, then definition order).

    The PyTorch modules (``torch_*.py``, which import torch) are a corpus of their own: only they load with
    ``torch=True``, and only the others without it.
    """
    cases = []
    for path in sorted(corpus.glob("*.py")):
        if path.name.startswith(("_", "test_")) or path.name.startswith("torch_") != torch:
            continue
        module = load_module(path)
        labels = getattr(module, "LABELS", {})
        for rule in rules_in(module):
            label = labels.get(rule.name)
            if label is None:
                continue
            case = BenchCase(path.stem, rule.name, rule, bug_class(label), sorted(label["expect"]), label)
            if names is None or case.name in names or case.key in names:
                cases.append(case)
    return cases


def load_realworld_cases(folder: Path = REALWORLD, *, names: list[str] | None = None) -> list[BenchCase]:
    """Every rule of every rule module in the public real-world corpus (tests/realworld/), labelled buggy or
    correct.

    A rule is buggy when a module of the folder names it in ``BUGGY`` (or as a key of ``FIXED``: the historical
    bugs beside their fixed twins); its bug class and expected ids come from that module's ``LABELS`` where it
    has one. Every other rule is correct, whether or not its module has labels, so modules of correct rules
    (``correct_*.py``) are picked up as they are added. A correct rule a module names in ``UPSTREAM_FLAWS``
    (a flaw of the upstream rule that gradguard finds) carries it as ``label["upstream_flaw"]``. A module that
    does not load is reported and skipped.
    """
    modules = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith(("_", "test_")):
            continue
        try:
            modules.append((path, load_module(path)))
        except Exception as exc:  # noqa: BLE001 - one broken module must not hide the others
            print(f"skipping {path.name}: it does not load ({type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]})", file=sys.stderr)
    buggy: set[str] = set()
    labels: dict[str, dict[str, Any]] = {}
    flaws: dict[str, Any] = {}
    for _, module in modules:
        buggy |= set(getattr(module, "BUGGY", ())) | set(getattr(module, "FIXED", {}))
        labels.update(getattr(module, "LABELS", {}))
        flaws.update(getattr(module, "UPSTREAM_FLAWS", {}))
    cases = []
    for path, module in modules:
        for rule in rules_in(module):
            label = dict(labels.get(rule.name, {}))
            if rule.name in buggy:
                bug = str(label.get("bug", "numeric"))
                bug = bug if bug in CLASSES else "numeric"
                expect = sorted(label.get("expect", []))
            else:
                bug, expect = "correct", []
                if rule.name in flaws:
                    ids, evidence = flaws[rule.name][:2]
                    label["upstream_flaw"] = {"ids": sorted(ids), "evidence": evidence}
            case = BenchCase(path.stem, rule.name, rule, bug, expect, label)
            if names is None or case.name in names or case.key in names:
                cases.append(case)
    return cases


def bug_class(label: dict[str, Any]) -> str:
    """The label's bug class: one of CLASSES or "correct" (tests/checker/test_corpus.py holds every label to it)."""
    bug = str(label.get("bug", ""))
    if bug not in CLASSES and bug != "correct":
        raise ValueError(f"corpus label has bug class {bug!r}; use one of {', '.join(CLASSES)} or 'correct' (details go in 'what')")
    return bug


def _score(args: tuple[Any, ...]) -> int:
    values = []
    for a in args:
        if isinstance(a, np.ndarray) and a.dtype.kind in "fc":
            values.extend(a.ravel().tolist())
        elif isinstance(a, float):
            values.append(a)
    distinct = len({v for v in values if v != 0 and (not isinstance(v, float) or math.isfinite(v))})
    tiny = sum(1 for v in values if abs(v) < 1e-3)  # zeros, and values a finite-difference step would cross
    return distinct - 1000 * tiny  # like torch.randn: no exact zeros, no ties where avoidable


def draw_inputs(rule: RuleSpec, seed: int = 0, n: int = 12) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Two inputs from the rule's specs, deterministic for a seed: the most generic first."""
    found: list[tuple[Any, ...]] = []

    @hyp_seed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(rule.args_strategy)
    def collect(args: Any) -> None:
        found.append(tuple(args))

    collect()
    ranked = sorted(range(len(found)), key=lambda k: (-_score(found[k]), -k))
    first = found[ranked[0]]
    second = next((found[k] for k in ranked[1:] if _shape_of(found[k]) == _shape_of(first)), first)
    return first, second


def _shape_of(args: tuple[Any, ...]) -> tuple:
    return tuple(_one_shape(a) for a in args)


def _one_shape(a: Any) -> Any:
    """An argument's shape and dtype; for a ragged sequence (a tuple of arrays of several shapes), its elements'."""
    if isinstance(a, (list, tuple)) and not isinstance(a, np.ndarray):
        return (type(a).__name__, tuple(_one_shape(x) for x in a))
    return np.shape(a), getattr(a, "dtype", type(a))


def copy_args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


def prepare(cases: list[BenchCase], seed: int = 0) -> list[BenchCase]:
    for case in cases:
        case.args, case.args2 = draw_inputs(case.rule, seed)
    return cases


def softplus(x: Any) -> Any:
    return np.logaddexp(0.0, x)


def counting_softplus_rule(n: int, calls: Counter | None = None) -> RuleSpec:
    """A correct softplus rule on ``n`` elements that counts its primal, forward and pullback calls."""
    from gradguard import arrays, rrule

    calls = Counter() if calls is None else calls

    def primal(x):
        # np.logaddexp in the primal's own body, not through softplus(): GG203 traces the primal with its
        # module's numpy run as jax.numpy, which does not reach into a helper, so a helper left GG203 skipped
        calls["primal"] += 1
        return np.logaddexp(0.0, x)

    @rrule(primal, arrays(shape=(n,), min_value=-30.0, max_value=30.0), name=f"softplus_{n}")
    def softplus_large_rrule(x):
        calls["forward"] += 1
        sig = 1.0 / (1.0 + np.exp(-x))

        def pullback(ybar):
            calls["pullback"] += 1
            return (None,) if ybar is None else (ybar * sig,)

        return softplus(x), pullback

    return softplus_large_rrule

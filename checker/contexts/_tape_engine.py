"""The tape as safety-matrix columns: one per unused-output policy (``tape[zero]``, ``tape[none]``,
``tape[skip]``), the rule registered as a tape primitive; a wrong cell is run again in watch mode for
its diagnosis (which operation's captured input was mutated, and by whom)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradguard.checker.contexts._engine import NOT_TORCH, Engine, RuleView, scalar
from gradguard.checker.contexts._ops import Ops, tape_ops
from gradguard.checker.contexts._programs import Plan
from gradguard.checker.specs import RuleSpec, unused_cotangent_of
from gradguard.checker.trees import children, copy_tree, is_leaf, rebuild
from gradguard.engines.values import is_ml_float

__all__ = ["POLICIES", "ENGINES"]

POLICIES = ("zero", "none", "skip")


def _primitive(view: RuleView) -> Any:
    from gradguard.engines.tape import primitive

    return primitive(_numpy_rrule(view.rule), name=view.name, nondiff=tuple(sorted(view.rule.nondiff)))


def _ops(view: RuleView) -> Ops:
    return tape_ops(view.adapted("tape", _primitive))


def _run(view: RuleView, plan: Plan, policy: str, watch: bool) -> Any:
    from gradguard.engines.tape import run_backward

    ops = _ops(view)
    with np.errstate(all="ignore"):
        return run_backward(lambda *xs: plan.program(ops, plan.consts, *xs), copy_tree(plan.inputs), 1.0,
                            unused=policy, watch=watch)


def _differentiate(policy: str) -> Callable[[RuleView, Plan, Ops], tuple[float, tuple]]:
    def differentiate(view: RuleView, plan: Plan, ops: Ops) -> tuple[float, tuple]:
        result = _run(view, plan, policy, watch=False)
        return scalar(result.value), result.grads

    return differentiate


def _diagnose(policy: str) -> Callable[[RuleView, Plan], str | None]:
    def diagnose(view: RuleView, plan: Plan) -> str | None:
        """The watch mode's account of a wrong tape cell, in plain words (None when nothing was mutated)."""
        try:
            result = _run(view, plan, policy, watch=True)
        except Exception:  # noqa: BLE001 - the diagnosis is informative only
            return None
        first = {}  # one sentence per (capturing op, mutator): dot(x, x) captures x twice
        for d in result.diagnoses:
            first.setdefault((d.op, d.op_step, d.mutated_by, d.mutated_step), d.message)
        return " ".join(first.values()) or None

    return diagnose


def _hands_none(rule: RuleSpec) -> bool:
    """The tape hands an unused output's pullback None only for rules whose declared convention says None
    can arrive (``unused_cotangent``)."""
    return unused_cotangent_of(rule) == "none"


def _numpy_rrule(rule: RuleSpec) -> Callable[..., Any]:
    if rule.kind != "jax":
        return rule.rrule

    def rrule(*args: Any) -> Any:  # a JAX rule's rrule may hand back JAX arrays: the tape tracks NumPy ones
        out, pullback = rule.rrule(*args)
        return _to_numpy(out), lambda g: pullback(g)

    return rrule


def _to_numpy(tree: Any) -> Any:
    """NumPy arrays of a JAX rule's output; a bfloat16 or float8 one (NumPy kind "V", through ml_dtypes) as the float32
    that holds its values exactly, which the tape tracks: left as it is, the tape took it for a constant and the
    program's gradient through it for 0 (praxis' einsum with a bfloat16 output dtype). Its pullback still gets the
    cotangent cast to its own dtype, as JAX casts it."""
    if not is_leaf(tree):
        return rebuild(tree, (_to_numpy(t) for t in children(tree)))
    out = np.asarray(tree) if hasattr(tree, "__array__") and not isinstance(tree, np.ndarray) else tree
    if isinstance(out, (np.ndarray, np.generic)) and is_ml_float(out.dtype):
        return out.astype(np.float32)
    return out


ENGINES: tuple[Engine, ...] = tuple(
    Engine(
        name=f"tape[{policy}]",
        family="tape",
        label="the tape",
        ops=_ops,
        differentiate=_differentiate(policy),
        runs_mutation=True,
        unused=policy,
        kinds=NOT_TORCH,
        complex_conventions=frozenset({"chainrules"}),
        complex_note="does not convert between the ChainRules and JAX conventions for complex tangents",
        applies=_hands_none if policy == "none" else (lambda rule: True),
        diagnose=_diagnose(policy),
    )
    for policy in POLICIES
)

"""JAX as a safety-matrix column: the rule as a `jax.custom_vjp` (a NumPy rule adapted through
`to_custom_vjp`, a JAX rule's own function), the program under eager ``value_and_grad``.

JAX compiles each primitive once per shape and keeps it for every later rule, which costs far less than
compiling every context program with ``jit`` (seconds per rule) and is as fast once warm. JAX arrays are
immutable: a rule's declared mutation does not happen there (``runs_mutation=False``).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from gradguard.checker.contexts._engine import Engine, RuleView, scalar
from gradguard.checker.contexts._ops import Ops, jax_ops
from gradguard.checker.contexts._programs import Plan
from gradguard.checker.specs import RuleSpec
from gradguard.checker.trees import copy_tree

__all__ = ["ENGINE"]

# The adapted rule per live rule (its host callbacks and output shapes are cached inside it).
_ADAPTED: "weakref.WeakKeyDictionary[RuleSpec, Any]" = weakref.WeakKeyDictionary()


def _adapt(view: RuleView) -> Any:
    from gradguard.engines.jax_engine import to_custom_vjp
    from gradguard.engines.jax_engine._runtime import load

    load()
    rule = view.rule
    adapted = _ADAPTED.get(rule)
    if adapted is None:
        if rule.kind == "jax" and rule.jax_fn is not None:
            adapted = rule.jax_fn
        else:
            adapted = to_custom_vjp(rule.rrule, nondiff=tuple(sorted(rule.nondiff)), name=view.name,
                                    example_args=copy_tree(view.example_args))
        _ADAPTED[rule] = adapted
    return adapted


def _ops(view: RuleView) -> Ops:
    return jax_ops(view.adapted("jax", _adapt))


def _differentiate(view: RuleView, plan: Plan, ops: Ops) -> tuple[float, tuple]:
    import jax

    from gradguard.engines.jax_engine import relaying

    program = plan.program

    def run(consts: Any, *xs: Any) -> Any:
        return program(ops, consts, *xs)

    fn = jax.value_and_grad(run, argnums=tuple(range(1, len(plan.inputs) + 1)))
    with relaying():
        value, grads = fn(plan.consts, *plan.inputs)
    grads = tuple(np.conj(np.asarray(g)) if np.iscomplexobj(g) else np.asarray(g) for g in grads)
    return scalar(value), grads


ENGINE = Engine(
    name="jax",
    family="jax",
    label="JAX",
    ops=_ops,
    differentiate=_differentiate,
    runs_mutation=False,
    unused="zero",
    complex_conventions=frozenset({"jax"}),
    complex_note="does not convert between the ChainRules and JAX conventions for complex tangents",
)

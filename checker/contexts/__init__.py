"""Adversarial contexts and the safety matrix: in which programs is a rule safe to use?

    from gradguard.checker.contexts import safety_matrix
    matrix = safety_matrix(addone_rrule, seed=0)

A context is a program template that embeds the rule (output used, output
unused, an input captured before the call, read after it, the rule called
twice, fan-out, aliased arguments, non-contiguous views, tied weights). Each
applicable context runs under every engine of the registry (`_engines`: the
tape with each unused-output policy, JAX, PyTorch where installed) that
applies to the rule, and is compared with finite differences of the whole
program.

The matrix, as stored in ``RuleResult.safety_matrix``::

    {"contexts": [name, ...], "engines": ["tape[zero]", "tape[none]", "tape[skip]", "jax", "torch"],
     "cells": [{"context", "engine", "status": "right" | "wrong" | "raised" | "skipped",
                "rel_error": float | None, "message": str | None, "diagnosis": str | None}, ...],
     "skipped": [{"context", "reason"}, ...],
     "descriptions": {context: one-line description}}

A "skipped" cell's message says why: the engine does not apply, the program
has no ground truth, or "no verdict" where finite differences cannot judge it
(their error bound is too wide, or a kink lies near the input).

Modules: `_ops` (the NumPy / tape / JAX namespaces programs are written
against), `_engine` (what an engine is), `_engines` (the registry, one entry
per engine; `_tape_engine`, `_jax_engine`, `_torch_engine` the entries),
`_programs` (the templates), `_inputs` (deterministic draws from the
rule's own specs, and further draws for contexts that need special shapes),
`_matrix` (running the cells), `_verdict` (judging one cell), `_call_kinks` (the
answers valid subgradients of the rule at each of its calls combine to), `_compare` (a
program under every engine, for code that branches on `within_gradient`).
"""

from gradguard.checker.contexts._compare import EngineView, compare_engines
from gradguard.checker.contexts._engine import Engine
from gradguard.checker.contexts._engines import ENGINES, REGISTRY, engine, engines_for
from gradguard.checker.contexts._matrix import Outcome, run_matrix, safety_matrix
from gradguard.checker.contexts._programs import CONTEXTS, Context, NotApplicable, Plan, Signature

__all__ = [
    "safety_matrix",
    "run_matrix",
    "Outcome",
    "ENGINES",
    "REGISTRY",
    "Engine",
    "engine",
    "engines_for",
    "CONTEXTS",
    "Context",
    "Plan",
    "Signature",
    "NotApplicable",
    "compare_engines",
    "EngineView",
]

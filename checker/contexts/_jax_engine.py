"""JAX as a safety-matrix column: the rule as a `jax.custom_vjp` (a NumPy rule adapted through
`to_custom_vjp`, a JAX rule's own function), each context program compiled whole, traced and run with
NumPy, or run op by op.

Four ways to run a program (the ``jax_column`` setting, `MODES`):

* ``"jit"``: ``jit(value_and_grad(program))``, the weights passed as arguments, so one compiled program
  serves every plan of the same (rule, context, structure, fixed arguments, shapes, dtypes): a rule's
  later checks in the process, and the moved inputs of a kink's evidence. Where ``jit`` cannot run a
  program that eager JAX can (a JAX rule branching in Python on its values), that rule's context runs
  eagerly from then on, recorded in `eager_fallbacks`, and so does one whose first compiled run does not
  agree with eager JAX (a rule taking another path on jit's tracers); an error the rule itself raised (in a NumPy
  rule's host callback) is the cell's answer as it is under eager JAX. Every call of the rule stays in
  the compiled program (its outputs are returned beside the value), so a call whose output is unused
  still runs, and raises, as it does eagerly.
* ``"traced"`` (NumPy rules): JAX traces ``value_and_grad(program)`` once per (rule, context, structure,
  fixed arguments, shapes, dtypes), the weights passed as arguments and the fixed arguments concrete as
  under eager JAX, so JAX decides everything the column is about (which cotangent
  reaches the rule's pullback, zeros for an unused output, how aliased uses accumulate), and the traced
  program's primitives run with NumPy (`gradguard.engines.jax_engine._numpy_eval`), the rule's host
  callbacks with read-only copies as JAX hands them: no XLA compilation. A program holding a primitive
  NumPy does not run here, or one JAX cannot trace this way, runs eagerly (recorded, as under jit). Every
  call of the rule is in the traced program (its outputs returned beside the value), so an unused call
  runs and raises as it does eagerly. A JAX rule's programs hold the rule's own primitives, which XLA
  runs: under "traced" they run eagerly.
* ``"eager"``: eager ``value_and_grad``, primitive by primitive: JAX compiles each primitive once per
  shape and keeps it for every later rule.
* ``"auto"`` (the default): traced for a NumPy rule; compiled for a JAX rule while JAX's persistent cache
  is in force, eager otherwise. Eager JAX compiles each primitive once per shape, tens of milliseconds
  each, and a module of NumPy rules meets hundreds of (primitive, shape) pairs: most of an eager matrix
  was compilation. A JAX rule's compiled program is stored in the persistent cache, and a later process
  loads it. Compiling a program costs several eager runs of it, and it saves about half an eager run
  each time it runs again: measured, it pays only from about the twelfth matrix of a rule in one
  process, which no ordinary run reaches; and JAX never stores a program with host callbacks (a NumPy
  rule's) in its persistent cache. Nor do a rule's cells depend on how often it was checked before in
  the process.

``bench/jax_column.py`` measures them, cold, warm and with JAX's persistent cache, and compares every
corpus rule's cells across modes; the trade-offs are in bench/RESULTS.md.

JAX arrays are immutable: a rule's declared mutation does not happen there (``runs_mutation=False``).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from gradguard.checker.contexts._engine import NOT_TORCH, Engine, RuleView, scalar, text
from gradguard.checker.contexts._ops import Ops, jax_ops
from gradguard.checker.contexts._programs import Plan
from gradguard.checker.specs import RuleSpec
from gradguard.checker.trees import copy_tree

__all__ = ["ENGINE", "MODES", "DEFAULT_MODE", "SETTING", "eager_fallbacks"]

MODES = ("auto", "jit", "eager", "traced")
DEFAULT_MODE = "auto"
_ROUNDING = 1e-9  # compiled against eager, relative: a program differing by more runs eagerly, as before
SETTING = "jax_column"  # the RuleView setting (check(jax_column=), [tool.gradguard] jax-column)

# The adapted rule per live rule (its host callbacks and output shapes are cached inside it).
_ADAPTED: "weakref.WeakKeyDictionary[RuleSpec, Any]" = weakref.WeakKeyDictionary()
# RuleSpec.extra keys: per plan key (`Plan.same`) its `_Program`; the contexts run eagerly because jit could
# not run them, and why. Kept on the rule (a compiled program holds the rule), so they go with it.
_PROGRAMS = "jax_column_programs"
_FALLBACKS = "jax_column_fallbacks"


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


def mode_of(view: RuleView) -> str:
    return view.settings.get(SETTING) or DEFAULT_MODE  # validated by the matrix (`Engine.settings`)


def eager_fallbacks(rule: RuleSpec) -> dict[str, str]:
    """The contexts of ``rule`` that ran eagerly because jit could not run them: {context: JAX's reason}."""
    return dict(rule.extra.get(_FALLBACKS, {}))


@dataclass
class _Program:
    """One context program of one rule under JAX: how often it ran, its compiled form, or why it runs eagerly."""

    matrices: int = 0  # the matrices (RuleViews) it ran in
    last: Any = None  # a weak reference to the last of them
    compiled: Any = None
    verified: bool = False  # its first compiled run agreed with eager JAX
    eager_because: str | None = None
    # Traced ("traced"): per (inputs' structure, shapes and dtypes, constants' values), the closed jaxpr and
    # its output tree.
    traced: dict[Any, Any] = field(default_factory=dict)


def _differentiate(view: RuleView, plan: Plan, ops: Ops) -> tuple[float, tuple]:
    mode = mode_of(view)
    if mode == "eager":
        return _eager(plan, ops)
    program = _program(view.rule, plan)
    if program.last is None or program.last() is not view:  # a kink's moved inputs run in the same matrix
        program.matrices, program.last = program.matrices + 1, weakref.ref(view)
    if program.eager_because is not None:
        return _eager(plan, ops)
    if mode in ("traced", "auto") and view.rule.kind != "jax":
        return _traced(view.rule, plan, ops, program)
    if mode == "traced" or (mode == "auto" and not _compiles_under_auto(view.rule)):
        return _eager(plan, ops)  # a JAX rule's programs hold its own primitives: XLA runs them
    if program.compiled is None:
        program.compiled = _compile(plan.program, ops, len(plan.inputs))
    import jax

    from gradguard.engines.jax_engine._relay import recover

    try:
        (value, _outputs), grads = program.compiled(plan.consts, *plan.inputs)
    except jax.errors.JaxRuntimeError as exc:
        original = recover(exc)
        if original is not None:
            raise original from None  # the rule raised in its host callback, as it would eagerly
        return _fall_back(view.rule, plan, ops, program, text(exc))
    except Exception as exc:  # noqa: BLE001 - jit could not trace it: eager JAX decides, as before
        return _fall_back(view.rule, plan, ops, program, text(exc))
    compiled = scalar(value), _numpy(grads)
    if program.verified:
        return compiled
    # Its first compiled run is checked against eager JAX: a rule may take another path on jit's tracers
    # (a fast path for traced values), and the column must answer what eager JAX answers.
    eager = _eager(plan, ops)  # raises where eager JAX raises
    if not _agree(compiled, eager):
        what = "its gradient" if _agree((compiled[0], ()), (eager[0], ())) else f"its value ({compiled[0]:.6g} against {eager[0]:.6g})"
        return _fall_back(view.rule, plan, ops, program, f"jit and eager JAX disagree on this program: {what}", eager)
    program.verified = True
    return eager


def _agree(a: tuple[float, tuple], b: tuple[float, tuple]) -> bool:
    """Whether two (value, gradients) agree to rounding (compiled and eager programs round differently)."""
    pairs = [(np.asarray(a[0]), np.asarray(b[0]))] + [(np.asarray(x), np.asarray(y)) for x, y in zip(a[1], b[1])]
    return len(a[1]) == len(b[1]) and all(
        x.shape == y.shape and np.allclose(x, y, rtol=_ROUNDING, atol=_ROUNDING * max(1.0, float(np.max(np.abs(y), initial=0.0))),
                                           equal_nan=True) for x, y in pairs)


def _compiles_under_auto(rule: RuleSpec) -> bool:
    """Under "auto", whether the rule's programs are compiled: for a JAX rule while JAX's persistent cache is
    in force (a later process loads them from there); never for a NumPy rule, whose programs hold host
    callbacks that JAX never stores, and never without the cache: compiling a program costs several eager
    runs of it and pays back only after about a dozen matrices of the rule in one process
    (bench/jax_column.py, bench/RESULTS.md)."""
    if rule.kind == "jax":
        from gradguard.engines.jax_engine._runtime import load

        return bool(load().config.jax_compilation_cache_dir)
    return False


def _program(rule: RuleSpec, plan: Plan) -> _Program:
    """The plan's `_Program`: one per (rule, `Plan.same`), or per program object where that is None."""
    store, key = (rule.extra.setdefault(_PROGRAMS, {}), plan.same) if plan.same is not None else (plan.memo, "jax")
    found = store.get(key)
    if found is None:
        found = store[key] = _Program()
    return found


def _with_outputs(program: Callable[..., Any], ops: Ops, n: int) -> Callable[..., Any]:
    """``value_and_grad`` of the program, every call's output returned beside the value (so that no
    transform drops a call whose output is unused: it runs, and raises, as it does eagerly)."""
    import jax

    def run(consts: Any, *xs: Any) -> Any:
        outputs: list[Any] = []

        def call(*args: Any) -> Any:
            y = ops.call(*args)
            outputs.append(y)
            return y

        return program(replace(ops, call=call), consts, *xs), outputs

    return jax.value_and_grad(run, argnums=tuple(range(1, n + 1)), has_aux=True)


def _compile(program: Callable[..., Any], ops: Ops, n: int) -> Any:
    import jax

    return jax.jit(_with_outputs(program, ops, n))


def _traced(rule: RuleSpec, plan: Plan, ops: Ops, program: _Program) -> tuple[float, tuple]:
    """The program traced by JAX, its primitives run with NumPy.

    The plan's weights (its constants: random arrays, and the loss's scales as Python floats) are arguments of
    the trace, as under "jit": a trace serves every plan of the same program with weights and inputs of the
    same structure, shapes and dtypes (a kink's moved inputs, widened bends, the rule checked again at another
    seed). A Python float stays weakly typed there, as it is as a constant, so a float32 output stays float32.
    The rule's fixed arguments are not inputs of the program (they are part of `Plan.same`, which picks the
    `_Program`), so they stay concrete values while JAX traces, as under eager JAX: one that sets an output's
    shape (a repeat count) must be a number there, not a tracer. Weights that are not all float or complex
    numbers and arrays are traced as constants, and that trace serves nothing else."""
    import jax

    from gradguard.engines.jax_engine._numpy_eval import Unsupported, evaluate
    from gradguard.engines.jax_engine._relay import RelayedError, raise_original

    consts = plan.consts
    try:
        flat, tree = jax.tree_util.tree_flatten(tuple(plan.inputs))
        weights, weights_tree = jax.tree_util.tree_flatten(consts)
        key = _trace_key(weights, weights_tree, flat, tree)
        found = program.traced.get(key) if key is not None else None
        if found is None:
            differentiated = _with_outputs(plan.program, ops, len(plan.inputs))
            if key is None:
                closed, shape = jax.make_jaxpr(lambda *xs: differentiated(consts, *xs), return_shape=True)(*plan.inputs)
            else:  # as `_compile`'s program takes them: its flat arguments are the weights', then the inputs'
                closed, shape = jax.make_jaxpr(differentiated, return_shape=True)(consts, *plan.inputs)
            found = (closed, jax.tree_util.tree_structure(shape))
            if key is not None:
                program.traced[key] = found
        closed, out_tree = found
        (value, _outputs), grads = jax.tree_util.tree_unflatten(out_tree, evaluate(closed, flat if key is None else weights + flat))
    except RelayedError as exc:
        raise_original(exc)  # the rule raised in its host callback, as it would eagerly
    except Unsupported as exc:
        return _fall_back(rule, plan, ops, program, f"run by JAX, not NumPy: {exc}")
    except Exception as exc:  # noqa: BLE001 - JAX could not trace it this way: eager JAX decides, as before
        return _fall_back(rule, plan, ops, program, text(exc))
    return scalar(value), _numpy(grads)


def _trace_key(weights: list[Any], weights_tree: Any, flat: list[Any], tree: Any) -> Any:
    """What a trace with the weights as arguments depends on: both trees' structures and each leaf's type (a
    Python float is weakly typed), shape and dtype; None where a weight is not a float or complex number or
    array (an integer may be used as a count, which a tracer cannot be)."""
    if not all(isinstance(w, (float, complex)) or (isinstance(w, (np.ndarray, np.generic)) and w.dtype.kind in "fc")
               for w in weights):
        return None
    return (weights_tree, tree, tuple((type(x), np.shape(x), np.result_type(x).str) for x in (*weights, *flat)))


def _fall_back(rule: RuleSpec, plan: Plan, ops: Ops, program: _Program, reason: str,
               eager: tuple[float, tuple] | None = None) -> tuple[float, tuple]:
    program.eager_because, program.compiled = reason, None
    name = plan.same[0] if plan.same is not None else getattr(plan.program, "__qualname__", "program")
    rule.extra.setdefault(_FALLBACKS, {})[name] = reason
    return eager if eager is not None else _eager(plan, ops)


def _eager(plan: Plan, ops: Ops) -> tuple[float, tuple]:
    import jax

    from gradguard.engines.jax_engine import relaying

    program = plan.program

    def run(consts: Any, *xs: Any) -> Any:
        return program(ops, consts, *xs)

    fn = jax.value_and_grad(run, argnums=tuple(range(1, len(plan.inputs) + 1)))
    # JAX arrays in, as a JAX program has: a custom_jvp's jvp gets the primals as they were given, and on a NumPy
    # array JAX's eager differentiation hands it a NumPy-backed value without `.at` (`x.at[0].set(...)` raised)
    inputs = tuple(jax.numpy.asarray(x) if isinstance(x, np.ndarray) else x for x in plan.inputs)
    with relaying():
        value, grads = fn(plan.consts, *inputs)
    return scalar(value), _numpy(grads)


def _numpy(grads: Any) -> tuple:
    return tuple(np.conj(np.asarray(g)) if np.iscomplexobj(g) else np.asarray(g) for g in grads)


ENGINE = Engine(
    name="jax",
    family="jax",
    label="JAX",
    ops=_ops,
    differentiate=_differentiate,
    runs_mutation=False,
    unused="zero",
    kinds=NOT_TORCH,
    complex_conventions=frozenset({"jax"}),
    complex_note="does not convert between the ChainRules and JAX conventions for complex tangents",
    settings={SETTING: MODES},
    flushes_subnormals=True,
)

"""Contract checks (GG1xx): the rule's structure, before any number is compared.

They run first. GG101, GG103 and GG104 gate the other families: when the
structure is wrong, numeric messages would only be noise.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from gradguard.checker.case import Case
from gradguard.checker.compare import at, close_to_reference, first_mismatch, where
from gradguard.checker.checks._state import argument_labels, note_primal_irreproducible
from gradguard.checker.checks.registry import Problem, Skip, check
from gradguard.checker.inputs import show
from gradguard.checker.trees import copy_tree, describe, leaves, same_structure, with_article
from gradguard.engines.values import differentiable

__all__: list[str] = []


@check(
    "GG101",
    family="contract",
    title="forward raises or does not return an (output, pullback) pair",
    gates="forward",
    given="""
        def square(x):
            return x * x
    """,
    broken="""
        @rrule(square, arrays(shape=(3,)))
        def square_rrule(x):
            return x * x          # the output alone, no pullback
    """,
    fixed="""
        @rrule(square, arrays(shape=(3,)))
        def square_rrule(x):
            return x * x, lambda ybar: (2 * x * ybar,)
    """,
)
def returns_pair(case: Case) -> Iterable[Problem]:
    """An rrule must return a pair ``(output, pullback)`` where ``pullback`` is callable. Anything else (the
    output alone, a pullback that is not callable, a list of three things) cannot be used by any AD engine.
    A forward pass that raises is reported here too: no pair could be made for that input."""
    call = case.first_call()
    if call.is_pair:
        yield from _undeclarable_outputs(case, call.output)
        return
    result = call.result
    if isinstance(result, tuple) and len(result) == 2:
        actual = f"(output, {describe(result[1])})"
        fix = "The second element must be the pullback function: return y, pullback."
    else:
        actual = describe(result)
        fix = "Return a tuple (y, pullback), where pullback(ybar) returns one tangent per argument."
    yield Problem(
        message=f"the rrule {case.rule.name} must return a pair (output, pullback), but returned {actual}.",
        expected="(output, callable pullback)",
        actual=actual,
        fix=fix,
    )


def _undeclarable_outputs(case: Case, y: Any) -> Iterable[Problem]:
    """A ``nondiff_outputs=`` declaration that names no output of this one: a single output, or a position past
    the tuple's end. Checked once the output is known; the other checks would hand a cotangent to every output."""
    declared = sorted(case.rule.nondiff_outputs)
    if not declared:
        return
    count = len(y) if isinstance(y, (tuple, list)) else None
    missing = [k for k in declared if count is None or k >= count]
    if not missing:
        return
    shown = f"nondiff_outputs={tuple(declared)!r}"
    actual = (f"a tuple of {count} output(s), positions 0 to {count - 1}" if count
              else f"{with_article(describe(y))}, not a tuple of outputs")
    yield Problem(
        message=f"the declaration of {case.rule.name} says {shown}, but the rule returns {actual}: position(s) "
                f"{', '.join(map(str, missing))} name no output.",
        location="declaration",
        expected=f"a tuple output with position(s) {', '.join(map(str, missing))}",
        actual=actual,
        fix="nondiff_outputs names positions in the tuple the rule returns as its output: give the positions of "
            "the outputs that programs never differentiate, or remove the option.",
    )


@check(
    "GG102",
    family="contract",
    title="rrule's primal output differs from primal(*args)",
    given="""
        MASK = np.array([2.0, 0.0, 2.0, 0.0])     # inverted dropout's mask, as in training

        def dropout_eval(x):
            return x                                  # at inference dropout is the identity
    """,
    broken="""
        @rrule(dropout_eval, arrays(shape=(4,)))
        def dropout_rrule(x):
            y = x * MASK          # training branch: not what dropout_eval computes
            return y, lambda ybar: (ybar * MASK,)
    """,
    fixed="""
        @rrule(dropout_eval, arrays(shape=(4,)))
        def dropout_rrule(x):
            y = dropout_eval(x)   # the forward pass is the primal
            return y, lambda ybar: (ybar,)
    """,
)
def forward_is_primal(case: Case) -> Iterable[Problem]:
    """The first element an rrule returns must equal what the primal function computes on the same input.
    A rule whose forward pass branches on "am I being differentiated?" (a training flag, ``within_gradient``)
    makes AD differentiate a different function from the one users run, and different AD systems then
    disagree on the gradient of the same program."""
    y_rule = case.first_call().output
    y_primal = case.input_primal()  # kept for later checks of this input where it has y_rule's exact bits
    if not same_structure(y_rule, y_primal):
        yield Problem(
            message=f"the rrule's output is a {describe(y_rule)} but the primal returns a {describe(y_primal)}.",
            expected=describe(y_primal),
            actual=describe(y_rule),
            fix="Return exactly what the primal returns as the first element of the pair.",
        )
        return
    tol = case.tol
    asked = False  # whether the primal was asked to reproduce itself (once per input, at the first differing value)
    for k, (a, b) in enumerate(zip(leaves(y_rule), leaves(y_primal))):
        if a is None or b is None:  # an empty slot of the output (JAX's None subtree): both empty, or not the same
            if a is not b:
                yield Problem(
                    message=f"the rrule's output {k} is {describe(a)} but the primal's is {describe(b)}.",
                    location=f"output {k}",
                    expected=describe(b),
                    actual=describe(a),
                    fix="Return exactly what the primal returns as the first element of the pair.",
                )
            continue
        a_arr, b_arr = np.asarray(a), np.asarray(b)
        if a_arr.shape != b_arr.shape:
            yield Problem(
                message=f"the rrule's output has shape {a_arr.shape} but the primal's has shape {b_arr.shape}.",
                location=f"output {k}" if not isinstance(y_rule, np.ndarray) else None,
                expected=str(b_arr.shape),
                actual=str(a_arr.shape),
                fix="The forward pass must compute the primal itself; call the primal inside the rrule.",
            )
            continue
        # NumPy scalars in the message, as before: show() gives them 6 significant digits (a float: its repr if short).
        bad = first_mismatch([(k, a_arr, b_arr)], close_to_reference(tol), as_python=False)
        if bad is not None:
            if not asked:
                _primal_reproduces(case, y_primal)
                asked = True
            yield Problem(
                message=(
                    f"the rrule's forward output differs from primal(*args)"
                    f"{at(bad.index)}: {show(bad.got)} vs {show(bad.want)}. "
                    "The rule computes a different function from the one it claims to differentiate."
                ),
                location=where("output", bad.index),
                expected=show(b_arr),
                actual=show(a_arr),
                fix=primal_fix(case.rule),
            )


PRIMAL_TRIES = 3  # _primal_reproduces: more calls of the primal, each compared with the first, whole output by output


def _primal_reproduces(case: Case, first: Any) -> None:
    """Raise Skip where the primal, called again on fresh copies of the input (up to PRIMAL_TRIES times), gives
    another output than ``first``: a function drawn at random (PyEPO's perturbed optimizers sample their noise from a
    generator that keeps its state; a discrete solution may repeat at one element by chance, so whole outputs are
    compared) has no single value for the forward to match, and GG102 said the rule computes another function. For
    the whole rule, and noted (`note_primal_irreproducible`), so that the contexts' value comparisons (GG503) say so
    too."""
    firsts = leaves(first)
    for _ in range(PRIMAL_TRIES):
        try:
            again = leaves(case.rule.primal(*case.fresh()))
        except Exception:  # noqa: BLE001 - the primal raised the second time: nothing established about it
            return
        if len(again) != len(firsts):
            return
        for k, (a, b) in enumerate(zip(firsts, again)):
            if a is None or b is None or np.shape(a) != np.shape(b):
                continue
            bad = first_mismatch([(k, np.asarray(b), np.asarray(a))], close_to_reference(case.tol), as_python=True)
            if bad is None:
                continue
            why = (f"the primal called twice on identical copies of the input gave output {k}{at(bad.index)} as "
                   f"{show(bad.want)}, then {show(bad.got)}")
            note_primal_irreproducible(why)
            raise Skip(f"the primal does not reproduce its own value ({why}), so there is no single value for the "
                       "rule's forward to match", rule_wide=True)


def primal_fix(rule: Any) -> str:
    """How to make a rule's forward output its primal's, in the terms of the rule's kind: a custom_jvp's jvp rule
    returns the primal output reverse mode gets (JAXtronomy's hyp2f1 computes it from a 100-term series where the
    function sums up to 500 terms), a custom_vjp's fwd returns it, an rrule's forward pass computes it."""
    from gradguard.checker.jax_rules import CUSTOM_JVP

    if rule.kind == "jax" and rule.extra.get(CUSTOM_JVP):
        # ott's norm returned jax.jvp(norm, (clean_x,), ...)'s primal, at ones where x = 0: 2.0 under AD, 0 when run
        return ("Make the jvp rule's primal output the function's own value: return what the function computes (call "
                "it, or compute it by the same formula) at the input itself, as primal_out, not a value from another "
                "formula (a shorter series, a cheaper approximation), at a substituted input (the safe x of a "
                "double-where), or a branch on being differentiated.")
    if rule.kind == "jax":
        return ("Make fwd return the function's own value as its output (call the function, or compute it by the same "
                "formula): not a value from another formula or a branch on being differentiated.")
    return "Make the forward pass compute the primal (no branch on training flags or within_gradient)."


@check(
    "GG103",
    family="contract",
    title="pullback raises or returns the wrong number of tangents",
    gates="pullback",
    given="""
        def mul(a, b):
            return a * b
    """,
    broken="""
        @rrule(mul, arrays(shape=(3,)), arrays(shape=(3,)))
        def mul_rrule(a, b):
            return a * b, lambda ybar: (ybar * b,)          # forgot b's tangent
    """,
    fixed="""
        @rrule(mul, arrays(shape=(3,)), arrays(shape=(3,)))
        def mul_rrule(a, b):
            return a * b, lambda ybar: (ybar * b, ybar * a)
    """,
)
def tangent_count(case: Case) -> Iterable[Problem]:
    """The pullback must return a tuple with exactly one tangent per positional argument of the primal, with
    ``None`` for arguments that have no derivative. A missing or extra entry shifts every tangent onto the
    wrong argument in the engine that consumes it. This is the first check that calls the pullback, so a
    pullback that raises on the drawn input and cotangent is reported here, with the exception, and the checks
    that need its tangents do not run."""
    t = case.first_pullback().tangents
    n = case.nargs
    if isinstance(t, (tuple, list)) and len(t) == n:
        return
    got = f"{len(t)}" if isinstance(t, (tuple, list)) else f"{with_article(describe(t))} instead of a tuple"
    yield Problem(
        message=f"the pullback of {case.rule.name} must return one tangent per argument ({n}), but returned {got}.",
        expected=f"tuple of {n}",
        actual=describe(t),
        fix="Return a tuple with one entry per argument; use None for non-differentiable ones.",
    )


@check(
    "GG104",
    family="contract",
    title="a tangent's shape differs from its argument's",
    gates="pullback",
    given="""
        def total(x):
            return x.sum()
    """,
    broken="""
        @rrule(total, arrays(shape=(2, 3)))
        def total_rrule(x):
            return x.sum(), lambda ybar: (np.full(x.size, ybar),)   # flat, not (2, 3)
    """,
    fixed="""
        @rrule(total, arrays(shape=(2, 3)))
        def total_rrule(x):
            return x.sum(), lambda ybar: (np.full(x.shape, ybar),)
    """,
)
def tangent_shapes(case: Case) -> Iterable[Problem]:
    """Each tangent must have the shape of its argument. A flattened or broadcast tangent may happen to add
    up correctly in one program and fail, or silently broadcast into the wrong gradient, in another."""
    pulled = case.first_pullback()
    t = pulled.tangents
    if not isinstance(t, (tuple, list)) or len(t) != case.nargs:
        return  # GG103's finding
    for i in case.diff_positions:
        if t[i] is None:
            continue
        want, got = np.shape(case.args[i]), np.shape(t[i])
        if want != got:
            yield Problem(
                message=f"the tangent for {argument_labels(case)[i]} has shape {got}, but the argument has shape {want}.",
                location=f"argument {i}",
                expected=str(want),
                actual=str(got),
                fix=f"Return a tangent shaped like {argument_labels(case)[i]} (sum over broadcast axes, reshape flattened results).",
            )
    if case.rule.kind == "jax":
        yield from _fixed_cotangent_shapes(case, t, pulled.ybar)


def _fixed_cotangent_shapes(case: Case, t: tuple[Any, ...] | list[Any], ybar: Any) -> Iterable[Problem]:
    """A JAX rule's cotangent for a float argument its declaration fixes (``constant(2.3)``) but that is not among
    the custom_vjp's ``nondiff_argnums``: JAX checks its shape against the argument's whatever the spec says
    (jax-fluids' THINC functions return a cotangent shaped like the volume fractions for a Python float slope, and
    every ``jax.grad`` through them raises). Reported where the shapes differ and JAX's own vjp of the rule at the
    input raises; its value is not judged (GG106)."""
    for i in range(case.nargs):
        arg = case.args[i]
        if i in case.diff_positions or t[i] is None or not _jax_tangent_space(arg) \
                or not (isinstance(arg, (np.ndarray, np.generic, float, complex)) or hasattr(arg, "shape")):
            continue
        want, got = np.shape(arg), np.shape(t[i])
        if want == got:
            continue
        raised = _jax_refuses(case, ybar)
        if raised is None:
            return
        label = argument_labels(case)[i]
        yield Problem(
            message=(f"the cotangent bwd returns for {label} has shape {got}, but the argument has shape {want}: "
                     f"{label} is fixed in this declaration, but it is not among the custom_vjp's nondiff_argnums, so "
                     f"JAX checks the shape of bwd's cotangent for it, and jax.vjp of the rule at this input raises "
                     f"{raised}"),
            location=f"argument {i}",
            expected=str(want),
            actual=str(got),
            fix=(f"Return a cotangent shaped like {label} (sum over its broadcast axes, or jnp.zeros_like for an "
                 "argument that gets none), or list it in nondiff_argnums if it is never differentiated."),
        )


def _jax_refuses(case: Case, ybar: Any) -> str | None:
    """What JAX raises about shapes taking the vjp of the rule's custom_vjp at the input with the first pullback's
    cotangent (the first line, cut at 300 characters and ending in a full stop); None where it raises nothing, or
    something else."""
    from gradguard.checker.checks._jax import first_line
    from gradguard.engines.jax_engine import reference_vjp

    nondiff = tuple(i for i in range(case.nargs) if i not in case.diff_positions)
    try:
        reference_vjp(case.rule.jax_fn, case.fresh(), copy_tree(ybar), nondiff=nondiff)
    except Exception as exc:  # noqa: BLE001 - JAX's own refusal is what is reported
        if "shape" not in str(exc):  # refused for another reason (not traceable): GG601 and the contexts say so
            return None
        text = first_line(exc)
        text = text if len(text) <= 300 else text[:297] + "..."
        return text if text.endswith(".") else text + "."
    return None


@check(
    "GG105",
    family="contract",
    title="a tangent's dtype differs from its argument's",
    given="""
        def scale(x):
            return 2 * x
    """,
    broken="""
        @rrule(scale, arrays(shape=(3,), dtype="float32"))
        def scale_rrule(x):
            return 2 * x, lambda ybar: (np.full(x.shape, 2.0) * ybar,)   # float64 tangent
    """,
    fixed="""
        @rrule(scale, arrays(shape=(3,), dtype="float32"))
        def scale_rrule(x):
            return 2 * x, lambda ybar: ((2 * ybar).astype(x.dtype),)
    """,
)
def tangent_dtypes(case: Case) -> Iterable[Problem]:
    """Each tangent must have its argument's dtype (float32 in, float32 out; a real argument gets a real
    tangent). Dtype drift silently promotes whole models to float64 (slow, memory-hungry) or, for a complex
    tangent of a real argument, leaks an imaginary part the engine may drop or propagate."""
    t = case.first_pullback().tangents
    if not isinstance(t, (tuple, list)) or len(t) != case.nargs:
        return
    for i in case.diff_positions:
        if t[i] is None:
            continue
        arg = case.args[i]
        if not isinstance(arg, np.ndarray):
            # Python and NumPy scalars: any float-like tangent is fine, but not a complex one for a real number
            # (pyadjoint's cbrt adjoint, x ** (1/3) differentiated as the principal root, gives one for x < 0)
            real = isinstance(arg, (float, int, np.floating, np.integer)) and not isinstance(arg, bool)
            if real and (isinstance(t[i], (complex, np.complexfloating))
                         or isinstance(t[i], np.ndarray) and t[i].dtype.kind == "c"):
                got = np.asarray(t[i]).dtype
                yield Problem(
                    message=(f"the tangent for {argument_labels(case)[i]} is complex ({got}), but the argument is "
                             f"the real {describe(arg)} {show(arg)}."),
                    location=f"argument {i}",
                    expected="a real number",
                    actual=show(t[i]),
                    fix="Return a real tangent for a real argument (np.real(...) where the complex part is rounding, "
                        "or the real formula where it is not).",
                )
            continue
        got = np.asarray(t[i]).dtype
        if got != arg.dtype:
            yield Problem(
                message=f"the tangent for {argument_labels(case)[i]} has dtype {got}, but the argument has dtype {arg.dtype}.",
                location=f"argument {i}",
                expected=str(arg.dtype),
                actual=str(got),
                fix=f"Cast the tangent: .astype({arg.dtype.name}) (a real argument needs a real tangent)." + _x64_fix(case, arg.dtype, got),
            )


def _x64_fix(case: Case, want: np.dtype, got: np.dtype) -> str:
    """For a JAX rule whose float32 (or float16) argument gets a 64-bit tangent: why that happens only with JAX's
    64-bit types on, as gradguard runs it (a probe's truncated SVD built jnp.eye(n) without a dtype)."""
    if case.rule.kind != "jax" or want.name not in ("float16", "float32", "complex64") \
            or got.name not in ("float64", "complex128"):
        return ""
    return (f" gradguard runs JAX with 64-bit types on (jax_enable_x64), as programs that use float64 do: there an "
            f"array made without a dtype (jnp.eye(n), jnp.zeros(n), jnp.asarray(1.0)) is float64 and promotes the "
            f"{want.name} values it meets, which JAX's default 32-bit mode hides. Give such arrays the argument's dtype "
            f"(jnp.eye(n, dtype=x.dtype)).")


def _jax_tangent_space(value: Any) -> bool:
    """Whether JAX gives an argument a tangent space: a float or complex leaf in it, NumPy's or JAX's own arrays (a
    ``constant(jnp.ones(3))``) and numbers alike, alone or in a pytree."""
    from gradguard.engines.jax_engine._runtime import load

    jax = load()
    return any(not isinstance(leaf, (bool, np.bool_)) and np.result_type(leaf).kind in "fc"
               for leaf in jax.tree_util.tree_leaves(value) if hasattr(leaf, "dtype") or isinstance(leaf, (float, complex)))


@check(
    "GG106",
    family="contract",
    title="a non-differentiable argument gets a non-None tangent",
    given="""
        def power(x, n):
            return x**n
    """,
    broken="""
        @rrule(power, arrays(shape=(3,)), constant(2))
        def power_rrule(x, n):
            return x**n, lambda ybar: (n * x ** (n - 1) * ybar, 0.0)   # tangent for the integer n
    """,
    fixed="""
        @rrule(power, arrays(shape=(3,)), constant(2))
        def power_rrule(x, n):
            return x**n, lambda ybar: (n * x ** (n - 1) * ybar, None)
    """,
)
def nondiff_gets_none(case: Case) -> Iterable[Problem]:
    """Arguments declared non-differentiable (``nondiff=``, ``constant(...)``, integers, flags) must get
    ``None`` from the pullback. A number there is accumulated by engines into something that has no
    tangent space, or hides a wrong argument order. In a ``jax_rule`` a float argument outside
    ``nondiff_argnums`` has a tangent space in JAX whatever its spec says, and a custom_vjp's bwd must return a
    cotangent for it (``zeros_like`` is the idiom for none): its value is not judged here."""
    t = case.first_pullback().tangents
    if not isinstance(t, (tuple, list)) or len(t) != case.nargs:
        return
    diff = set(case.diff_positions)
    for i in range(case.nargs):
        if i in diff or t[i] is None:
            continue
        if case.rule.kind == "jax" and _jax_tangent_space(case.args[i]):
            # JAX gives every float argument outside nondiff_argnums (which the adapter binds) a tangent space: a
            # custom_vjp's bwd must return a cotangent for it, zeros_like(arg) being the idiom for "none"
            # (JAX-GalSim's kv for its order), and the spec's constant() only narrows what is checked
            continue
        why = "declared nondiff" if i in case.rule.nondiff else f"{with_article(describe(case.args[i]))}, which has no tangent"
        yield Problem(
            message=f"{argument_labels(case)[i]} is {why}, so its tangent must be None, but the pullback returned {show(t[i])}.",
            location=f"argument {i}",
            expected="None",
            actual=show(t[i]),
            fix=f"Return None in position {i} of the pullback's tuple.",
        )


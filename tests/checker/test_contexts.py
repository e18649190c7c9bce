"""Contexts and the safety matrix: the seed programs, aliasing, within_gradient, GG501-GG503, the labelled
corpus, and what happens when a rule or a context program fails."""

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from gradguard import engines
from gradguard.checker import arrays, check, rrule
from gradguard.checker.contexts import CONTEXTS, ENGINES, Context, Plan, compare_engines, run_matrix, safety_matrix
from gradguard.checker.contexts._inputs import draw_inputs
from gradguard.checker.loader import load_module, rules_in
from gradguard.checker.render import render_text
from gradguard.engines.errors import TraceError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CORPUS = sorted((ROOT / "tests" / "corpus").glob("context_*.py"))
# The torch column is in every NumPy rule's matrix where PyTorch is installed, and absent (not an error) where not.
TORCH = ["torch"] if importlib.util.find_spec("torch") else []


def _rule(path: Path, name: str):
    return next(r for r in rules_in(load_module(path)) if r.name == name)


def _cells(matrix):
    return {(c["context"], c["engine"]): c for c in matrix["cells"]}


def _statuses(matrix, context):
    cells = _cells(matrix)
    return [cells[(context, e)]["status"] for e in matrix["engines"]]


@pytest.fixture(scope="module")
def seed_matrix():
    return safety_matrix(_rule(EXAMPLES / "mutation_in_context.py", "addone_rrule"), seed=0)


# ---- the matrix's format --------------------------------------------------------------------------


def test_matrix_json_has_the_documented_format(seed_matrix):
    m = seed_matrix
    assert set(m) == {"contexts", "engines", "cells", "skipped", "descriptions"}
    # a NumPy rule declaring no unused_cotangent is checked under "zeros": the tape never hands it None
    assert m["engines"] == ["tape[zero]", "tape[skip]", "jax", *TORCH]
    assert [e for e in ENGINES if e != "tape[none]"] == ["tape[zero]", "tape[skip]", "jax", "torch"]
    assert m["contexts"] == ["output-used", "output-unused", "captured-before", "read-after", "called-twice",
                             "fan-out", "strided-view"]
    assert len(m["cells"]) == len(m["contexts"]) * len(m["engines"])
    for cell in m["cells"]:
        assert set(cell) == {"context", "engine", "status", "rel_error", "message", "diagnosis"}
        assert cell["status"] in {"right", "wrong", "raised", "skipped"}
        assert cell["rel_error"] is None or isinstance(cell["rel_error"], float)
    assert {s["context"] for s in m["skipped"]} == {"same-array-twice", "transposed-alias", "transposed-view",
                                                    "tied-weights"}
    assert all(s["reason"] for s in m["skipped"])
    assert set(m["descriptions"]) == {c.name for c in CONTEXTS}


def test_matrix_is_deterministic_for_a_seed_and_inputs_are_not_degenerate():
    rule = _rule(EXAMPLES / "mutation_in_context.py", "addone_rrule")
    assert safety_matrix(rule, seed=3) == safety_matrix(rule, seed=3)
    args, args2, _ = draw_inputs(rule, seed=0)
    assert np.unique(args[0]).size == 3 and args2 is not None
    assert not np.array_equal(args[0], args2[0])


# ---- acceptance on the seeds ----------------------------------------------------------------------


def test_seed_addone_passes_every_isolation_check():
    report = check(_rule(EXAMPLES / "mutation_in_context.py", "addone_rrule"), ignore="GG5", max_examples=5)
    assert report.rules[0].findings == [] and report.rules[0].verdict == "pass"


def test_seed_addone_is_wrong_captured_before_and_read_after_under_the_tape(seed_matrix):
    cells = _cells(seed_matrix)
    for context in ("captured-before", "read-after"):
        for engine in ("tape[zero]", "tape[skip]"):
            cell = cells[(context, engine)]
            assert cell["status"] == "wrong" and cell["rel_error"] > 0.01
            assert "`dot` (step 0) captured argument 0 by reference; `addone_`" in cell["diagnosis"]
            assert "mutated it in place before the backward pass" in cell["diagnosis"]
    for context in ("output-used", "output-unused", "called-twice", "fan-out", "strided-view"):
        assert _statuses(seed_matrix, context)[:2] == ["right"] * 2
    jax_used = cells[("output-used", "jax")]
    assert jax_used["status"] == "raised" and "AdapterError: rule addone_ mutates its argument 0" in jax_used["message"]


@pytest.mark.parametrize("name", ["addone_safe_rrule", "scaled_sum_rrule"])
def test_safe_version_and_private_cache_are_right_everywhere(name):
    m = safety_matrix(_rule(EXAMPLES / "mutation_in_context.py", name))
    assert {c["status"] for c in m["cells"]} == {"right"}


def test_gg501_names_the_context_engines_error_diagnosis_and_the_fix():
    report = check(_rule(EXAMPLES / "mutation_in_context.py", "addone_rrule"), select="GG5")
    result = report.rules[0]
    assert [f.check_id for f in result.findings] == ["GG501", "GG501"]
    first = result.findings[0]
    assert first.location == "context captured-before"
    assert first.message.startswith(
        "in context `captured-before` (dot(x, x) captures the input before the call; the output is used) the "
        f"gradient of the program is wrong under {', '.join(['tape[zero]', 'tape[skip]', *TORCH])} (relative error "
    )
    assert "Watch mode: `dot` (step 0) captured argument 0 by reference; `addone_` (step 2) mutated it" in first.message
    assert "(captured-before, read-after)" in first.fix and "copy before mutating (a = a.copy())" in first.fix
    assert "return a new array instead of mutating" in first.fix
    assert result.safety_matrix["contexts"][2] == "captured-before"
    text = render_text(report)
    assert "Safety matrix (contexts x engines):" in text and "WRONG (" in text


def test_aliasing_examples_from_the_seed():
    path = EXAMPLES / "aliasing.py"
    m = safety_matrix(_rule(path, "mul_rrule"))
    assert {"same-array-twice", "transposed-alias", "tied-weights"} <= set(m["contexts"])
    assert {c["status"] for c in m["cells"]} == {"right"}

    report = check(_rule(path, "mul_alias_rrule"), select="GG5")
    (finding,) = report.rules[0].findings
    assert finding.check_id == "GG502" and finding.location == "context same-array-twice"
    assert "the same array in two argument slots: rule(x, x)" in finding.message
    assert _statuses(report.rules[0].safety_matrix, "transposed-alias") == ["right"] * (3 + len(TORCH))

    report = check(_rule(path, "matvec_buffer_rrule"), select="GG502")
    assert [(f.check_id, f.location) for f in report.rules[0].findings] == [("GG502", "context tied-weights")]
    assert report.rules[0].safety_matrix is not None  # computed for GG502 alone


def test_select_and_ignore_are_respected_and_the_matrix_is_computed_once(monkeypatch):
    from gradguard.checker.checks import context as context_checks

    calls = []
    real = context_checks.run_matrix
    monkeypatch.setattr(context_checks, "run_matrix", lambda *a, **k: calls.append(1) or real(*a, **k))
    rule = _rule(EXAMPLES / "mutation_in_context.py", "addone_rrule")
    report = check(rule, select="GG5", ignore="GG501")
    assert report.rules[0].findings == [] and calls == [1]
    assert report.rules[0].checks_run == ["GG502", "GG503"] or "GG502" in str(report.rules[0].checks_skipped)


def total(a):
    return a.sum()


@rrule(total, arrays(shape=(3,)))
def total_ones_rrule(a):
    return a.sum(), lambda ybar: (None,) if ybar is None else (np.ones(a.shape),)  # wrong alone (GG202)


def test_a_rule_wrong_alone_gets_one_finding_for_the_baseline_not_one_per_context():
    result = check(total_ones_rrule, select="GG5").rules[0]
    assert [(f.check_id, f.location) for f in result.findings] == [("GG501", "context output-used")]
    assert "wrong even in the simplest program" in result.findings[0].fix
    assert _statuses(result.safety_matrix, "fan-out") == ["wrong"] * (3 + len(TORCH))  # the matrix shows every cell


def cmul(a, b):
    return a * b


@rrule(cmul, arrays(shape=(2,), dtype="complex128"), arrays(shape=(2,), dtype="complex128"))
def cmul_rrule(a, b):
    return a * b, lambda g: (None, None) if g is None else (g * np.conj(b), g * np.conj(a))


def test_complex_rules_skip_the_engine_whose_adapter_has_the_other_convention():
    m = safety_matrix(cmul_rrule)
    cells = _cells(m)
    assert _statuses(m, "output-used") == ["right", "right", "skipped"] + ["skipped"] * len(TORCH)
    assert "ChainRules and JAX conventions" in cells[("output-used", "jax")]["message"]
    assert {c["status"] for c in m["cells"] if c["engine"].startswith("tape")} == {"right"}
    if TORCH:
        assert "PyTorch's convention for complex gradients" in cells[("output-used", "torch")]["message"]


# ---- within_gradient ------------------------------------------------------------------------------


def test_seed_within_gradient_program_under_each_engine():
    def program(xp, x):
        return x * x if engines.within_gradient(x) else x

    primal, tape, jax = compare_engines(program, 2.0)
    assert (primal.value, round(primal.grad[0], 6)) == (2.0, 1.0)  # what users run
    assert (tape.value, tape.grad[0]) == (4.0, 4.0)  # Zygote's and Diffractor's answer
    assert (jax.value, jax.grad[0]) == (4.0, 4.0)
    assert not engines.within_gradient(np.ones(2))


def test_within_gradient_recognises_jax_tracers_without_the_engine_loaded_first():
    import jax

    seen = []
    jax.grad(lambda x: seen.append(engines.within_gradient(x)) or x * 2.0)(1.0)
    assert seen == [True]


def test_rule_whose_primal_branches_on_within_gradient_is_caught_by_gg102_and_gg503():
    report = check(_rule(EXAMPLES / "within_gradient.py", "square_when_differentiated_rrule"), select="GG102,GG5",
                   max_examples=5)
    ids = [f.check_id for f in report.rules[0].findings]
    assert ids == ["GG102", "GG503"]
    gg503 = report.rules[0].findings[1]
    assert "the program computes a different value under AD than when run" in gg503.message
    assert "within_gradient" in gg503.fix


# A forward that reads memory through as_strided with strides computed from the shape (a from-scratch conv's window
# extraction): right on a C-contiguous array, other numbers on a view. GG503 says the values differ only where the
# contexts pass views, and its fix names the layout; the twin that takes a contiguous copy first passes.
def _pair_sums(a, contiguous):
    if contiguous:
        a = np.ascontiguousarray(a)
    n, m = a.shape
    item = a.itemsize
    windows = np.lib.stride_tricks.as_strided(a, shape=(n, m - 1, 2), strides=(m * item, item, item))
    return windows.sum(axis=-1)


def pair_sums(a):
    return _pair_sums(a, contiguous=False)


def pair_sums_contiguous(a):
    return _pair_sums(a, contiguous=True)


def _pair_sums_pullback(shape):
    def pullback(g):
        t = np.zeros(shape)
        t[:, :-1] += g
        t[:, 1:] += g
        return (t,)

    return pullback


@rrule(pair_sums, arrays(shape=(3, 4)))
def pair_sums_assumed_strides(a):
    return pair_sums(a), _pair_sums_pullback(a.shape)


@rrule(pair_sums_contiguous, arrays(shape=(3, 4)))
def pair_sums_own_copy(a):
    return pair_sums_contiguous(a), _pair_sums_pullback(a.shape)


def test_a_forward_that_assumes_c_strides_gets_gg503_naming_the_views():
    (f,) = [f for f in check(pair_sums_assumed_strides, select="GG503", max_examples=5).rules[0].findings]
    assert re.fullmatch(
        r"the program computes a different value under AD than when run, so AD differentiates a different function "
        r"from the one users run: `strided-view`: .* when run; `transposed-view`: .* when run\. The values differ "
        r"only in the contexts that pass arguments as non-contiguous views \(strided or transposed\); the other "
        r"contexts' values agree\.", f.message), f.message
    assert "np.ascontiguousarray(x)" in f.fix and "within_gradient" not in f.fix


def test_the_same_forward_on_a_contiguous_copy_passes_gg503():
    assert check(pair_sums_own_copy, select="GG503", max_examples=5).passed


# ---- bad input ------------------------------------------------------------------------------------


def contiguous_only(a):
    if not a.flags.c_contiguous:
        raise ValueError("contiguous_only needs a C-contiguous array")
    return a * 3.0


@rrule(contiguous_only, arrays(shape=(4,)))
def contiguous_only_rrule(a):
    y = contiguous_only(a)
    return y, lambda g: (None,) if g is None else (3.0 * g,)


def test_a_rule_that_raises_in_a_context_marks_the_cell_raised_and_the_run_goes_on():
    m = safety_matrix(contiguous_only_rrule)
    cells = _cells(m)
    raised = cells[("strided-view", "tape[zero]")]
    assert raised["status"] == "raised"
    assert raised["message"] == "ValueError: contiguous_only needs a C-contiguous array"
    jax = cells[("strided-view", "jax")]  # JAX hands the rule a contiguous copy, but users' program raised
    assert jax["status"] == "skipped" and jax["message"].startswith("no ground truth: the program raised under plain")
    assert _statuses(m, "output-used") == ["right"] * (3 + len(TORCH)) == _statuses(m, "fan-out")


def test_an_unsupported_numpy_call_in_a_context_is_a_trace_error_naming_it():
    def make(sig, rng):
        def program(ops, consts, *xs):
            return ops.xp.sum(np.cumsum(ops.call(*sig.assemble(sig.by_position(xs)))))

        return Plan(sig.inputs(), (), program)

    broken = Context("cumsum-after", "a program using an operation the tape lacks", make)
    with pytest.raises(TraceError, match=r"np\.cumsum is not supported on Tracked values"):
        run_matrix(contiguous_only_rrule, contexts=[broken], engines=["tape[zero]"])


def test_unknown_context_and_engine_names_are_refused():
    with pytest.raises(ValueError, match="known contexts are output-used"):
        safety_matrix(contiguous_only_rrule, contexts=["nope"])
    with pytest.raises(ValueError, match=r"engines are tape\[zero\]"):
        safety_matrix(contiguous_only_rrule, engines=["pytorch"])


# ---- the labelled corpus --------------------------------------------------------------------------


def _corpus_rules():
    for path in CORPUS:
        module = load_module(path)
        for rule in rules_in(module):
            yield pytest.param(path, rule.name, module.LABELS[rule.name], id=f"{path.stem}:{rule.name}")


def test_corpus_has_the_promised_rules():
    labels = {name: label for path in CORPUS for name, label in load_module(path).LABELS.items()}
    assert sum(1 for label in labels.values() if label["expect"]) >= 12
    safe_mutating = load_module(ROOT / "tests" / "corpus" / "context_safe_mutation.py").LABELS
    assert len(safe_mutating) >= 5 and all(label["expect"] == [] for label in safe_mutating.values())


@pytest.mark.parametrize("path, name, label", list(_corpus_rules()))
def test_corpus_rule_context_findings_match_its_label(path, name, label):
    result = check(_rule(path, name), select="GG5").rules[0]
    got = sorted({f.check_id for f in result.findings})
    assert got == sorted(label["expect"]), [f.message for f in result.findings]
    if not label["expect"]:
        assert result.findings == [] and result.verdict == "pass"


def test_context_findings_carry_a_reproducer_that_fails_the_same_way(tmp_path):
    """GG501's reproducer reruns the seeded context program; it fails while the rule is unsafe there."""
    import subprocess
    import sys
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples"
    report = check(examples / "mutation_in_context.py", select=["GG501"])
    finding = next(f for f in report.findings if f.check_id == "GG501" and "captured-before" in f.message)
    script = tmp_path / "repro.py"
    script.write_text(finding.reproducer)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "AssertionError: context 'captured-before' of addone_rrule: tape[zero]: wrong (relative error" in proc.stderr
    assert "`dot` (step 0) captured argument 0 by reference" in proc.stderr


def test_context_inputs_are_drawn_without_constants_harvested_from_loaded_modules():
    """The contexts draw their inputs through a Hypothesis search of their own; like the runner's, it must
    not mix in literals from whatever modules are loaded, or the matrix would depend on them."""
    providers = pytest.importorskip("hypothesis.internal.conjecture.providers")
    if not hasattr(providers, "_get_local_constants"):
        pytest.skip("this Hypothesis has no local-constants hook: nothing to keep out")
    seen = []

    def double(x):
        seen.append(len(providers._get_local_constants()))
        return 2.0 * x

    @rrule(double, arrays(shape=(3,)))
    def double_rrule(x):
        return 2.0 * x, lambda g: (None,) if g is None else (2.0 * g,)

    assert len(providers._get_local_constants()) > 0
    draw_inputs(double_rrule, seed=11)
    assert seen and set(seen) == {0}


# ---- engines that read subnormal numbers as zeros ------------------------------------------------


def fmod_(x, d):
    return np.fmod(x, d)


@rrule(fmod_, arrays(shape=(2,)), arrays(shape=(2,), min_value=1.0, max_value=3.0))
def fmod_rrule(x, d):  # Chainer's fmod: correct, and NaN under XLA at a subnormal divisor, which XLA reads as 0
    return np.fmod(x, d), lambda g: (None, None) if g is None else (g, -np.trunc(x / d) * g)


def mul_(x, d):
    return x * d


@rrule(mul_, arrays(shape=(2,)), arrays(shape=(2,), min_value=1.0, max_value=3.0))
def doubled_mul_rrule(x, d):  # BUG: the forward is twice the primal, so AD differentiates another function
    return 2 * x * d, lambda g: (None, None) if g is None else (2 * g * d, 2 * g * x)


def _subnormal_divisor_context():
    def make(sig, rng):
        def program(ops, consts, x, d):
            return ops.xp.sum(ops.call(x, d))

        return Plan((np.array([-9.81888, 1.5]), np.array([2.225074e-309, 3.0])), (), program)

    return Context("subnormal-divisor", "the rule's output summed, at a divisor holding a subnormal number", make)


def test_a_value_that_only_flushing_subnormal_inputs_explains_is_no_verdict_on_the_rule():
    row = run_matrix(fmod_rrule, contexts=[_subnormal_divisor_context()], engines=["jax", "tape[zero]"]).rows[0]
    assert np.isfinite(row.value)  # plain NumPy: fmod(-9.81888, 2.2e-309) is a number
    jax = row.cells["jax"]
    assert jax.status == "skipped" and np.isnan(jax.value)
    assert jax.message == (
        f"no verdict: JAX gives the program's value nan, which plain NumPy gives with the subnormal numbers among "
        f"its inputs read as zeros (nan; {row.value:.6g} with them as they are): JAX flushes subnormal numbers to "
        "zero, so it computes another function here than the one users run, whatever the rule does")
    tape = row.cells["tape[zero]"]  # the tape computes what NumPy computes: no such excuse
    assert tape.value == row.value and "subnormal numbers among" not in tape.message


def test_a_forward_that_is_not_the_primal_is_still_a_different_value_at_a_subnormal_input():
    outcome = run_matrix(doubled_mul_rrule, contexts=[_subnormal_divisor_context()], engines=["jax"])
    jax = outcome.rows[0].cells["jax"]
    assert jax.status in ("right", "wrong") and jax.slope is not None  # judged, not excused by the flush
    assert jax.value == pytest.approx(2 * -9.81888 * 0.0 + 2 * 1.5 * 3.0)  # XLA's value: twice the flushed primal
    assert outcome.rows[0].value == pytest.approx(-9.81888 * 2.225074e-309 + 1.5 * 3.0)


def flat(x):
    return x * 0.0


@rrule(flat, arrays(shape=(3,)))
def flat_identity_rrule(x):
    return x * 0.0, lambda g: (g,)  # the gradient of x * 0 is 0: every program's gradient through it is 0


def test_an_error_against_a_zero_gradient_is_given_as_it_is_not_relative():
    """A relative error against a gradient of 0 is the error over the tolerance's floor (torchopt's masked update:
    "relative error 6.8e+08"): the message gives the error itself and says the program's gradient is 0."""
    report = check(flat_identity_rrule, select=["GG501"], seed=0)
    (found,) = [f for f in report.findings if f.check_id == "GG501"]
    assert re.search(r"\(-?[0-9.e+-]+ where the program's gradient is 0\)\.", found.message), found.message
    assert "relative error" not in found.message


# -- the view contexts' fix in the rule's own terms ------------------------------------------------------------
# A JAX rule's GG501 in transposed-view told its author to look for memory-order bugs (.ravel() writes into a copy
# of a Fortran-ordered view), which a JAX array cannot have: the program hands it the drawn input's own values, and
# the cotangent is what differs.
def test_a_jax_rule_wrong_in_a_view_context_is_told_the_cotangent_differs_not_the_memory_order():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from gradguard.checker import jax_rule

    @jax.custom_vjp
    def square(x):
        return x * x

    def fwd(x):
        return x * x, x

    def bwd(x, g):
        return (jnp.where(g[0, 0] > g[0, 1], 3.0, 2.0) * x * g,)  # BUG: wrong for some cotangents only

    square.defvjp(fwd, bwd)
    rule = jax_rule(square, arrays(shape=(2, 2), min_value=0.5, max_value=2.0), name="cotangent_dependent")
    # seed 2: the output-used program's cotangent is one the pullback gets right, the transposed-view one is not
    found = {f.location: f for f in check(rule, select=["GG501"], seed=2).findings}
    assert found["context transposed-view"].fix == (
        "A JAX array has no memory order: this program hands the rule the drawn input's own values (through x.T), and "
        "only its random cotangent and direction differ from the other programs', so the pullback is wrong for this "
        "cotangent at this input. Run the reproducer, and see whether the isolation checks (GG201, GG202) fail there "
        "too.")


def test_a_function_wrong_on_non_contiguous_tensors_is_told_to_make_them_contiguous():
    torch = pytest.importorskip("torch")
    from gradguard.checker import torch_rule

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.contiguous = x.is_contiguous()
            return 2 * x

        @staticmethod
        def backward(ctx, g):
            return (2.0 if ctx.contiguous else 3.0) * g  # BUG: assumes a contiguous input

    found = {f.location: f for f in check(torch_rule(Scale, arrays(shape=(3, 2)), name="scale"), select=["GG501"]).findings}
    assert sorted(found) == ["context strided-view", "context transposed-view"]
    assert found["context transposed-view"].fix == (
        "The Function assumes row-major tensors (.view() on its input, fixed strides, data_ptr arithmetic, an in-place "
        "write into a .reshape() that copied): call .contiguous() on its inputs, and index by shape.")
    assert found["context strided-view"].fix.startswith("The Function assumes contiguous tensors")
    # the twin established it: the same program on .contiguous() copies of the views is right
    assert found["context transposed-view"].message.endswith(
        ", and right when the views are passed as C-ordered copies of the same values: the rule depends on its "
        "arguments' memory layout."), found["context transposed-view"].message


def test_a_numpy_rule_right_on_contiguous_copies_of_its_views_is_told_it_assumes_contiguous_arguments():
    """The view programs' twins pass contiguous copies of the same values: a rule right there depends on the layout, and
    the fix says so without the either-or it gave before the twin (AutoGrad.jl's max, which gives every tie the whole
    cotangent, failed the view programs at an input with ties, whatever the layout)."""
    rule = _rule(ROOT / "tests" / "corpus" / "context_views.py", "pair_sums_rrule")
    found = {f.location: f for f in check(rule, select=["GG501"], seed=0).findings}
    assert "context strided-view" in found, sorted(found)
    assert found["context strided-view"].message.endswith(
        ", and right when the views are passed as contiguous copies of the same values: the rule depends on its "
        "arguments' memory layout."), found["context strided-view"].message
    assert found["context strided-view"].fix == (
        "The rule assumes contiguous arguments (flat buffers, fixed strides, reshape(-1) writes that land in a copy): "
        "index by shape, use np.ascontiguousarray on input, and build tangents with np.zeros(x.shape).")


def square(x):
    return x * x


@rrule(square, arrays(shape=(2, 2), min_value=0.5, max_value=2.0))
def square_cotangent_rrule(x):
    # BUG: right only for cotangents whose first entry is at most its second, whatever the layout or who shares it
    return x * x, lambda g: (None,) if g is None else ((3.0 if g[0, 0] > g[0, 1] else 2.0) * x * g,)


def test_a_rule_as_wrong_in_a_context_s_twin_is_told_the_gradient_is_wrong_at_that_input_not_the_context_s_hazard():
    """A FlashAttention Function whose forward clamps a sum its backward differentiates unclamped failed fan-out and
    transposed-view, whose fixes spoke of a cotangent written in place and of row-major tensors; it was as wrong with a
    cotangent of its own and on contiguous tensors. At seed 2 the output-used program's cotangent is one this pullback
    gets right; fan-out's and transposed-view's are not."""
    found = {f.location: f for f in check(square_cotangent_rrule, select=["GG501"], seed=2).findings}
    assert "context output-used" not in found and {"context fan-out", "context transposed-view"} <= set(found), found
    fan_out, view = found["context fan-out"], found["context transposed-view"]
    assert re.fullmatch(
        r"in context `fan-out` \(the output feeds three consumers whose cotangents accumulate\) the gradient of the "
        r"program is wrong under tape\[zero\], [^(]+ \(relative error 5\.0e-01\), and wrong too when its output "
        r"reaches the consumers through one copy, so that the pullback gets a cotangent of its own \(relative error "
        r"5\.0e-01\): the pullback is wrong for this cotangent at this input, not in how it treats a shared cotangent\.",
        fan_out.message), fan_out.message
    assert fan_out.fix.startswith("The pullback is wrong for this cotangent at this input, whoever else receives the "
                                  "output: compare its tangents with finite differences there"), fan_out.fix
    assert view.message.endswith(
        ", and wrong too when the views are passed as C-ordered copies of the same values (relative error 5.0e-01): the "
        "gradient is wrong at this program's input whatever its layout, not in how the rule reads Fortran-ordered "
        "views."), view.message
    assert view.fix.startswith("The pullback is wrong at this program's input whatever its memory layout"), view.fix
    assert "read-only" not in fan_out.fix and "C order" not in view.fix


def mul(a, b):
    return a * b


@rrule(mul, arrays(shape=(3,)), arrays(shape=(3,)))
def mul_equal_values_rrule(a, b):
    # wrong wherever the two arguments hold equal values, aliased or not: a removable singularity's special case
    # that forgets the second slot's partial (jaxoplanet's cel at p = 1 - k2 was wrong there with two arrays too)
    equal = np.array_equal(a, b)
    return a * b, lambda g: (g * b, 0 * g if equal else g * a)


def test_gg502_says_a_rule_wrong_with_distinct_arrays_of_the_same_values_is_wrong_whatever_the_aliasing():
    result = check(mul_equal_values_rrule, select="GG502").rules[0]
    (finding,) = result.findings
    assert finding.location == "context same-array-twice"
    assert re.fullmatch(
        r"in context `same-array-twice` \(the same array in two argument slots: rule\(x, x\)\) the gradient of the "
        r"program is wrong under tape\[zero\], [^(]+ \(relative error [0-9.e+-]+\), and wrong too when the slots get "
        r"distinct arrays of the same values \(relative error [0-9.e+-]+\): the gradient is wrong at this input "
        r"whatever the aliasing, not in how the rule accumulates over aliases\. The input: argument 0 = array\(\[.*\]\); "
        r"argument 1 is argument 0's array\.", finding.message), finding.message
    assert finding.fix.startswith("The pullback is wrong at this input on its own, with equal values in the two slots")


def test_gg502_still_blames_accumulation_where_distinct_arrays_of_the_same_values_are_right():
    (finding,) = check(_rule(EXAMPLES / "aliasing.py", "mul_alias_rrule"), select="GG502").rules[0].findings
    assert "wrong too when the slots get distinct arrays" not in finding.message
    assert finding.fix.startswith("Return each slot's own partial derivative")

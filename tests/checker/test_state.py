"""Test the tester: for each state check (GG401-GG406), a broken rule fails it with its exact message and a
correct twin passes it, and every correct twin passes the whole default suite."""

import re

import numpy as np
import pytest
from hypothesis import strategies as st

from gradguard.checker import arrays, check, constant, floats, rrule

# -- primals -------------------------------------------------------------------------------------


def addone_(a):
    a += 1
    return a.sum()


def addone_inplace(a):
    a += 1
    return a


def square(x):
    return x * x


def total(x):
    return x.sum()


def transpose(x):
    return x.T


def sin(x):
    return np.sin(x)


def masked(x, seed):
    return x * (np.random.default_rng(seed).random(x.shape) < 0.5)


# -- correct twins -------------------------------------------------------------------------------


# Every twin returns None tangents for an absent cotangent (an unused output), as GG302 asks.


@rrule(addone_, arrays(shape=(3,)), mutates=(0,))
def addone_declared(a):
    y = addone_(a)
    return y, lambda ybar: (None if ybar is None else np.full(a.shape, ybar),)


@rrule(square, arrays(shape=(3,)))
def square_ok(x):
    return x * x, lambda ybar: (None if ybar is None else 2 * x * ybar,)


@rrule(total, arrays(shape=(3,)))
def total_ok(x):
    return x.sum(), lambda ybar: (None if ybar is None else np.full(x.shape, ybar),)


@rrule(sin, arrays(shape=(3,)))
def sin_ok(x):
    c = np.cos(x)  # allocated per call, owned by this pullback
    return np.sin(x), lambda ybar: (None if ybar is None else ybar * c,)


_WORKSPACE: dict = {}


@rrule(sin, arrays(shape=(3,)))
def sin_private_cache(x):
    # A scratch buffer cached across calls, written only by the forward; the pullback never reads it.
    work = _WORKSPACE.setdefault(x.shape, np.empty(x.shape))
    np.sin(x, out=work)
    y = work.copy()
    c = np.cos(x)
    return y, lambda ybar: (None if ybar is None else ybar * c,)


@rrule(transpose, arrays(shape=(2, 3)))
def transpose_ok(x):
    return x.T.copy(), lambda ybar: (None if ybar is None else ybar.T.copy(),)


@rrule(masked, arrays(shape=(4,)), constant(7))
def masked_ok(x, seed):
    mask = np.random.default_rng(seed).random(x.shape) < 0.5
    return x * mask, lambda ybar: (None if ybar is None else ybar * mask, None)


TWINS = [addone_declared, square_ok, total_ok, sin_ok, sin_private_cache, transpose_ok, masked_ok]


def findings(rule, check_id):
    report = check(rule, select=[check_id], seed=0)
    assert report.rules[0].error is None, report.rules[0].error
    return [f for f in report.findings if f.check_id == check_id]


@pytest.mark.parametrize("rule", TWINS, ids=lambda r: r.name)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correct_twins_pass_the_full_default_suite(rule, seed):
    report = check(rule, seed=seed, max_examples=10, ignore=["GG5", "GG6"])  # contexts: their own tests
    assert report.rules[0].error is None, report.rules[0].error
    assert report.findings == []
    assert {"GG401", "GG402", "GG403", "GG404", "GG405", "GG406"} <= set(report.rules[0].checks_run)


@pytest.mark.parametrize("rule", TWINS, ids=lambda r: r.name)
def test_correct_twins_pass_every_state_check(rule):
    report = check(rule, select=["GG4"], seed=3)
    assert report.findings == []
    assert report.rules[0].checks_run == ["GG401", "GG402", "GG403", "GG404", "GG405", "GG406"]


# -- GG401 ---------------------------------------------------------------------------------------


def test_gg401_undeclared_mutation():
    @rrule(addone_, arrays(shape=(3,)))
    def addone_undeclared(a):
        y = addone_(a)
        return y, lambda ybar: (np.full(a.shape, ybar),)

    (f,) = findings(addone_undeclared, "GG401")
    assert f.severity == "error"
    assert f.message == (
        "the forward of addone_undeclared wrote into argument 0 (a), which is not declared in mutates=: "
        "a at [0] changed from 0 to 1."
    )
    assert f.location == "argument 0 (a) at [0]"
    assert f.fix == "Declare mutates=(0,) if the primal mutates a on purpose, or copy before writing (a = a.copy())."
    assert "a=array([0., 0., 0.])" in f.counterexample["call"]
    assert "replay(rule, 'GG401'" in f.reproducer


def test_gg401_names_only_the_undeclared_argument():
    def scale_both(a, b):
        a *= 2
        b *= 3
        return a.sum() + b.sum()

    ones_to_twos = arrays(shape=(2,), min_value=1, max_value=2)

    @rrule(scale_both, ones_to_twos, ones_to_twos, mutates=(0,))
    def scale_both_rrule(a, b):
        return scale_both(a, b), lambda ybar: (np.full(a.shape, 2 * ybar), np.full(b.shape, 3 * ybar))

    (f,) = findings(scale_both_rrule, "GG401")
    assert f.message == (
        "the forward of scale_both_rrule wrote into argument 1 (b), which is not declared in mutates=: "
        "b at [0] changed from 1 to 3."
    )
    assert f.fix.startswith("Declare mutates=(0, 1) if the primal mutates b on purpose")


def test_gg401_declared_mutation_passes():
    assert findings(addone_declared, "GG401") == []


def test_gg401_nan_is_not_a_change():
    @rrule(square, arrays(shape=(2,), elements=st.just(float("nan"))))
    def nan_square(x):
        return x * x, lambda ybar: (2 * x * ybar,)

    assert findings(nan_square, "GG401") == []


# -- GG402 ---------------------------------------------------------------------------------------


def test_gg402_pullback_clears_its_argument():
    @rrule(total, arrays(shape=(3,)))
    def total_clears(x):
        def pullback(ybar):
            x[...] = 0  # "frees" the residual: but x is the caller's array
            return (np.full(x.shape, ybar),)

        return x.sum(), pullback

    (f,) = findings(total_clears, "GG402")
    assert re.fullmatch(
        r"the pullback of total_clears wrote into argument 0 \(x\): x at \[\d\] changed from \S+ to 0\. "
        r"A pullback must only read the arguments: the caller still owns x, and other pullbacks may have captured it\.",
        f.message,
    ), f.message
    assert f.fix == "Compute the tangent into a new array, never in place into x (no x *= ..., no out=x)."
    assert findings(total_ok, "GG402") == []


def test_gg402_a_change_in_the_last_bits_reads_as_a_change():
    """pytorch_geometric's InvertibleFunction rebuilds its freed input in backward and writes it back, 4.9e-17 off:
    the message read "changed from 0.0625 to 0.0625". Values that differ show as many digits as tell them apart."""

    @rrule(total, arrays(shape=(3,), min_value=1, max_value=2))
    def total_rebuilds_its_input(x):
        def pullback(ybar):
            x[...] = np.nextafter(x, np.inf)  # a rebuilt copy, one ulp off
            return (np.full(x.shape, ybar),)

        return x.sum(), pullback

    (f,) = findings(total_rebuilds_its_input, "GG402")
    m = re.search(r"x at \[\d\] changed from (\S+) to (\S+)\. ", f.message)
    assert m and m.group(1) != m.group(2), f.message
    assert float(m.group(2)) == np.nextafter(float(m.group(1)), np.inf), f.message


def test_gg402_pullback_writes_into_the_output():
    @rrule(square, arrays(shape=(3,), min_value=1, max_value=2))
    def square_scales_output(x):
        y = x * x

        def pullback(ybar):
            y[...] *= 0  # reuses the output's memory as scratch
            return (2 * x * ybar,)

        return y, pullback

    (f,) = findings(square_scales_output, "GG402")
    assert f.message == (
        "the pullback of square_scales_output wrote into the forward's output: output at [0] changed from 1 to 0. "
        "The output belongs to the caller, and the pullbacks of operations that consumed it may still read it."
    )
    assert findings(square_ok, "GG402") == []


def test_gg402_checks_a_declared_argument_after_the_forward():
    @rrule(addone_, arrays(shape=(3,)), mutates=(0,))
    def addone_pullback_writes(a):
        y = addone_(a)

        def pullback(ybar):
            a[...] -= 1  # "undoes" the mutation from inside the pullback
            return (np.full(a.shape, ybar),)

        return y, pullback

    (f,) = findings(addone_pullback_writes, "GG402")
    assert f.message.startswith(
        "the pullback of addone_pullback_writes wrote into argument 0 (a): a at [0] changed from 1 to 0."
    )
    assert findings(addone_declared, "GG402") == []


# -- GG403 ---------------------------------------------------------------------------------------


def test_gg403_pullback_accumulates_into_a_captured_array():
    @rrule(square, arrays(shape=(3,)))
    def square_accumulates(x):
        grad = np.zeros_like(x)

        def pullback(ybar):
            grad[...] += 2 * x * ybar
            return (grad.copy(),)

        return x * x, pullback

    (f,) = findings(square_accumulates, "GG403")
    assert f.message == (
        "calling the pullback of square_accumulates twice with the same cotangent gave different tangents for "
        "argument 0 (x) at [2]: 2 on the first call, 4 on the second. The pullback changes state it reads "
        "(it accumulates into a captured buffer, consumes its residuals or draws random numbers)."
    )
    assert f.fix.startswith("Allocate the tangent in every call")
    assert "cotangent" in f.counterexample["draws"]


def test_gg403_pullback_pops_its_residuals():
    @rrule(square, arrays(shape=(3,)))
    def square_pops(x):
        residuals = [2 * x]
        return x * x, lambda ybar: (residuals.pop() * ybar,)

    (f,) = findings(square_pops, "GG403")
    assert f.message == (
        "the pullback of square_pops raised IndexError: pop from empty list on its second call with the same "
        "cotangent, after the first call succeeded. It consumes its residuals (list.pop, next() on an iterator, "
        "a generator) instead of reading them."
    )
    # GG404 needs a reentrant pullback; it steps aside instead of reporting the same crash.
    assert findings(square_pops, "GG404") == []


def test_gg403_pullback_returns_a_reused_buffer():
    @rrule(square, arrays(shape=(3,)))
    def square_returns_buffer(x):
        g = np.empty_like(x)

        def pullback(ybar):
            np.multiply(2 * x, ybar, out=g)
            return (g,)

        return x * x, pullback

    (f,) = findings(square_returns_buffer, "GG403")
    assert re.fullmatch(
        r"the pullback of square_returns_buffer returns a buffer it reuses: calling it again with another "
        r"cotangent overwrote the tangent for argument 0 \(x\) returned by the first call at \[\d\] "
        r"\(\S+ became \S+\)\. Engines hold on to earlier tangents and add to them\.",
        f.message,
    ), f.message


def test_gg403_reentrant_pullback_passes():
    assert findings(square_ok, "GG403") == []


# -- GG404 ---------------------------------------------------------------------------------------

_COS = np.empty(3)


@rrule(sin, arrays(shape=(3,)))
def sin_shared_buffer(x):
    np.cos(x, out=_COS)  # preallocated once, shared by every call
    return np.sin(x), lambda ybar: (ybar * _COS,)


_OUT = np.empty(3)


@rrule(sin, arrays(shape=(3,)))
def sin_returns_buffer(x):
    np.sin(x, out=_OUT)
    c = np.cos(x)
    return _OUT, lambda ybar: (ybar * c,)


def test_gg404_preallocated_residual_buffer():
    (f,) = findings(sin_shared_buffer, "GG404")
    assert re.fullmatch(
        r"the pullback of the first call of sin_shared_buffer changed after a second forward call on another "
        r"input: the tangent for argument 0 \(x\) at \[\d\] was \S+, then \S+, for the same cotangent\. "
        r"The rule keeps residuals in state shared across calls \(a preallocated buffer or cache\) that the "
        r"second call overwrote\.",
        f.message,
    ), f.message
    assert "second input" in f.counterexample["draws"]
    assert f.fix == "Allocate residuals inside the rrule for each call, or copy what the pullback needs into its closure."
    # The same rule is fine for every check that runs one forward and its own pullback.
    assert check(sin_shared_buffer, select=["GG401", "GG402", "GG403", "GG405", "GG406"]).findings == []


def test_gg404_names_the_way_out_in_the_rules_own_terms():
    """A torch.autograd.Function that keeps its residual on the class, which the next forward call replaces: the
    same finding, with ctx as the way out; a custom_vjp's names fwd's residuals (agjax's experimental wrapper keeps
    its vjp functions in module-level state)."""
    from types import SimpleNamespace

    from gradguard.checker.checks.state_repeat import _stale_fix

    torch = pytest.importorskip("torch")
    from gradguard.checker import torch_rule

    class SinShared(torch.autograd.Function):
        cos = None  # one slot for every call

        @staticmethod
        def forward(ctx, x):
            SinShared.cos = torch.cos(x)
            return torch.sin(x)

        @staticmethod
        def backward(ctx, ybar):
            return ybar * SinShared.cos

    (f,) = findings(torch_rule(SinShared, arrays(shape=(3,)), name="sin_shared_function"), "GG404")
    assert f.message.startswith("the pullback of the first call of sin_shared_function changed after a second forward")
    assert f.fix == ("Save what backward needs on each call's ctx (ctx.save_for_backward, ctx attributes) instead of "
                     "keeping it in module-level or class state that every call shares.")
    jax_case = SimpleNamespace(rule=SimpleNamespace(kind="jax"))
    assert _stale_fix(jax_case).startswith("Return what bwd needs from fwd as its residuals")


def test_gg404_output_is_a_reused_buffer():
    (f,) = findings(sin_returns_buffer, "GG404")
    assert re.fullmatch(
        r"calling sin_returns_buffer on a second input overwrote the output of the first call: output at \[\d\] "
        r"changed from \S+ to \S+\. The rule returns a preallocated buffer that every call reuses\.",
        f.message,
    ), f.message


_LAST = {}


@rrule(total, arrays(shape=st.sampled_from([(2,), (3,), (4,)])))
def total_last_shape_cache(x):
    _LAST["ones"] = np.ones(x.shape)  # the latest call's residual, whatever its shape
    return x.sum(), lambda ybar: (_LAST["ones"].reshape(x.shape) * ybar,)


def test_gg404_first_pullback_raises_after_a_second_call():
    """Once a second call replaced the cached residual with one of another shape, the first pullback raises:
    stale state too, reported with the error the caller would meet."""
    (f,) = findings(total_last_shape_cache, "GG404")
    assert re.fullmatch(
        r"the pullback of the first call of total_last_shape_cache raised ValueError: .+ after a second forward "
        r"call on another input, though it answered the same twice before that call\. The rule keeps residuals "
        r"in state shared across calls \(a preallocated buffer or a cache keyed on shape\) that the second call "
        r"replaced\.",
        f.message,
    ), f.message
    assert f.actual.startswith("ValueError")


def exp(x):
    return np.exp(x)


@rrule(exp, arrays(shape=(3,)))
def exp_pullback_scales_output(x):
    y = np.exp(x)

    def pullback(ybar):
        y[...] *= ybar  # BUG (GG402): writes into its own output
        return (y.copy(),)

    return y, pullback


def test_gg404_leaves_a_pullback_that_writes_its_own_output_to_gg402():
    """GG404 once snapshotted the first output before the first pullback wrote into it, and so blamed the
    second forward call for what the pullback did."""
    assert findings(exp_pullback_scales_output, "GG404") == []
    assert findings(exp_pullback_scales_output, "GG402")


def test_gg404_per_call_allocation_and_forward_only_cache_pass():
    assert findings(sin_ok, "GG404") == []
    assert findings(sin_private_cache, "GG404") == []


# -- GG405 ---------------------------------------------------------------------------------------


def test_gg405_output_is_a_transposed_view():
    @rrule(transpose, arrays(shape=(2, 3)))
    def transpose_view(x):
        return x.T, lambda ybar: (ybar.T.copy(),)

    (f,) = findings(transpose_view, "GG405")
    assert f.severity == "warning"
    assert f.message == (
        "the output of transpose_view is a view of argument 0 (x) (shares its memory): an in-place write to either "
        "silently changes the other, and an engine that captured one by reference sees the other's later writes."
    )
    assert check(transpose_view, select=["GG4"]).passed  # a warning does not fail the rule


def test_gg405_output_is_the_argument_itself_even_when_declared():
    @rrule(addone_inplace, arrays(shape=(3,)), mutates=(0,))
    def addone_returns_a(a):
        return addone_inplace(a), lambda ybar: (ybar.copy(),)

    (f,) = findings(addone_returns_a, "GG405")
    assert f.message == (
        "the output of addone_returns_a is argument 0 (a) itself (a is declared in mutates=, but the hazard for "
        "engines is the same): an in-place write to either silently changes the other, and an engine that "
        "captured one by reference sees the other's later writes."
    )


def test_gg405_tangent_is_the_argument_itself():
    @rrule(square, arrays(shape=(3,)))
    def square_tangent_alias(x):
        def pullback(ybar):
            return (x,)

        return x * x, pullback

    (f,) = findings(square_tangent_alias, "GG405")
    assert f.message == (
        "the tangent for argument 0 (x) returned by the pullback of square_tangent_alias is argument 0 (x) itself: "
        "engines accumulate gradients in place (g += t), which would write into the caller's array."
    )


def test_gg405_copies_pass():
    assert findings(transpose_ok, "GG405") == []
    assert findings(addone_declared, "GG405") == []


# -- GG406 ---------------------------------------------------------------------------------------


def test_gg406_unseeded_rng_in_the_forward():
    @rrule(masked, arrays(shape=(4,), min_value=1, max_value=2), constant(7))
    def masked_unseeded(x, seed):
        mask = np.random.default_rng().random(x.shape) < 0.5  # ignores the seed
        return x * mask, lambda ybar: (ybar * mask, None)

    (f,) = findings(masked_unseeded, "GG406")
    m = re.fullmatch(
        r"two forward calls of masked_unseeded on identical copies of the same input gave different outputs: "
        r"output at \[\d\] was (\S+), then (\S+)\. The rule depends on hidden state that changes from call to call "
        r"\(a random generator gradguard cannot hold at one state: an unseeded one, one made in the call, a NumPy "
        r"Generator of the rule's own; the clock; a counter\)\.",
        f.message,
    )
    assert m, f.message
    assert m.group(1) != m.group(2)
    assert f.fix.startswith("Make randomness an explicit argument (a seed or key, declared nondiff), or draw from "), f.fix


def test_gg406_unseeded_rng_in_the_pullback():
    @rrule(square, arrays(shape=(3,)))
    def square_noisy_pullback(x):
        return x * x, lambda ybar: (2 * x * ybar + np.random.default_rng().normal(size=x.shape),)

    (f,) = findings(square_noisy_pullback, "GG406")
    assert re.fullmatch(
        r"the pullbacks of two forward calls of square_noisy_pullback on identical copies of the same input gave "
        r"different tangents for the same cotangent: the tangent for argument 0 \(x\) at \[\d\] was \S+, then \S+\. "
        r"The forward or the pullback depends on hidden state that changes from call to call \(a random generator "
        r"gradguard cannot hold at one state: an unseeded one, one made in the call, a NumPy Generator of the rule's "
        r"own; the clock; a counter\)\.",
        f.message,
    ), f.message


def test_gg406_seeded_rng_passes():
    assert findings(masked_ok, "GG406") == []


def test_state_catalogue_entries():
    from gradguard.checker import catalogue

    entries = {c.id: c for c in catalogue() if c.family == "state"}
    assert sorted(entries) == ["GG401", "GG402", "GG403", "GG404", "GG405", "GG406"]
    assert entries["GG405"].severity == "warning"
    for entry in entries.values():
        assert entry.module == "gradguard.checker.checks." + ("state_repeat" if entry.id in ("GG403", "GG404", "GG406") else "state")
        assert entry.explanation and entry.broken_example and entry.fixed_example


def test_gg404_reproducer_replays_the_second_input(tmp_path, monkeypatch):
    import os

    (f,) = findings(sin_shared_buffer, "GG404")
    script = tmp_path / "repro.py"
    script.write_text(f.reproducer)
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    with pytest.raises(AssertionError, match="GG404 stale residuals"):
        exec(compile(script.read_text(), str(script), "exec"), {"__name__": "__repro__"})


def test_gg401_structural_change_of_a_list_argument():
    def first_times_second(xs):
        return xs[0] * xs[1]

    pairs = st.tuples(st.tuples(arrays(shape=(2,)), arrays(shape=(2,))).map(list))

    @rrule(first_times_second, args=pairs)
    def appends(xs):
        xs.append(xs[0])  # grows the caller's list
        return xs[0] * xs[1], lambda ybar: ([ybar * xs[1], ybar * xs[0]],)

    (f,) = findings(appends, "GG401")
    assert f.message == (
        "the forward of appends wrote into argument 0 (xs), which is not declared in mutates=: "
        "xs changed from list of 2 to list of 3."
    )


def test_gg405_ignores_immutable_scalars():
    def first(a, b):
        return a

    @rrule(first, floats(), floats())
    def first_rrule(a, b):
        return a, lambda ybar: (ybar, 0.0)  # the output *is* the Python float a: harmless

    assert findings(first_rrule, "GG405") == []


# -- the shared first call snapshots the arguments only where the forward changed them ------------------
def _first_call(rule, args):
    from gradguard.checker.case import Case, ReplayDraws

    return Case(rule, args, ReplayDraws([])).first_call()


def test_first_call_copies_no_argument_the_forward_left_as_it_was():
    @rrule(np.sin, arrays(shape=(3,)))
    def sin_rrule(x):
        return np.sin(x), lambda ybar: (ybar * np.cos(x),)

    args = (np.array([0.5, -0.0, np.nan]),)
    call = _first_call(sin_rrule, args)
    assert call.args_after is args  # the pristine arguments stand for the copy: no copy made


def test_first_call_copies_an_argument_the_forward_wrote_into_even_a_sign_of_zero():
    @rrule(np.sin, arrays(shape=(3,)))
    def flips_zero_rrule(x):
        x[1] = -x[1]  # 0.0 -> -0.0: equal as numbers, not as bits
        return np.sin(x), lambda ybar: (ybar * np.cos(x),)

    args = (np.array([0.5, 0.0, 1.0]),)
    call = _first_call(flips_zero_rrule, args)
    assert call.args_after is not args and np.signbit(call.args_after[0][1]) and not np.signbit(args[0][1])
    assert call.args_after[0] is not call.args[0]  # a copy: a later write into the live argument does not reach it


def dropout_train(x, ratio):
    """Chainer's dropout in training mode: a mask from NumPy's global generator."""
    return x * ((np.random.rand(*x.shape) >= ratio) / (1.0 - ratio))


@rrule(dropout_train, arrays(shape=(6,)), constant(0.5))
def global_mask_dropout_rrule(x, ratio):
    mask = (np.random.rand(*x.shape) >= ratio) / (1.0 - ratio)  # chainer/functions/noise/dropout.py
    return x * mask, lambda g: (None, None) if g is None else (g * mask, None)


@rrule(dropout_train, arrays(shape=(6,)), constant(0.5))
def dropout_mask_drawn_again_rrule(x, ratio):
    mask = (np.random.rand(*x.shape) >= ratio) / (1.0 - ratio)
    return x * mask, lambda g: (None, None) if g is None else (g * (np.random.rand(*x.shape) >= ratio) / (1.0 - ratio), None)


def test_a_mask_from_numpys_global_generator_kept_for_the_pullback_passes_and_one_drawn_again_fails():
    """Every call of a NumPy rule starts from one fixed state of NumPy's global generator (as a program re-run under
    np.random.seed): Chainer's dropout drew GG102, GG202, GG406 and GG503, each comparing calls that drew different
    masks. A pullback that draws a new mask still fails, and the caller's generator state is left as it was."""
    np.random.seed(1234)
    expected = np.random.rand(3)
    np.random.seed(1234)
    kept = check(global_mask_dropout_rrule).rules[0]
    assert np.array_equal(np.random.rand(3), expected)
    assert kept.verdict == "pass", [(f.check_id, f.message) for f in kept.findings]
    redrawn = check(dropout_mask_drawn_again_rrule, select=["GG201", "GG406"]).rules[0]
    assert {f.check_id for f in redrawn.findings} == {"GG201", "GG406"}
    gg406 = next(f for f in redrawn.findings if f.check_id == "GG406")
    assert gg406.message.startswith("the pullbacks of two forward calls of dropout_mask_drawn_again_rrule on identical "
                                    "copies of the same input gave different tangents for the same cotangent")


# -- a pullback that does not reproduce its own result: the checks comparing separate calls give no verdict ----


def logsumexp_rows(x):
    m = x.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]


def _sampled_pullback(x, ybar, draw):
    """pytorch-struct's sampling semiring: the gradient of logsumexp, softmax(x), replaced by a one-hot sample
    drawn from it (a score-function estimator: right in expectation, never the derivative)."""
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    picks = [draw(len(row), row) for row in p]
    return ybar[:, None] * np.eye(x.shape[-1])[picks]


@rrule(logsumexp_rows, arrays(shape=(3, 4), min_value=-3, max_value=3))
def sampled_logsumexp_rrule(x):
    rng = np.random.default_rng()  # a new sample on every pullback call
    return logsumexp_rows(x), lambda ybar: (_sampled_pullback(x, ybar, lambda n, p: rng.choice(n, p=p)),)


@rrule(logsumexp_rows, arrays(shape=(3, 4), min_value=-3, max_value=3))
def argmax_squared_cotangent_rrule(x):
    """Deterministic, and not linear in the cotangent: ybar**2 picks the row's most likely entry."""
    return logsumexp_rows(x), lambda ybar: (_sampled_pullback(x, ybar ** 2, lambda n, p: int(np.argmax(p))),)


COMPARING = ["GG202", "GG404"]


def test_a_pullback_that_draws_a_new_sample_every_call_is_blamed_on_its_randomness_alone():
    """pytorch-struct's sampled logsumexp drew GG202 ("not linear in the cotangent"), GG404 ("stale residuals") and,
    as a torch Function, GG703 and GG705, each reading the new sample of a second call as its own fault. The checks
    that compare separate calls are skipped for such a rule, naming the irreproducibility; GG403 and GG406 report it."""
    for seed in (0, 1, 2):
        result = check(sampled_logsumexp_rrule, select=["GG2", "GG4"], ignore=["GG203", "GG204"], seed=seed).rules[0]
        assert result.error is None, result.error
        ids = {f.check_id for f in result.findings}
        assert {"GG403", "GG406"} <= ids and not ids & set(COMPARING), (seed, ids)
        skipped = {s["id"]: s["reason"] for s in result.checks_skipped}
        for check_id in COMPARING:
            assert re.fullmatch(
                r"it compares separate calls of the rule, whose pullback does not reproduce its own result \("
                r"(calling its pullback twice with the same cotangent gave the tangent for argument 0 \(x\) at \[\d, \d\] "
                r"as \S+, then \S+ \(GG403\)|the pullbacks of two forward calls on identical copies of the input gave "
                r"the tangent for argument 0 \(x\) at \[\d, \d\] as \S+, then \S+ for the same cotangent \(GG406\))\): "
                r"any difference it saw could be that alone",
                skipped.get(check_id, ""),
            ), (seed, check_id, skipped)


def test_a_deterministic_pullback_that_is_not_linear_still_fails_gg202():
    result = check(argmax_squared_cotangent_rrule, select=["GG202", "GG403", "GG406"]).rules[0]
    assert [f.check_id for f in result.findings] == ["GG202"], [(f.check_id, f.message) for f in result.findings]
    assert result.findings[0].message.startswith("the pullback of argmax_squared_cotangent_rrule is not linear in the "
                                                  "cotangent")
    assert "GG202" in result.checks_run

"""JAX rules and the JAX checks: `jax_rule`, GG203 (reference gradient), GG204 (second order), GG601 (jit),
GG602 (vmap). Test the tester: each broken rule fails with its id and exact message, its correct twin passes.
Bad input (wrong bwd pytree, untraceable rule, missing GPU) gives a finding or error naming the problem."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis.extra import numpy as hnp

import gradguard.checker.per_rule

from gradguard import checker
from gradguard.checker import SpecError, arrays, check, constant, jax_rule, rrule
from gradguard.checker.cli import main
from gradguard.checker.loader import load_module, rules_in

jax = pytest.importorskip("jax")
jnp = jax.numpy

ROOT = Path(__file__).resolve().parents[2]
NUM = r"(-?[0-9.e+-]+|nan|inf)"


@pytest.fixture(autouse=True)
def _cpu(monkeypatch):
    """Every test runs on the CPU unless it asks otherwise; JAX's float64 is on in the checker process."""
    monkeypatch.setenv("GRADGUARD_DEVICE", "cpu")
    monkeypatch.delenv("GRADGUARD_BATCHED_FD", raising=False)


def findings(rule, *ids, **kwargs):
    report = check(rule, select=list(ids), **kwargs)
    assert report.rules[0].error is None, report.rules[0].error
    return [f for f in report.findings if f.check_id in ids]


def skipped(rule, check_id, **kwargs):
    report = check(rule, select=[check_id], **kwargs)
    return {s["id"]: s["reason"] for s in report.rules[0].checks_skipped}.get(check_id)


# -- rules -----------------------------------------------------------------------------------------
def _softplus_fwd(x):
    return jnp.logaddexp(0.0, x), jax.nn.sigmoid(x)


@jax.custom_vjp
def softplus(x):
    return jnp.logaddexp(0.0, x)


softplus.defvjp(_softplus_fwd, lambda sig, g: (g * sig,))
softplus_ok = jax_rule(softplus, arrays(shape=(4,), min_value=-20.0, max_value=20.0), name="softplus_ok")


@jax.custom_vjp
def softplus_sign(x):
    return jnp.logaddexp(0.0, x)


softplus_sign.defvjp(lambda x: (jnp.logaddexp(0.0, x), x), lambda x, g: (g * jax.nn.sigmoid(-x),))
softplus_sign_slip = jax_rule(softplus_sign, arrays(shape=(4,)), name="softplus_sign_slip")


@jax.custom_vjp
def softplus_stopped(x):
    return jnp.logaddexp(0.0, x)


softplus_stopped.defvjp(
    lambda x: (jnp.logaddexp(0.0, x), jax.nn.sigmoid(jax.lax.stop_gradient(x))), lambda sig, g: (g * sig,)
)
stopped_residual = jax_rule(softplus_stopped, arrays(shape=(3,)), name="stopped_residual")


@jax.custom_vjp
def softplus_docs_style(x):
    return jnp.logaddexp(0.0, x)


# fwd calls the custom_vjp itself (JAX's documentation style): JAX refuses forward mode through it.
softplus_docs_style.defvjp(lambda x: (softplus_docs_style(x), jax.nn.sigmoid(x)), lambda sig, g: (g * sig,))
docs_style = jax_rule(softplus_docs_style, arrays(shape=(3,)), name="docs_style")


@jax.custom_vjp
def tanh_branch(x):
    return jnp.tanh(x)


def _tanh_branch_bwd(t, g):
    if jnp.all(g == 0):  # a Python branch on a traced value
        return (g,)
    return ((1 - t**2) * g,)


tanh_branch.defvjp(lambda x: (jnp.tanh(x), jnp.tanh(x)), _tanh_branch_bwd)
python_branch = jax_rule(tanh_branch, arrays(shape=(3,)), name="python_branch")


@jax.custom_vjp
def tanh_where(x):
    return jnp.tanh(x)


tanh_where.defvjp(lambda x: (jnp.tanh(x), jnp.tanh(x)), lambda t, g: (jnp.where(g == 0, g, (1 - t**2) * g),))
tanh_where_ok = jax_rule(tanh_where, arrays(shape=(3,)), name="tanh_where_ok")


@jax.custom_vjp
def cube_fast(x):
    return x**3


def _cube_fast_bwd(x, g):
    if isinstance(x, jax.core.Tracer):  # the path jit takes drops a factor x
        return (3 * x * g,)
    return (3 * x**2 * g,)


cube_fast.defvjp(lambda x: (x**3, x), _cube_fast_bwd)
traced_fast_path = jax_rule(cube_fast, arrays(shape=(3,)), name="traced_fast_path")


def _host_scaled(x, g):
    return (g * x / np.linalg.norm(x)).astype(x.dtype)  # the norm of everything the host function is given


def _norm_rule(vmap_method, name):
    @jax.custom_vjp
    def norm(x):
        return jnp.linalg.norm(x)

    def bwd(x, g):
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return (jax.pure_callback(_host_scaled, out, x, g, vmap_method=vmap_method),)

    norm.defvjp(lambda x: (jnp.linalg.norm(x), x), bwd)
    return jax_rule(norm, arrays(shape=(3,), min_value=0.5, max_value=4.0), name=name)


host_norm_batched = _norm_rule("expand_dims", "host_norm_batched")
host_norm_sequential = _norm_rule("sequential", "host_norm_sequential")


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def power(x, n):
    return x**n


power.defvjp(lambda x, n: (x**n, x), lambda n, x, g: (n * x ** (n - 1) * g,))
power_ok = jax_rule(power, arrays(shape=(3,)), constant(3), name="power_ok")


@jax.custom_vjp
def sin_extra(x):
    return jnp.sin(x)


sin_extra.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (jnp.cos(x) * g, g))
extra_tangent = jax_rule(sin_extra, arrays(shape=(3,)), name="extra_tangent")


@jax.custom_vjp
def sin_numpy(x):
    return np.sin(x)


sin_numpy.defvjp(lambda x: (np.sin(x), x), lambda x, g: (np.cos(x) * g,))
numpy_inside = jax_rule(sin_numpy, arrays(shape=(3,)), name="numpy_inside")


def square(x):
    return x * x


@rrule(square, arrays(shape=(3,)))
def square_wrong_np(x):
    return x * x, lambda g: (None,) if g is None else (3 * x * g,)


def tanh_np(x):
    return np.tanh(x)


@rrule(tanh_np, arrays(shape=(3,)))
def tanh_wrong_np(x):
    return np.tanh(x), lambda g: (None,) if g is None else ((1 + np.tanh(x) ** 2) * g,)


def sort_np(x):
    out = np.empty_like(x)
    np.copyto(out, np.sort(x))
    return out


@rrule(sort_np, arrays(shape=(3,)))
def sort_np_rrule(x):
    order = np.argsort(x)

    def pullback(g):
        if g is None:
            return (None,)
        out = np.zeros_like(x)
        out[order] = g
        return (out,)

    return sort_np(x), pullback


# -- jax_rule ----------------------------------------------------------------------------------------
def test_jax_rule_builds_a_spec_from_the_custom_vjp():
    # (read through a wrapper that turns a registered pytree output into a dict: checker.pytree_outputs)
    assert softplus_ok.kind == "jax" and softplus_ok.jax_fn.__wrapped__ is softplus
    assert softplus_ok.extra["jax_primal"].__wrapped__ is softplus.fun
    y = softplus_ok.primal(np.zeros(4))
    assert isinstance(y, np.ndarray) and np.allclose(y, np.log(2.0))
    out, pullback = softplus_ok.rrule(np.zeros(4))
    assert np.allclose(pullback(np.ones(4))[0], 0.5)
    assert power_ok.nondiff == {1}  # from nondiff_argnums (and constant())
    assert jax_rule(power, arrays(shape=(3,)), arrays(shape=()), name="p").nondiff == {1}
    assert softplus_ok.module == __name__
    first, last = softplus_ok.source_lines  # from the fwd above the primal to the defvjp line
    source = Path(__file__).read_text().splitlines()[first - 1 : last]
    assert source[0].startswith("def _softplus_fwd") and "softplus.defvjp" in source[-1]


def test_jax_rule_validates_eagerly():
    with pytest.raises(SpecError, match="jax_rule takes a jax.custom_vjp or jax.custom_jvp function"):
        jax_rule(np.sin, arrays(shape=(3,)))
    with pytest.raises(SpecError, match=r"nondiff=\(5,\), but the rule takes 1 argument"):
        jax_rule(softplus, arrays(shape=(3,)), nondiff=(5,))
    with pytest.raises(SpecError, match="takes 1 required argument"):
        jax_rule(softplus, arrays(shape=(3,)), arrays(shape=(3,)))

    @jax.custom_vjp
    def undefined(x):
        return x

    with pytest.raises(SpecError, match="has no rule yet"):
        jax_rule(undefined, arrays(shape=(3,)))


def test_a_correct_jax_rule_passes_every_check_and_the_report_records_jax():
    report = check(softplus_ok)
    result = report.rules[0]
    assert report.passed, [(f.check_id, f.message) for f in report.findings]
    assert {"GG102", "GG201", "GG203", "GG204", "GG601", "GG602"} <= set(result.checks_run)
    env = report.environment
    assert env["jax"] == jax.__version__ and env["jaxlib"] and env["device"].startswith("cpu") and env["x64"] is True


@pytest.mark.slow
def test_a_correct_jax_rule_has_no_finding_for_ten_seeds():
    for seed in range(10):
        report = check(softplus_ok, seed=seed)
        assert report.passed, (seed, [(f.check_id, f.message) for f in report.findings])


# -- GG203 -------------------------------------------------------------------------------------------
def test_gg203_sign_slip_against_the_function_underneath():
    (f,) = findings(softplus_sign_slip, "GG203")
    m = re.fullmatch(
        rf"the pullback of softplus_sign_slip disagrees with the JAX reference gradient \(jax\.vjp of the function "
        rf"underneath the custom_vjp\): cotangent for argument 0 \(x\) at \[(\d)\]: expected {NUM} \(JAX\), got {NUM}\. "
        rf"Finite differences of the primal along the difference of the two agree with JAX\.",
        f.message,
    )
    assert m, f.message
    assert f.location == f"argument 0 at [{m[1]}]" and float(m[2]) != float(m[3])
    assert f.fix.startswith("Re-derive the tangent for argument 0")
    assert findings(softplus_ok, "GG203") == []


def test_gg203_numpy_rules_use_jax_when_the_primal_traces():
    (f,) = findings(square_wrong_np, "GG203")
    assert re.fullmatch(
        rf"the pullback of square_wrong_np disagrees with the JAX reference gradient \(jax\.vjp of the primal\): "
        rf"cotangent for argument 0 \(x\) at \[\d\]: expected {NUM} \(JAX\), got {NUM}\. Finite differences of the primal along the difference of the two agree with JAX\.",
        f.message,
    ), f.message
    (f,) = findings(tanh_wrong_np, "GG203")  # np.tanh: traced with jax.numpy in its place
    assert "(jax.vjp of the primal, its NumPy calls run as jax.numpy)" in f.message


def test_gg203_skips_a_primal_jax_cannot_trace_with_the_reason():
    reason = skipped(sort_np_rrule, "GG203")
    assert reason.startswith("primal is not traceable by JAX: "), reason


@jax.custom_vjp
def newton_sqrt(x):
    """sqrt by Newton's iteration in a lax.while_loop: JAX runs it, jit compiles it, reverse mode cannot go through."""
    def step(state):
        y, _ = state
        new = 0.5 * (y + x / y)
        return new, jnp.max(jnp.abs(new - y))

    y, _ = jax.lax.while_loop(lambda s: s[1] > 1e-15, step, (jnp.maximum(x, 1.0), jnp.inf))
    return y


newton_sqrt.defvjp(lambda x: (newton_sqrt(x), newton_sqrt(x)), lambda y, g: (g / (2 * y),))
newton_sqrt_rule = jax_rule(newton_sqrt, arrays(shape=(3,), min_value=0.5, max_value=4.0), name="newton_sqrt")


def test_gg203_says_jax_cannot_reverse_differentiate_a_primal_it_runs():
    """softjax's projections solve with a lax.while_loop: the skip said "primal is not traceable by JAX", and JAX traces
    and compiles it; what it cannot do is differentiate it in reverse mode."""
    reason = skipped(newton_sqrt_rule, "GG203")
    assert reason.startswith("JAX runs the primal but cannot reverse-differentiate it: ValueError: Reverse-mode "
                             "differentiation does not work for lax.while_loop"), reason
    assert findings(newton_sqrt_rule, "GG201") == []  # the rule is right: finite differences judge it


# -- GG204 -------------------------------------------------------------------------------------------
def test_gg204_stop_gradient_residual_gives_wrong_second_order():
    (f,) = findings(stopped_residual, "GG204")
    m = re.fullmatch(
        rf"the second order of stopped_residual is wrong: along a random direction u, d/dt <w, pullback at "
        rf"\(x \+ t u\)\(ybar\)> = {NUM} by finite differences of the pullback, but JAX's derivative of the pullback "
        rf"\(jvp of vjp, through fwd and bwd\) gives 0\.0, {NUM} apart where the tolerance allows {NUM}\.",
        f.message,
    )
    assert m and float(m[1]) != 0.0, f.message
    assert float(m[2]) == pytest.approx(abs(float(m[1])), rel=0.02) and 0 < float(m[3]) < float(m[2])
    assert set(f.counterexample["draws"]) == {"cotangent", "direction", "covector"}
    assert findings(stopped_residual, "GG201", "GG203") == []  # first order is right
    assert findings(softplus_ok, "GG204") == []


def test_gg204_batched_finite_differences_find_the_same_bug(monkeypatch):
    monkeypatch.setenv("GRADGUARD_BATCHED_FD", "1")
    (f,) = findings(stopped_residual, "GG204")
    assert f.message.startswith("the second order of stopped_residual is wrong")
    assert findings(softplus_ok, "GG204") == []


def test_batched_directional_matches_sequential_finite_differences():
    from gradguard.checker.checks._jax import batched_directional
    from gradguard.engines import fd

    x, v, w = np.array([0.3, -1.2, 2.0]), np.array([1.0, 0.5, -2.0]), np.array([0.7, -0.1, 1.3])
    batched = batched_directional(lambda a: jnp.sin(a) * a, (x,), (v,), w)
    sequential = fd.directional(lambda a: np.sin(a) * a, (x,), (v,), w, complex_step=False)
    exact = float(np.sum(w * (np.cos(x) * x + np.sin(x)) * v))
    assert batched.method == "richardson-batched"
    assert abs(batched.value - exact) <= max(batched.error * 10, 1e-9)
    assert abs(batched.value - sequential.value) <= 1e-8
    pulled = batched_directional(softplus, (x,), (v,), [w], cotangent=np.ones(3), mode="pullback")
    sig = 1 / (1 + np.exp(-x))
    assert abs(pulled.value - float(np.sum(w * sig * (1 - sig) * v))) <= 1e-8


def test_finite_differences_batch_on_a_gpu_and_for_large_inputs(monkeypatch):
    from gradguard.checker.checks._jax import BATCHED_MIN_SIZE, use_batched_fd

    assert not use_batched_fd(10) and use_batched_fd(BATCHED_MIN_SIZE)
    monkeypatch.setenv("GRADGUARD_DEVICE", "gpu")
    assert use_batched_fd(10)
    monkeypatch.setenv("GRADGUARD_BATCHED_FD", "0")
    assert not use_batched_fd(BATCHED_MIN_SIZE)


def test_gg204_skips_a_rule_jax_cannot_differentiate_twice():
    reason = skipped(host_norm_sequential, "GG204")  # bwd runs on the host: JAX refuses loudly, not silently
    assert re.fullmatch(
        r"JAX cannot differentiate the pullback of host_norm_sequential, so it has no second order to judge \(forward "
        r"mode over it raises .+; reverse mode raises .+\)", reason), reason
    assert findings(docs_style, "GG204") == []  # fwd calling the custom_vjp itself is fine for JAX under jit


# jaxls's differentiable solves: fwd calls the custom_vjp itself and keeps its output, which bwd differentiates through,
# so JAX's forward mode meets the custom_vjp (eagerly and under jit) while grad of grad goes through.
@jax.custom_vjp
def sqrt_solved(t):
    return jnp.sqrt(t)


def _sqrt_solved_fwd(t):
    x = sqrt_solved(t)
    return x, x


sqrt_solved.defvjp(_sqrt_solved_fwd, lambda x, g: (g / (2 * x),))


@jax.custom_vjp
def sqrt_solved_half_stopped(t):
    return jnp.sqrt(t)


def _sqrt_solved_half_stopped_fwd(t):
    x = sqrt_solved_half_stopped(t)
    return x, x


# BUG: x * x / stop_gradient(x * x) is 1, so the first order is right, but its derivative 2 / x is not 0
sqrt_solved_half_stopped.defvjp(_sqrt_solved_half_stopped_fwd,
                                lambda x, g: (g / (2 * x) * (x * x / jax.lax.stop_gradient(x * x)),))
_SOLVED = arrays(shape=(3,), min_value=0.5, max_value=4.0)


def test_gg204_takes_reverse_over_reverse_where_forward_mode_cannot_enter_the_rule():
    """The skip said JAX has no second order for such a rule and that grad of grad raises on it: neither was true."""
    x = jnp.array([1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jvp(lambda t: jax.vjp(sqrt_solved, t)[1](jnp.ones(3))[0], (x,), (jnp.ones(3),))
    ok = jax_rule(sqrt_solved, _SOLVED, name="sqrt_solved")
    assert skipped(ok, "GG204") is None and findings(ok, "GG204") == []
    (f,) = findings(jax_rule(sqrt_solved_half_stopped, _SOLVED, name="sqrt_solved_half_stopped"), "GG204")
    assert re.fullmatch(
        r"the second order of sqrt_solved_half_stopped is wrong: along a random direction u, d/dt <w, pullback at "
        r"\(x \+ t u\)\(ybar\)> = \S+ by finite differences of the pullback, but JAX's derivative of the pullback "
        r"\(reverse over reverse, through fwd and bwd: JAX's forward mode raises on this rule\) gives \S+, .+\.",
        f.message), f.message


# jax-fluids' THINC interface centre (diffuse_interface/helper_functions.py), in float32 at a volume fraction of 1e-4
# and a slope of 1e-3, where it takes exp(2e-7) - 1: the pullback's float32 rounding is a staircase whose finite
# differences gave 439 against JAX's -2.3e11 (float64 and JAX agree on -3.3e11 there).
def _thinc_centre(vf, beta):
    tmp = 2.0 * beta
    a, b = jnp.exp(tmp), jnp.exp(tmp * vf)
    return 1.0 / tmp * jnp.log((b - 1.0) / (a - b))


def _thinc_centre_bwd(res, g, stopped=False):
    vf, beta = res
    tmp = 2.0 * beta
    a, b = jnp.exp(tmp), jnp.exp(tmp * vf)
    if stopped:  # BUG: a residual cut off from vf: first order right, its derivative in vf not
        b = jax.lax.stop_gradient(b)
    one_beta = 1.0 / beta
    return (((1.0 - a) * b / ((1.0 - b) * (a - b))) * g,
            (one_beta * vf * b / (b - 1.0) + one_beta * (vf * b - a) / (a - b)
             - 0.5 * one_beta * one_beta * jnp.log((b - 1.0) / (a - b))) * g)


thinc_centre = jax.custom_vjp(_thinc_centre)
thinc_centre.defvjp(lambda vf, beta: (_thinc_centre(vf, beta), (vf, beta)), _thinc_centre_bwd)
thinc_centre_stopped = jax.custom_vjp(_thinc_centre)
thinc_centre_stopped.defvjp(lambda vf, beta: (_thinc_centre(vf, beta), (vf, beta)),
                            lambda res, g: _thinc_centre_bwd(res, g, stopped=True))
_VF = arrays(shape=(6,), dtype="float32", min_value=0.9999e-4, max_value=1.0001e-4)
_BETA = arrays(shape=(6,), dtype="float32", min_value=0.9999e-3, max_value=1.0001e-3)


def test_gg204_leaves_a_float32_staircase_to_float64_and_still_finds_a_second_order_wrong_there():
    assert findings(jax_rule(thinc_centre, _VF, _BETA, name="thinc_centre"), "GG204") == []
    # a float32 rule whose second order is wrong in float64 too (at the volume fractions of most cells)
    bulk = (arrays(shape=(6,), dtype="float32", min_value=0.1, max_value=0.9),
            arrays(shape=(6,), dtype="float32", min_value=0.5, max_value=2.3))
    (f,) = findings(jax_rule(thinc_centre_stopped, *bulk, name="thinc_centre_stopped"), "GG204")
    assert f.message.startswith("the second order of thinc_centre_stopped is wrong in the tangent for argument "), \
        f.message


def test_gg204_judges_numpy_rules_with_the_tape():
    """A NumPy rule's second order comes from the tape (tests/checker/test_second_order.py): a wrong but
    traceable pullback is differentiated consistently, so GG204 runs and leaves the first order to GG201."""
    assert skipped(square_wrong_np, "GG204") is None
    assert findings(square_wrong_np, "GG204") == []


# -- GG601 -------------------------------------------------------------------------------------------
def test_gg601_python_branch_raises_under_jit():
    (f,) = findings(python_branch, "GG601")
    assert f.message == (
        "python_branch raises under jax.jit but not without it, in fwd or bwd: TracerBoolConversionError: "
        "Attempted boolean conversion of traced array with shape bool[]."
    )
    assert "jnp.where or lax.cond" in f.fix
    assert findings(tanh_where_ok, "GG601") == []


def test_gg601_bwd_that_differs_under_jit():
    (f,) = findings(traced_fast_path, "GG601")
    assert re.fullmatch(
        rf"the pullback of traced_fast_path differs under jax\.jit: the tangent for argument 0 \(x\) at \[\d\] is {NUM} under "
        rf"jit, {NUM} without it \(same input and cotangent\)\.",
        f.message,
    ), f.message


def test_gg601_names_rounding_as_a_cause_only_where_the_two_agree_to_three_digits():
    """A tangent that cancels terms near 1e5 (a truncated power law's normaliser at alpha = -1) was 0.202732 under
    jit and 0.202733 without it: the fix's advice on control flow did not describe that. Where the numbers agree
    to three significant digits or more, the fix names rounding too; elsewhere only control flow."""
    from gradguard.checker.checks.compose import _JIT_FIX, _jit_fix

    fix = _jit_fix(0.2027319861, 0.2027330446)
    assert fix.startswith(_JIT_FIX) and "agree to 5 significant digits, so rounding may be the cause" in fix
    assert "rtol=" in fix
    for got, want in [(1.0, 2.0), (0.0, 1e-9), (-1.0, 1.0), (float("nan"), 1.0), ("shape (2,)", "shape (3,)")]:
        assert _jit_fix(got, want) == _JIT_FIX
    (f,) = findings(traced_fast_path, "GG601")
    assert "rounding" not in f.fix


def test_gg601_and_gg602_keep_nondiff_argnums_static():
    assert findings(power_ok, "GG601", "GG602") == []


def test_gg601_gg602_do_not_apply_to_numpy_rules():
    assert skipped(square_wrong_np, "GG601") == "does not apply to numpy rules"
    assert skipped(square_wrong_np, "GG602") == "does not apply to numpy rules"


_MASK = np.array([0.0, 1.0, 1.0])


@jax.custom_vjp
def log_masked(x):
    """log(0) = -inf at [0], sqrt(-1) = NaN at [1] of the second output: non-finite where the primal is."""
    return jnp.log(_MASK * (x**2 + 1.0)), jnp.sqrt(_MASK * x**2 - (1.0 - _MASK))


def _log_masked_bwd(x, gs):
    g, h = gs
    return (g * _MASK * 2 * x / (x**2 + 1.0) + h * _MASK * jnp.sign(x),)


def _log_masked_traced_bwd(x, gs):
    g, h = gs
    if isinstance(x, jax.core.Tracer):  # the path jit takes drops the second output's cotangent
        return (g * _MASK * 2 * x / (x**2 + 1.0),)
    return _log_masked_bwd(x, gs)


log_masked.defvjp(lambda x: (log_masked(x), x), _log_masked_bwd)
non_finite_ok = jax_rule(log_masked, arrays(shape=(3,), min_value=0.5, max_value=2.0), name="non_finite_ok")


@jax.custom_vjp
def log_masked_traced(x):
    return jnp.log(_MASK * (x**2 + 1.0)), jnp.sqrt(_MASK * x**2 - (1.0 - _MASK))


log_masked_traced.defvjp(lambda x: (log_masked_traced(x), x), _log_masked_traced_bwd)
non_finite_traced = jax_rule(log_masked_traced, arrays(shape=(3,), min_value=0.5, max_value=2.0),
                             name="non_finite_traced")


def test_gg601_gg602_equal_non_finite_values_agree_and_do_not_hide_a_difference_beside_them():
    """-inf against -inf and NaN against NaN are the same value under jit and vmap as without them; they must
    neither be reported (they were: "output at [0] is -inf under jit, -inf without it") nor make a real
    difference beside them pass."""
    assert findings(non_finite_ok, "GG601", "GG602") == []
    (jit,) = findings(non_finite_traced, "GG601")
    assert re.fullmatch(
        rf"the pullback of non_finite_traced differs under jax\.jit: the tangent for argument 0 \(x\) at \[[12]\] is {NUM} "
        rf"under jit, {NUM} without it \(same input and cotangent\)\.", jit.message), jit.message


# -- GG602 -------------------------------------------------------------------------------------------
def test_gg602_host_callback_declared_batch_aware():
    (f,) = findings(host_norm_batched, "GG602")
    m = re.fullmatch(
        rf"the pullback of host_norm_batched differs under jax\.vmap: for example (\d) of a batch of 3, the tangent "
        rf"for argument 0 \(x\) at \[\d\] is {NUM} under vmap, {NUM} when called alone \(same cotangent\)\.",
        f.message,
    )
    assert m, f.message
    assert f.location.startswith(f"example {m[1]}, tangent for argument 0")
    assert findings(host_norm_sequential, "GG602") == []
    assert findings(host_norm_batched, "GG601") == []  # jit alone is fine


def test_gg602_python_branch_raises_under_vmap():
    (f,) = findings(python_branch, "GG602")
    assert f.message == (
        "python_branch raises under jax.vmap (a batch of 3 inputs) but not one example at a time: "
        "TracerBoolConversionError: Attempted boolean conversion of traced array with shape bool[]."
    )
    assert findings(tanh_where_ok, "GG602") == []


def test_gg602_batches_only_inputs_of_equal_shapes():
    shapes = hnp.array_shapes(min_dims=1, max_dims=1, min_side=1, max_side=6)
    varied = jax_rule(softplus, arrays(shape=shapes), name="varied")
    report = check(varied, select=["GG602"])
    assert report.passed
    assert "GG602" in report.rules[0].checks_run  # some batches matched; the others were skipped per input


# -- bad input ---------------------------------------------------------------------------------------
def test_a_bwd_returning_the_wrong_pytree_is_a_contract_finding():
    report = check(extra_tangent, select=["GG1", "GG2", "GG6"])
    result = report.rules[0]
    assert result.verdict == "fail" and result.error is None
    assert [f.check_id for f in result.findings] == ["GG103"]
    assert result.findings[0].message == "the pullback of extra_tangent must return one tangent per argument (1), but returned 2."
    assert {"GG203", "GG601", "GG602"} <= {s["id"] for s in result.checks_skipped}


def test_a_rule_jax_cannot_trace_is_named():
    report = check(numpy_inside, select=["GG203", "GG601"])
    (f,) = report.findings
    assert f.message.startswith(
        "numpy_inside raises under jax.jit but not without it, in the primal (the function underneath the custom_vjp): "
        "TracerArrayConversionError: The numpy.ndarray conversion method __array__() was called on traced array"
    )
    reasons = {s["id"]: s["reason"] for s in report.rules[0].checks_skipped}
    assert reasons["GG203"].startswith("primal is not traceable by JAX: ")


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU, so asking for one succeeds")
def test_gpu_asked_where_none_exists_errors_the_jax_rules_only(monkeypatch):
    monkeypatch.setenv("GRADGUARD_DEVICE", "gpu")
    report = check([softplus_ok, square_wrong_np], select=["GG102", "GG203"])
    jax_result, numpy_result = report.rules
    assert jax_result.verdict == "error" and jax_result.error["type"] == "PlatformUnavailable"
    assert jax_result.error["message"].startswith("GPU requested but JAX sees no GPU here (devices: cpu)")
    assert numpy_result.verdict == "pass" and numpy_result.error is None  # still checked; GG203 needs the device
    assert {s["id"]: s["reason"] for s in numpy_result.checks_skipped}["GG203"].startswith("GPU requested")


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU, so asking for one succeeds")
def test_cli_device_gpu_without_a_gpu(tmp_path, monkeypatch):
    module = tmp_path / "rules.py"
    module.write_text(
        "import jax, jax.numpy as jnp\nfrom gradguard import arrays, jax_rule\n\n"
        "@jax.custom_vjp\ndef sp(x):\n    return jnp.logaddexp(0.0, x)\n\n"
        "sp.defvjp(lambda x: (jnp.logaddexp(0.0, x), jax.nn.sigmoid(x)), lambda s, g: (g * s,))\n"
        "sp_rule = jax_rule(sp, arrays(shape=(3,)))\n"
    )
    result = CliRunner().invoke(main, ["check", str(module), "--device", "gpu", "--select", "GG102"])
    assert result.exit_code == 1, result.output
    assert "GPU requested but JAX sees no GPU here" in result.output
    monkeypatch.setenv("GRADGUARD_DEVICE", "cpu")
    result = CliRunner().invoke(main, ["check", str(module), "--device", "cpu", "--select", "GG102,GG601"])
    assert result.exit_code == 0, result.output


def _runs_out_of_gpu_memory(x):
    return x * 2


@rrule(_runs_out_of_gpu_memory, arrays(shape=(3,)))
def gpu_out_of_memory_rrule(x):
    raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8589934592 bytes.")


def test_the_gpu_running_out_of_memory_is_an_error_not_a_finding(monkeypatch):
    """The GPU is shared (other jobs, other programs): its memory running out says nothing about the rule.
    On the CPU, XLA's out-of-memory is the host's, which stays the rule's exception (test_memory_limit.py)."""
    monkeypatch.setenv("GRADGUARD_DEVICE", "gpu")
    result = check(gpu_out_of_memory_rrule, select=["GG101", "GG201"]).rules[0]
    assert result.verdict == "error" and result.findings == [] and result.error["type"] == "DeviceMemory"
    assert result.error["message"] == (
        "the GPU ran out of memory in the forward of gpu_out_of_memory_rrule (JaxRuntimeError: RESOURCE_EXHAUSTED: "
        "Out of memory while trying to allocate 8589934592 bytes.); nothing was established about the rule. Other "
        "processes on the GPU may hold its memory: check it with fewer jobs sharing the GPU (--jobs), with smaller "
        "inputs, or with more free GPU memory."
    )
    assert "JaxRuntimeError" in result.error["traceback"]  # the rule's own traceback, for whoever reads further
    monkeypatch.setenv("GRADGUARD_DEVICE", "cpu")
    on_cpu = check(gpu_out_of_memory_rrule, select=["GG101"]).rules[0]
    assert on_cpu.verdict == "fail" and "raised JaxRuntimeError: RESOURCE_EXHAUSTED" in on_cpu.findings[0].message


def test_checks_leave_the_gpu_to_share_unless_the_user_chose(tmp_path):
    """JAX takes 75% of a GPU when its backend starts, in every process, so the second process of a run
    (`--jobs`) found no GPU; gradguard turns that off before any rule's module loads, unless the user set it."""
    import subprocess
    import sys

    module = tmp_path / "rules.py"  # reads the setting as JAX would at its GPU backend's start: at import here
    module.write_text("import os\nSEEN = os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE')\n")
    probe = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); from gradguard import check; check({str(module)!r}); "
             "import rules; print(rules.SEEN)")
    env = {k: v for k, v in __import__("os").environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    seen = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=ROOT)
    assert seen.stdout.strip() == "false", seen.stderr[-2000:]
    chosen = subprocess.run([sys.executable, "-c", probe], env={**env, "XLA_PYTHON_CLIENT_PREALLOCATE": "true"},
                            capture_output=True, text=True, cwd=ROOT)
    assert chosen.stdout.strip() == "true", chosen.stderr[-2000:]


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU: its backend started")
def test_a_gpu_backend_that_failed_to_start_is_named(monkeypatch):
    """A CUDA-enabled JAX whose backend failed to start (its device memory taken, a driver mismatch) says so,
    instead of only "no GPU here"."""
    from jax._src import xla_bridge

    import gradguard.engines.jax_engine as ej
    from gradguard.engines.errors import PlatformUnavailable

    monkeypatch.setattr(xla_bridge, "_backend_errors", {"cuda": "INTERNAL: CUDA_ERROR_OUT_OF_MEMORY: out of memory"})
    with pytest.raises(PlatformUnavailable) as raised:
        ej.configure("gpu")
    assert str(raised.value) == (
        "GPU requested but JAX sees no GPU here (devices: cpu). JAX's cuda backend is installed but did not "
        "start: INTERNAL: CUDA_ERROR_OUT_OF_MEMORY: out of memory. Run on a GPU worker or use --device cpu."
    )


def test_a_device_jax_sees_but_cannot_run_on_errors_the_jax_rules_only(monkeypatch):
    """Seen on a GPU machine inside the service's sandbox: JAX started its CUDA backend, then its first
    compilation failed ("libdevice not found"), which crashed the whole run. Each JAX rule now gets an error
    naming the problem, and the NumPy rules are still checked."""
    from gradguard.checker import jax_rules

    def fails():
        raise jax.errors.JaxRuntimeError("INTERNAL: libdevice not found at ./libdevice.10.bc")

    monkeypatch.setattr(jax_rules, "_configured", None)
    monkeypatch.setattr(jax_rules, "_warm_up", fails)
    jax_result, numpy_result = check([softplus_ok, square_wrong_np], select=["GG102", "GG203"]).rules
    assert jax_result.verdict == "error" and jax_result.error["type"] == "PlatformUnavailable"
    assert jax_result.error["message"] == (
        "CPU requested, and JAX sees it, but JAX cannot run a program on it (JaxRuntimeError: INTERNAL: libdevice "
        "not found at ./libdevice.10.bc). Check JAX's installation."
    )
    assert numpy_result.verdict == "pass" and numpy_result.error is None
    assert {s["id"]: s["reason"] for s in numpy_result.checks_skipped}["GG203"].startswith("CPU requested, and JAX")


def test_an_unknown_device_name_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("GRADGUARD_DEVICE", "tpu")
    result = check(softplus_ok, select=["GG102"]).rules[0]
    assert result.verdict == "error" and result.error["message"] == (
        "GRADGUARD_DEVICE='tpu' names no device JAX can use here: use cpu or gpu."
    )


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="JAX sees no GPU here (jax.devices('gpu') is unavailable)")
def test_jax_rules_are_checked_on_the_gpu(monkeypatch):
    monkeypatch.setenv("GRADGUARD_DEVICE", "gpu")
    report = check([softplus_ok, stopped_residual], select=["GG102", "GG201", "GG203", "GG204", "GG601", "GG602"])
    assert report.environment["device"].startswith(("gpu", "cuda"))
    ok, broken = report.rules
    assert ok.verdict == "pass", [f.message for f in ok.findings]
    assert [f.check_id for f in broken.findings] == ["GG204"]  # batched finite differences on the GPU


def test_a_counterexample_shows_every_draw_of_a_label_drawn_more_than_once():
    """GG602 draws one "batch input" per extra example and one "batch cotangent" per example: a report that
    kept one value per label could not show the batch that failed."""
    rules = {r.name: r for r in rules_in(load_module(ROOT / "examples" / "jax_rules.py"))}
    (found,) = check(rules["host_norm"], select=["GG602"]).findings
    assert list(found.counterexample["draws"]) == [
        "batch input", "batch input (2)", "batch cotangent", "batch cotangent (2)", "batch cotangent (3)"]


# -- examples and the corpus -------------------------------------------------------------------------
EXAMPLES = {
    "softplus": [],
    "logsumexp": [],
    "ignores_cotangent": ["GG201", "GG202", "GG203"],
    "traced_fast_path": ["GG601"],
    "python_branch": ["GG601", "GG602"],
    "stopped_residual": ["GG204"],
    "host_norm": ["GG602"],
}


def test_examples_fail_the_checks_they_illustrate():
    rules = {r.name: r for r in rules_in(load_module(ROOT / "examples" / "jax_rules.py"))}
    assert set(rules) == set(EXAMPLES)
    for name, ids in EXAMPLES.items():
        select = ids or ["GG203", "GG204", "GG6"]
        got = {f.check_id for f in check(rules[name], select=select, max_examples=10).findings}
        assert got == set(ids), (name, got)


CORPUS = [ROOT / "tests" / "corpus" / "jax_correct.py", ROOT / "tests" / "corpus" / "jax_bugs.py"]


def test_the_corpus_has_at_least_ten_labelled_jax_rules():
    rules = [(path, r) for path in CORPUS for r in rules_in(load_module(path))]
    labels = {name: label for path in CORPUS for name, label in load_module(path).LABELS.items()}
    assert len(rules) >= 10 and all(r.kind == "jax" for _, r in rules)
    assert {r.name for _, r in rules} == set(labels)
    assert sum(1 for label in labels.values() if label["expect"]) >= 10


# Each JAX corpus rule's findings against its label, every family: tests/checker/test_corpus.py
# (test_all_family_ids_match_label), which checks these two modules with the rest of the corpus.


def test_a_second_check_of_the_same_rule_gives_the_same_report():
    """Checks may keep scratch state on a rule; the runner resets it, so an earlier check of the same
    (loaded, cached) rule never changes what a later one draws or reports."""
    from pathlib import Path

    from gradguard.checker.loader import load_module, rules_in

    module = load_module(Path(__file__).resolve().parents[2] / "examples" / "jax_rules.py")
    for rule in rules_in(module):
        first = check(rule, seed=3, ignore=["GG5"], max_examples=8).to_dict()["rules"]
        second = check(rule, seed=3, ignore=["GG5"], max_examples=8).to_dict()["rules"]
        for r in first + second:
            r.pop("duration_s")
        assert first == second, rule.name


# -- GG602 judges vmap only ------------------------------------------------------------------------------------------
# ott-jax's norm has a custom_jvp whose primal output at x = 0 is norm(ones): jax.vjp gives 1.732 where the function
# gives 0. GG602 compared vmap(jax.vjp(f))'s values with plain f(x) calls and reported "differs under vmap", though
# jax.vjp of one example alone gives the same 1.732: that is GG102's finding, and vmap plays no part in it.
@jax.custom_jvp
def sin_shifted_primal(x):
    return jnp.sin(x)


@sin_shifted_primal.defjvp
def _sin_shifted_primal_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    return jnp.sin(x) + 1.0, jnp.cos(x) * dx  # BUG: the primal output differs from the function's


shifted_primal_rule = jax_rule(sin_shifted_primal, arrays(shape=(3,)))


def test_a_forward_that_differs_from_the_primal_without_vmap_is_gg102_not_gg602():
    result = check(shifted_primal_rule, select=["GG102", "GG602"]).rules[0]
    assert result.error is None, result.error
    assert [f.check_id for f in result.findings] == ["GG102"], [f.message for f in result.findings]
    assert result.checks_run == ["GG102", "GG602"]


# -- a rule's own host callback that raises does not flood stderr ------------------------------------------------------
@jax.custom_vjp
def host_square(x):
    return x * x


def _host_square_bwd(x, g):
    def host(x, g):
        if np.any(np.abs(x) > 5):
            raise ValueError("this host code refuses inputs above 5")
        return 2 * x * g

    return (jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x, g, vmap_method="sequential"),)


host_square.defvjp(lambda x: (x * x, x), _host_square_bwd)
host_square_rule = jax_rule(host_square, arrays(shape=(3,)))


def test_what_a_rules_host_callback_raises_is_not_logged_during_a_check_but_is_outside_it(caplog):
    with caplog.at_level("ERROR", logger="jax._src.callback"):
        result = check(host_square_rule, select=["GG101", "GG601", "GG602"]).rules[0]
    assert result.error is None or result.error["type"] != "InternalError", result.error
    assert not [r for r in caplog.records if r.name == "jax._src.callback"], [r.getMessage() for r in caplog.records]
    caplog.clear()
    with caplog.at_level("ERROR", logger="jax._src.callback"), pytest.raises(Exception):
        jax.grad(lambda x: host_square(x).sum())(jnp.full(3, 6.0))  # a user's own program keeps JAX's log
    assert [r.getMessage() for r in caplog.records if r.name == "jax._src.callback"] == ["jax.pure_callback failed"]


def _zero_first_double(jvp_keeps_zero: bool):
    @jax.custom_jvp
    def zero_first_double(x):
        return 2.0 * x.at[0].set(0.0)  # `.at` on the input: JAX code that needs a JAX array

    @zero_first_double.defjvp
    def _jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return zero_first_double(x), 2.0 * t.at[0].set(0.0) if jvp_keeps_zero else 2.0 * t

    return zero_first_double


def test_a_primal_that_uses_at_on_its_input_gets_jax_arrays():
    """jaxley's tree solve (optimize_for_gpu=True) calls `.at` on an input: its primal, run eagerly on the NumPy
    arrays themselves, raised AttributeError (a false GG102 that skipped GG201 and the safety matrix), and the
    jax column's eager value_and_grad handed its jvp NumPy-backed values (every cell "raised")."""
    spec = arrays(shape=(3,), min_value=-2.0, max_value=2.0)
    right = check(jax_rule(_zero_first_double(True), spec, name="at_on_input")).rules[0]
    assert right.verdict == "pass", [(f.check_id, f.message) for f in right.findings]
    assert {"GG102", "GG201", "GG501"} <= set(right.checks_run)
    assert {c["status"] for c in right.safety_matrix["cells"] if c["engine"] == "jax"} == {"right"}
    wrong = check(jax_rule(_zero_first_double(False), spec, name="at_on_input_slip"), select=["GG201"]).findings
    assert [f.check_id for f in wrong] == ["GG201"]


# LAPACK's singular vectors of this matrix have other signs than those of every matrix around it (the exact diagonal
# one included): the SVD's pullback jumps at x alone, in elements a covector may not read, and its derivative at x (in
# x's signs: -113.434 for pyscfad's SVD jvp at seed 1) is not the one finite differences see around it (264.438).
SIGN_FLIP = np.array([[1.307481, 4.497259e-42], [-1.353762e-219, 1.756214]])


def _svd_rule(stopped: bool, name: str, spec):
    import jax
    import jax.numpy as jnp

    def plain(a):
        return tuple(jnp.linalg.svd(a, full_matrices=True))

    @jax.custom_jvp
    def svd(a):
        return plain(a)

    @svd.defjvp
    def svd_jvp(primals, tangents):
        (a,), (da,) = primals, tangents
        if stopped:  # right first order, no second: the jvp's coefficients are cut off from a
            _, lin = jax.linearize(plain, jax.lax.stop_gradient(a))
            return plain(a), lin(da)
        return jax.jvp(plain, (a,), (da,))

    return jax_rule(svd, spec, name=name)


def test_a_pullback_that_jumps_at_the_input_alone_has_no_second_order_to_judge():
    from hypothesis import strategies as st

    for seed in range(3):
        report = check(_svd_rule(False, "svd_sign_flip", st.just(SIGN_FLIP)), select=["GG204"], seed=seed)
        assert report.findings == [], (seed, [f.message for f in report.findings])


def test_a_stopped_second_order_of_an_svd_still_fails_gg204():
    (found,) = findings(_svd_rule(True, "svd_stopped", arrays(shape=(2, 2), min_value=0.5, max_value=2.0)), "GG204")
    assert found.message.startswith("the second order of svd_stopped is wrong"), found.message


@jax.custom_gradient
def _clip_gradient(x, bound):
    def grad_fn(g):
        return (jnp.clip(g, -1.0, 1.0), None)  # rlax's clip_gradient: a gradient clipped on purpose

    return x, grad_fn


@jax.custom_gradient
def _softplus_cg(x):
    return jnp.logaddexp(0.0, x), lambda g: (g * jax.nn.sigmoid(x),)


def test_a_custom_gradient_rule_is_named_and_placed_by_the_users_function():
    """jax.custom_gradient wraps the function in JAX's own ``wrapped_fun(*args)``: the rule's location pointed into
    JAX and its failing input read ``wrapped_fun(arg0=...)``."""
    right = check(jax_rule(_softplus_cg, arrays(shape=(3,))), seed=0)
    assert right.rules[0].verdict == "pass" and right.rules[0].name == "_softplus_cg", right.rules[0]
    assert right.rules[0].source_file.endswith("test_jax_checks.py")
    (found,) = findings(jax_rule(_clip_gradient, arrays(shape=(2,)), arrays(shape=())), "GG201")
    assert found.rule == "_clip_gradient" and found.counterexample["call"].startswith("_clip_gradient(x=array("), \
        found.counterexample


@jax.custom_vjp
def scaled_square(a, p):
    return a * p ** 2


def _scaled_square_fwd(a, p):
    return a * p ** 2, (a, p)


def _scaled_square_bwd(res, g):
    a, p = res
    return g * jax.lax.stop_gradient(p ** 2), g * 2 * a * p  # the first tangent's p is cut from the second order


scaled_square.defvjp(_scaled_square_fwd, _scaled_square_bwd)


def test_gg204_gives_the_numbers_of_the_tangent_it_names():
    """TFP's igammainv: GG204 named "the tangent for argument 0" beside numbers that summed both arguments' tangents
    (21.303 against 24.5517), which no reader could recover from argument 0 alone. Now the named tangent's own
    numbers come first, the whole sum after them."""
    rule = jax_rule(scaled_square, arrays(shape=(3,), min_value=0.5, max_value=2.0),
                    arrays(shape=(3,), min_value=0.5, max_value=2.0))
    (f,) = findings(rule, "GG204")
    m = re.fullmatch(
        rf"the second order of scaled_square is wrong in the tangent for argument 0 \(a\): along a random direction u \(every "
        rf"argument moving\), d/dt <w_0, pullback at \(x \+ t u\)\(ybar\) for argument 0 \(a\)> = {NUM} by finite differences "
        rf"of the pullback, but JAX's derivative of the pullback \(jvp of vjp, through fwd and bwd\) gives {NUM}, {NUM} "
        rf"apart where the tolerance allows {NUM} \(over every argument's tangent: {NUM} against {NUM}\)\.", f.message)
    assert m, f.message
    assert f.location == "argument 0" and (f.expected, f.actual) == (m[1], m[2])
    assert float(m[1]) != float(m[2]) and float(m[5]) != float(m[6])
    assert float(m[3]) == pytest.approx(abs(float(m[1]) - float(m[2])), rel=0.02) and 0 < float(m[4]) < float(m[3])


SAFE_EPS = 1e-7


@jax.custom_jvp
def safe_acos(x):
    return jnp.arccos(x)


@safe_acos.defjvp
def _safe_acos_jvp(primals, tangents):
    """jax-md's safe_acos (jax_md/_nn/uma/common/rotation.py): acos' with x clipped 1e-7 inside +-1."""
    (x,), (x_dot,) = primals, tangents
    x_clamped = jnp.clip(x, -1 + SAFE_EPS, 1 - SAFE_EPS)
    return safe_acos(x), -x_dot / jnp.maximum(jnp.sqrt(1 - x_clamped ** 2), SAFE_EPS)


@jax.custom_jvp
def cut_acos(x):
    return jnp.arccos(x)


@cut_acos.defjvp
def _cut_acos_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    return cut_acos(x), -x_dot / jax.lax.stop_gradient(jnp.sqrt(1 - x ** 2))  # no second order through the root


def test_gg204_gives_no_verdict_where_the_pullback_has_a_kink_at_the_input():
    """Seed 10 of the real-world corpus drew x = -0.9999998999999999, one float64 step inside safe_acos' clip: along u
    the pullback runs on as acos' on one side (JAX's second order, 1.71248e10, is mpmath's) and is the clip's constant
    on the other, and central differences across the two gave 77770.1, a false GG204. A kink of the pullback at x has
    no second derivative to judge; a second order that is wrong away from the clip still fails."""
    from gradguard.checker.reproducer import replay

    spec = arrays(shape=(4,), min_value=-1 + SAFE_EPS, max_value=1 - SAFE_EPS)
    x = np.array([1.7783071825400792e-137, 0.11737905601973708, 0.5318655709993795, -0.9999998999999999])
    draws = [np.array([0.0, 0.0, 2.2189419687701406, -0.3738604535661887]),
             (np.array([0.0, 0.0, 2.7828160801498694, -2.813032685775953]),),
             (np.array([0.0, 0.0, 0.0, 1.4564201188577277]),)]
    assert replay(jax_rule(safe_acos, spec), "GG204", (x,), draws) == []
    (f,) = findings(jax_rule(cut_acos, spec), "GG204")
    assert f.message.startswith("the second order of cut_acos is wrong: "), f.message


def _square_with_bwd(name, bwd):
    """x**2 / 2 elementwise, summed, with the pullback g * x computed as ``bwd(x, g)``."""
    @jax.custom_vjp
    def half_square(x):
        return 0.5 * jnp.sum(x ** 2)

    half_square.defvjp(lambda x: (half_square(x), x), lambda x, g: (bwd(x, g),))
    return jax_rule(half_square, arrays(shape=(3,), min_value=-2.0, max_value=2.0), name=name)


# g * x with x's size taken as sqrt(x**2): the pullback is smooth, its JAX derivative 0/0 = NaN where x = 0
_sqrt_of_square = _square_with_bwd("sqrt_of_square", lambda x, g: g * jnp.where(x >= 0, 1.0, -1.0) * jnp.sqrt(x ** 2))
_plain_product = _square_with_bwd("plain_product", lambda x, g: g * x)


def test_gg204_reports_a_second_order_jax_gives_as_nan_where_the_pullback_is_smooth():
    """PennyLane's fidelity of two density matrices (a custom_vjp whose bwd calls eigh) at I and I: JAX's jvp of its
    vjp is NaN (eigh's derivative where eigenvalues repeat), while the pullback moves smoothly (central differences
    2.99999975 and 2.9999999975 at steps 1e-3 and 1e-4), and GG204 said nothing (PyTorch's twin failed GG705). A
    Hessian-vector product through the rule gets the NaN. Here: g * x with |x| taken as sqrt(x**2), at x = 0."""
    (f,) = findings(_sqrt_of_square, "GG204")
    m = re.fullmatch(
        rf"the second order of sqrt_of_square is not finite: along a random direction u, d/dt <w, pullback at "
        rf"\(x \+ t u\)\(ybar\)> = {NUM} by finite differences of the pullback \(the one-sided slopes at every finer "
        rf"step agree: the pullback is smooth here\), but JAX's derivative of the pullback \(jvp of vjp, through fwd "
        rf"and bwd\) gives nan, so a program that differentiates this gradient \(a Hessian-vector product, jax.hessian\) "
        rf"gets it too\.",
        f.message,
    )
    assert m and f.actual == "nan", f.message
    ybar, (u,), (w,) = (np.asarray(eval(v, {"array": np.array})) for v in f.counterexample["draws"].values())
    assert float(m[1]) == pytest.approx(float(ybar) * float(np.dot(u, w)), rel=1e-6)  # d/dt <w, g (x + t u)> at any x
    assert "double-where" in f.fix
    assert findings(_plain_product, "GG204") == []


@jax.custom_vjp
def _half_abs_square(x):
    return 0.5 * jnp.sum(x * jnp.abs(x))


_half_abs_square.defvjp(lambda x: (_half_abs_square(x), x), lambda x, g: (g * jnp.sqrt(x ** 2),))


def test_gg204_only_warns_of_a_nan_second_order_where_the_pullback_has_a_kink():
    """The pullback g |x| (of x |x| / 2, its |x| taken as sqrt(x**2)) has a kink at x = 0: no second derivative there
    for JAX's NaN to be wrong about, even where u leaves that element still and the pullback is smooth along u (JAX
    multiplies the element's 0/0 by u's 0). A warning, as GG705 gives PyTorch's NaN at such an input."""
    rule = jax_rule(_half_abs_square, arrays(shape=(3,), min_value=-2.0, max_value=2.0), name="half_abs_square")
    (f,) = findings(rule, "GG204")
    assert f.severity == "warning", f.message
    assert f.message.startswith("JAX's derivative of the pullback of half_abs_square gives nan at an input where the "
                                "pullback has no derivative"), f.message
    assert check(rule, select=["GG204"]).rules[0].verdict == "pass"


# -- float32 rules under JAX's 64-bit types ----------------------------------------------------------------------------
# gradguard runs JAX with jax_enable_x64 on. synjax's float32 slogdet makes its inverse with jnp.eye(n), float64
# there, and JAX refuses the float64 tangent beside the float32 primal: GG101 says why, in its fix.
@jax.custom_jvp
def trace_inv(x):
    return jnp.trace(jnp.linalg.inv(x))


@trace_inv.defjvp
def _trace_inv_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    inv = jnp.linalg.solve(x, jnp.eye(x.shape[0]))  # BUG with 64-bit types on: jnp.eye is float64, so is the tangent
    return trace_inv(x), -jnp.trace(inv @ t @ inv)


@jax.custom_jvp
def trace_inv_typed(x):
    return jnp.trace(jnp.linalg.inv(x))


@trace_inv_typed.defjvp
def _trace_inv_typed_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    inv = jnp.linalg.solve(x, jnp.eye(x.shape[0], dtype=x.dtype))
    return trace_inv_typed(x), -jnp.trace(inv @ t @ inv)


PSD_F32 = arrays(shape=(2, 2), dtype="float32", structure="psd")


def test_a_float32_rule_that_makes_float64_constants_gets_gg101_with_the_reason():
    rule = jax_rule(trace_inv, PSD_F32, name="trace_inv_f32_rule")
    [finding] = [f for f in check(rule, seed=0, select=["GG101"]).rules[0].findings]
    assert finding.message.startswith(  # trace_inv itself runs: its jvp rule, which reverse mode goes through, raises
        "the forward of trace_inv_f32_rule raised ReverseModeError: reverse mode through custom_jvp trace_inv failed (jax.vjp "
        "linearizes its jvp rule to transpose it; the function itself runs at this input): TypeError: Custom JVP rule "
        "must produce primal and tangent outputs")
    assert finding.fix == (
        "Make the forward handle this input, or narrow the argument specs if it is outside the rule's domain. gradguard "
        "runs JAX with 64-bit types on (jax_enable_x64), as programs that use float64 do: there an array made without a "
        "dtype (jnp.eye(n), jnp.zeros(n), jnp.asarray(1.0)) is float64 and promotes the float32 values it meets. Give "
        "such arrays the argument's dtype (jnp.eye(n, dtype=x.dtype)).")


def test_the_same_rule_with_typed_constants_passes_gg101():
    rule = jax_rule(trace_inv_typed, PSD_F32, name="trace_inv_typed_f32_rule")
    assert check(rule, seed=0, select=["GG101"]).rules[0].findings == []


# -- a custom_vjp whose function returns a NamedTuple and whose fwd returns a plain tuple ----------------------
# Kabsch-Cookbook's safe_eigh returns jnp.linalg.eigh's EighResult, and its fwd a plain tuple, as JAX allows: the
# checker's cotangents then had the tuple's structure, jax.vjp of the function itself refused them ("pytree
# structure error"), and GG203 was skipped at most inputs with "JAX cannot reverse-differentiate it" (which JAX
# can), and GG602 at every one.
from typing import NamedTuple  # noqa: E402


class _SinCos(NamedTuple):
    sin: object
    cos: object


def _sincos_rule(sign):
    @jax.custom_vjp
    def sincos(x):
        return _SinCos(jnp.sin(x), jnp.cos(x))

    def fwd(x):
        return (jnp.sin(x), jnp.cos(x)), x

    def bwd(x, g):
        gs, gc = g
        return (gs * jnp.cos(x) + sign * gc * jnp.sin(x),)

    sincos.defvjp(fwd, bwd)
    return jax_rule(sincos, arrays(shape=(3,)), name="sincos" if sign < 0 else "sincos_wrong_sign")


def test_a_named_tuple_function_with_a_tuple_fwd_is_judged_by_jax_at_every_input():
    report = check(_sincos_rule(-1.0), select=["GG203", "GG602"])
    result = report.rules[0]
    assert result.verdict == "pass", (result.error, [(f.check_id, f.message) for f in result.findings])
    assert result.checks_run == ["GG203", "GG602"] and result.checks_partial == [] and result.checks_skipped == []
    (wrong,) = findings(_sincos_rule(1.0), "GG203")
    assert wrong.message.startswith("the pullback of sincos_wrong_sign disagrees with the JAX reference gradient")


# -- GG105 on a float32 JAX rule promoted by a constant made without a dtype -------------------------------
def _eye_scaled_rule(dtype_of_eye):
    @jax.custom_vjp
    def scaled(x):
        return 2.0 * x

    def fwd(x):
        return 2.0 * x, None

    def bwd(_, g):
        eye = jnp.eye(g.shape[0]) if dtype_of_eye is None else jnp.eye(g.shape[0], dtype=g.dtype)
        return (2.0 * (eye @ g),)  # without a dtype, eye is float64 under jax_enable_x64

    scaled.defvjp(fwd, bwd)
    return jax_rule(scaled, arrays(shape=(3,), dtype="float32"), name="eye_scaled")


def test_gg105_on_a_float32_jax_rule_says_64_bit_types_promote_it():
    """A probe's float32 truncated SVD built jnp.eye(n) without a dtype: its float64 tangent appears only with JAX's
    64-bit types on, and the fix said only "cast the tangent"."""
    (f,) = findings(_eye_scaled_rule(None), "GG105")
    assert f.message == "the tangent for argument 0 (x) has dtype float64, but the argument has dtype float32."
    assert f.fix == (
        "Cast the tangent: .astype(float32) (a real argument needs a real tangent). gradguard runs JAX with 64-bit "
        "types on (jax_enable_x64), as programs that use float64 do: there an array made without a dtype (jnp.eye(n), "
        "jnp.zeros(n), jnp.asarray(1.0)) is float64 and promotes the float32 values it meets, which JAX's default "
        "32-bit mode hides. Give such arrays the argument's dtype (jnp.eye(n, dtype=x.dtype)).")
    assert findings(_eye_scaled_rule("float32"), "GG105") == []


# -- GG203 blames the argument finite differences confirm, where JAX's own reference is wrong in another -----------
# nufftax's type-3 NUFFT calls its own spread custom_vjp, whose cotangent for the points is wrong: JAX's derivative of
# the function underneath the rule is wrong in x, the rule is right there and wrong (conjugated) in c. The finding
# named x, confirmed by finite differences along the difference of both arguments, which c's part carried.
def _inner_off_for_a(scale_a):
    @jax.custom_vjp
    def through(a):
        return a

    through.defvjp(lambda a: (a, None), lambda _, g: (scale_a * g,))  # JAX's reference inherits this factor for a
    return through


def _product_rule(scale_b):
    through = _inner_off_for_a(1.0 + 1e-4)

    @jax.custom_vjp
    def product(a, b):
        return through(a) * b

    product.defvjp(lambda a, b: (a * b, (a, b)), lambda r, g: (g * r[1], scale_b * g * r[0]))
    return jax_rule(product, arrays(shape=(3,), min_value=0.5, max_value=2.0),
                    arrays(shape=(3,), min_value=0.5, max_value=2.0), name="product")


def test_gg203_names_the_argument_whose_own_difference_finite_differences_confirm():
    (f,) = findings(_product_rule(3.0), "GG203")
    assert f.location.startswith("argument 1"), f.message
    assert f.message.endswith("Finite differences of the primal along the difference of the two in the tangent for "
                              "argument 1 (b) agree with JAX."), f.message
    assert findings(_product_rule(1.0), "GG203") == []  # right in b, and JAX's error in a is no finding


# netket's expect is differentiable in its parameters and takes its integer samples as an ordinary argument: JAX asks
# bwd for a float0 zero there, its own "no tangent", and GG106 called it a tangent for an argument that has none.
_PICKS = np.array([0, 2, 2, 1, 3, 0])


@jax.custom_vjp
def picked_squares(p, s):
    return jnp.sum(p[s] ** 2)


def _picked_squares_bwd(res, g):
    p, s = res
    return jnp.zeros_like(p).at[s].add(2 * p[s] * g), np.zeros(s.shape, dtype=jax.dtypes.float0)


picked_squares.defvjp(lambda p, s: (picked_squares(p, s), (p, s)), _picked_squares_bwd)


def test_a_float0_cotangent_for_an_integer_argument_is_no_tangent():
    from hypothesis import strategies as st

    rule = jax_rule(picked_squares, arrays(shape=(4,), min_value=0.5, max_value=2.0), st.just(_PICKS), name="picked")
    report = check(rule, select=["GG1", "GG201", "GG202", "GG203"])
    assert report.rules[0].error is None and report.findings == [], report.findings
    assert {"GG106", "GG201", "GG202", "GG203"} <= set(report.rules[0].checks_run)


# A fixed argument given as a JAX array: JAX gives a float one a tangent space as it does a NumPy one (jax-fluids
# passes jnp arrays there), and bwd must return a cotangent for it; GG106 asked for None. An integer one has none.
@jax.custom_vjp
def scaled(x, s):
    return x * s


scaled.defvjp(lambda x, s: (x * s, (x, s)), lambda res, g: (g * res[1], g * res[0]))


def test_a_float_jax_array_constant_gets_a_cotangent_and_an_integer_one_none():
    ok = jax_rule(scaled, arrays(shape=(3,)), constant(jnp.full(3, 2.0)), name="scaled_by_a_jax_constant")
    report = check(ok, select=["GG106"])
    assert report.rules[0].error is None and report.findings == [], report.findings
    assert "GG106" in report.rules[0].checks_run
    wrong = jax_rule(scaled, arrays(shape=(3,)), constant(jnp.arange(1, 4)), name="scaled_by_jax_integers")
    (finding,) = check(wrong, select=["GG106"]).findings
    assert finding.message.startswith("argument 1 (s) is declared nondiff, so its tangent must be None, but the "
                                      "pullback returned array("), finding.message


# jax-fluids' THINC functions take a Python float slope (interface projection CONST) and return a cotangent shaped like
# the volume fractions for it: every jax.grad through them raises, and gradguard passed them (the slope declared fixed).
@jax.custom_vjp
def scaled_summed(x, s):
    return x * s


scaled_summed.defvjp(lambda x, s: (x * s, (x, s)), lambda res, g: (g * res[1], jnp.sum(g * res[0])))


def test_gg104_a_fixed_float_argument_s_cotangent_must_have_its_shape_where_jax_checks_it():
    wrong = jax_rule(scaled, arrays(shape=(3,)), constant(2.0), name="scaled_by_a_float")
    (f,) = findings(wrong, "GG104")
    assert f.message == (
        "the cotangent bwd returns for argument 1 (s) has shape (3,), but the argument has shape (): argument 1 (s) is "
        "fixed in this declaration, but it is not among the custom_vjp's nondiff_argnums, so JAX checks the shape of "
        "bwd's cotangent for it, and jax.vjp of the rule at this input raises ValueError: Custom VJP bwd rule must "
        "produce an output with the same type as the args tuple of the primal function, but at output[1] the bwd rule "
        "produced an output of type float64[3] corresponding to an input of type float64[], so the shapes do not "
        "match."), f.message
    assert "or list it in nondiff_argnums" in f.fix
    with pytest.raises(ValueError, match="Custom VJP bwd rule"):  # what the finding says, in JAX itself
        jax.grad(lambda x: scaled(x, 2.0).sum())(jnp.ones(3))
    assert findings(jax_rule(scaled_summed, arrays(shape=(3,)), constant(2.0), name="summed"), "GG104") == []


# praxis' sr_ste returns its sparsity mask beside the masked weights: GG601 and GG602 subtracted booleans and crashed.
@jax.custom_vjp
def masked_and_mask(x, mask):
    return x * mask, mask


masked_and_mask.defvjp(lambda x, mask: ((x * mask, mask), mask), lambda mask, g: (g[0] * mask, None))


def test_gg601_and_gg602_compare_a_boolean_output_exactly():
    rule = jax_rule(masked_and_mask, arrays(shape=(4,)), constant(np.array([True, False, True, True])),
                    name="masked_and_mask")
    report = check(rule, select=["GG601", "GG602"])
    assert report.rules[0].error is None and report.findings == [], (report.rules[0].error, report.findings)
    assert {"GG601", "GG602"} <= set(report.rules[0].checks_run)


# praxis' einsum with a bfloat16 output dtype hands back bfloat16 tangents: ml_dtypes' bfloat16 is NumPy kind "V", and
# GG301 called an all-zero one nonzero. A tangent that is not zero for a zero cotangent is still found.
@jax.custom_vjp
def doubled_in_bf16(x):
    return 2 * x


doubled_in_bf16.defvjp(lambda x: (2 * x, None), lambda _, g: ((2 * g).astype(jnp.bfloat16),))


@jax.custom_vjp
def offset_in_bf16(x):
    return 2 * x


offset_in_bf16.defvjp(lambda x: (2 * x, None), lambda _, g: ((2 * g + 1.0).astype(jnp.bfloat16),))


def test_gg301_reads_a_bfloat16_tangent_as_the_float_it_is():
    spec = arrays(shape=(3,), dtype="float32", min_value=-2.0, max_value=2.0)
    assert findings(jax_rule(doubled_in_bf16, spec, name="doubled_in_bf16"), "GG301") == []
    (f,) = findings(jax_rule(offset_in_bf16, spec, name="offset_in_bf16"), "GG301")
    assert f.message.startswith("the pullback of offset_in_bf16 must return zero tangents for a zero cotangent, but "
                                "the tangent for argument 0 (x) at [0] is 1"), f.message


# maxtext's ragged_dot_with_mask: jax.lax.ragged_dot has no batching rule over the axis vmap adds, so the function
# underneath the custom_vjp raises the same way under vmap; the fix spoke of Python control flow and callbacks.
_GROUPS = np.array([2, 1, 2], dtype=np.int32)


@jax.custom_vjp
def grouped_dot(x, w):
    return jax.lax.ragged_dot(x, w, _GROUPS)


def _grouped_dot_bwd(res, g):
    return jax.vjp(lambda a, b: jax.lax.ragged_dot(a, b, _GROUPS), *res)[1](g)


grouped_dot.defvjp(lambda x, w: (grouped_dot(x, w), (x, w)), _grouped_dot_bwd)


def test_gg602_a_primal_jax_cannot_batch_is_a_warning_that_blames_no_rule():
    rule = jax_rule(grouped_dot, arrays(shape=(5, 4)), arrays(shape=(3, 4, 2)), name="grouped_dot")
    report = check(rule, select=["GG602"])
    (f,) = report.findings
    assert f.severity == "warning" and report.passed, f
    assert re.fullmatch(
        r"grouped_dot raises under jax\.vmap \(a batch of \d inputs\) but not one example at a time: (.+); so does the "
        r"function underneath the custom_vjp under the same vmap \(\1\): the operations it is written with cannot be "
        r"batched this way, whatever its rule does\.", f.message), f.message
    assert f.fix.startswith("Nothing in fwd or bwd is to blame")
    with pytest.raises(NotImplementedError):  # what the finding says, in JAX itself
        jax.vmap(lambda x, w: jax.lax.ragged_dot(x, w, _GROUPS))(jnp.ones((2, 5, 4)), jnp.ones((2, 3, 4, 2)))


# praxis' einsum with a bfloat16 output dtype: fwd hands back bfloat16 (the function underneath computes in float32),
# which the tape took (NumPy kind "V") for a constant: its columns read the program's gradient through it as 0 where
# JAX's and finite differences' agree on 2 per unit.
@jax.custom_vjp
def doubled_to_bf16(x):
    return 2 * x


doubled_to_bf16.defvjp(lambda x: ((2 * x).astype(jnp.bfloat16), None), lambda _, g: ((2 * g).astype(jnp.float32),))


def test_the_tape_columns_differentiate_through_a_bfloat16_output():
    rule = jax_rule(doubled_to_bf16, arrays(shape=(3,), dtype="float32", min_value=-2.0, max_value=2.0),
                    name="doubled_to_bf16")
    result = check(rule, select=["GG501"]).rules[0]
    assert result.error is None and result.findings == [], [f.message for f in result.findings]
    cells = {(c["context"], c["engine"]): c["status"] for c in result.safety_matrix["cells"]}
    assert cells[("output-used", "tape[zero]")] == "right" and cells[("output-used", "jax")] == "right", cells


# A bfloat16 output's values are rounded to 8 bits and its bwd gets its cotangent in bfloat16: GG202 read that
# rounding as nonlinearity (8.0 against 8.0234375), and GG201 and GG203 passed a bwd 3/2 of the derivative, their kink
# probes reading the output's stairs as one-sided slopes any answer lay between.
def _squared_to_bf16_bwd(factor, scaled=True):
    def bwd(x, g):
        return ((factor * x * (g if scaled else jnp.ones_like(g))).astype(jnp.float32),)

    return bwd


def _squared_to_bf16(factor, scaled=True):
    fn = jax.custom_vjp(lambda x: (x * x).astype(jnp.bfloat16))
    fn.defvjp(lambda x: (fn(x), x), _squared_to_bf16_bwd(factor, scaled))
    return fn


_F32 = arrays(shape=(3,), dtype="float32", min_value=-2.0, max_value=2.0)


def test_a_bfloat16_output_is_judged_at_its_own_rounding():
    right = check(jax_rule(_squared_to_bf16(2.0), _F32, name="squared_bf16"), select=["GG201", "GG202", "GG203"])
    assert right.rules[0].error is None and right.findings == [], [f.message for f in right.findings]
    (f,) = check(jax_rule(_squared_to_bf16(3.0), _F32, name="squared_bf16_tripled"),
                 select=["GG201", "GG202", "GG203"]).findings
    assert f.check_id == "GG203" and re.match(
        r"the pullback of squared_bf16_tripled disagrees with the JAX reference gradient .*: cotangent for argument 0 "
        r"\(x\) at \[\d\]: expected (\S+) \(JAX\), got (\S+)\.", f.message), f.message
    unit = check(jax_rule(_squared_to_bf16(2.0, scaled=False), _F32, name="squared_bf16_unit"), select=["GG202"])
    assert [g.check_id for g in unit.findings] == ["GG202"]


# s2fft's mwss sampling: JAX's own derivative of the function underneath is NaN at every input (a jnp.where whose
# untaken branch has an infinite derivative; the custom_vjp exists to avoid it), and GG203 was listed as run.
@jax.custom_vjp
def squared_beside_a_nan_branch(x):
    return x**2 + jnp.where(x > -100.0, 0.0, jnp.sqrt(x - x))


squared_beside_a_nan_branch.defvjp(lambda x: (squared_beside_a_nan_branch(x), x), lambda x, g: (2 * x * g,))


def test_gg203_without_a_finite_reference_at_any_input_is_skipped_and_says_why():
    rule = jax_rule(squared_beside_a_nan_branch, arrays(shape=(3,), min_value=-2.0, max_value=2.0), name="nan_ref")
    assert skipped(rule, "GG203").startswith("JAX's derivative of the primal is not finite at any input drawn")
    assert findings(rule, "GG201") == []  # finite differences still judge it

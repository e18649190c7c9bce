"""The safety matrix's JAX column compiled per context program (jit), traced and run with NumPy (traced),
against eager JAX: each program compiles once per (rule, context, shapes, dtypes), a traced program
compiles nothing, a program jit or NumPy cannot run falls back to eager (recorded), "auto" traces a NumPy
rule's programs and compiles a JAX rule's while JAX's persistent cache is in force, and the cells are the
same in every mode."""

from collections import Counter

import numpy as np
import pytest

from gradguard.checker import arrays, check, rrule
from gradguard.checker.contexts import CONTEXTS, Signature, run_matrix
from gradguard.checker.contexts import _jax_engine
from gradguard.checker.contexts._jax_engine import eager_fallbacks
from gradguard.checker.errors import UsageError

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

JIT, EAGER, AUTO = {"jax_column": "jit"}, {"jax_column": "eager"}, {"jax_column": "auto"}
TRACED = {"jax_column": "traced"}


def _softplus(x):
    return np.logaddexp(0.0, x)


def _softplus_rule():
    @rrule(_softplus, arrays(shape=(3,), min_value=-5.0, max_value=5.0))
    def softplus_rrule(x):
        return _softplus(x), lambda g: (g / (1.0 + np.exp(-x)),)

    return softplus_rrule


def _jax_cells(outcome):
    return [(r.context.name, r.cells["jax"].status, r.cells["jax"].message) for r in outcome.rows]


@pytest.fixture
def compiles():
    from jax import monitoring

    seen = Counter()
    active = [True]

    def listen(name, secs, **_):
        if active[0] and name == "/jax/core/compile/backend_compile_duration":
            seen["compiles"] += 1

    monitoring.register_event_duration_secs_listener(listen)
    yield seen
    active[0] = False


def test_each_context_program_compiles_once_and_later_matrices_reuse_it(compiles):
    rule = _softplus_rule()
    first = run_matrix(rule, engines=["jax"], settings=JIT)
    assert compiles["compiles"] >= len(first.rows)  # one program per context (and nothing op by op)
    compiles.clear()
    again = run_matrix(rule, engines=["jax"], settings=JIT)
    assert compiles["compiles"] == 0
    assert _jax_cells(again) == _jax_cells(first)
    assert all(status == "right" for _, status, _ in _jax_cells(first))


@pytest.mark.parametrize("settings", [JIT, TRACED], ids=["jit", "traced"])
def test_jit_traced_and_eager_give_the_same_cells_values_and_slopes(settings):
    rule = _softplus_rule()
    compiled, eager = run_matrix(rule, settings=settings), run_matrix(rule, settings=EAGER)
    assert [r.context.name for r in compiled.rows] == [r.context.name for r in eager.rows]
    for a, b in zip(compiled.rows, eager.rows):
        ca, cb = a.cells["jax"], b.cells["jax"]
        assert ca.status == cb.status == "right"
        assert ca.slope == pytest.approx(cb.slope, rel=1e-12, abs=1e-12)
        assert ca.value == pytest.approx(cb.value, rel=1e-12, abs=1e-12)


def test_a_call_whose_output_is_unused_still_runs_and_raises_under_jit_and_traced():
    """XLA (and JAX's partial evaluation) drop a pure callback whose result nothing uses; the compiled and the
    traced program return every call's output, so a rule that raises in the output-unused context raises
    there as it does eagerly."""

    def make():
        calls = Counter()

        @rrule(_softplus, arrays(shape=(3,), min_value=-5.0, max_value=5.0))
        def flaky_rrule(x):
            calls["forward"] += 1
            if calls["forward"] > 1:  # the first call infers the output's shape; every later one fails
                raise ValueError("flaky_rrule refuses a second call")
            return _softplus(x), lambda g: (g / (1.0 + np.exp(-x)),)

        return flaky_rrule

    cells = {}
    for name, settings in (("jit", JIT), ("traced", TRACED), ("eager", EAGER)):
        (row,) = run_matrix(make(), contexts=["output-unused"], engines=["jax"], settings=settings).rows
        cells[name] = (row.cells["jax"].status, row.cells["jax"].message)
    assert cells["jit"] == cells["traced"] == cells["eager"] == ("raised", "ValueError: flaky_rrule refuses a second call")


def test_a_rule_jit_cannot_trace_falls_back_to_eager_recorded_with_the_same_cells():
    """A JAX rule that branches in Python on its values runs eagerly but not under jit: that context runs
    eagerly, and the reason is recorded."""
    from gradguard.checker import jax_rule

    def make():
        @jax.custom_vjp
        def clipped(x):
            return jnp.sin(x) if float(x.sum()) < 100.0 else x  # Python control flow on a value

        clipped.defvjp(lambda x: (clipped(x), x), lambda x, g: (g * jnp.cos(x),))
        return jax_rule(clipped, arrays(shape=(3,), min_value=-2.0, max_value=2.0), name="clipped")

    compiled_rule, eager_rule = make(), make()
    compiled = run_matrix(compiled_rule, engines=["jax"], settings=JIT)
    eager = run_matrix(eager_rule, engines=["jax"], settings=EAGER)
    assert _jax_cells(compiled) == _jax_cells(eager)
    assert all(status == "right" for _, status, _ in _jax_cells(compiled))
    fallen = eager_fallbacks(compiled_rule)
    assert set(fallen) == {r.context.name for r in compiled.rows}
    assert all("Concretization" in why or "Tracer" in why for why in fallen.values())
    assert eager_fallbacks(eager_rule) == {}


@pytest.mark.parametrize("settings", [JIT, TRACED], ids=["jit", "traced"])
def test_a_mutating_numpy_rule_raises_under_jit_and_traced_as_under_eager(settings):
    def addone_(a):
        a += 1
        return a.sum()

    def make():
        @rrule(addone_, arrays(shape=(4,)), mutates=(0,))
        def addone_rrule(a):
            y = addone_(a)
            return y, lambda g: (np.full(a.shape, g),)

        return addone_rrule

    compiled = run_matrix(make(), engines=["jax"], settings=settings)
    eager = run_matrix(make(), engines=["jax"], settings=EAGER)
    assert _jax_cells(compiled) == _jax_cells(eager)
    assert {status for _, status, _ in _jax_cells(compiled)} == {"raised"}


def test_programs_with_other_fixed_arguments_are_not_shared():
    """A program holds the rule's non-differentiated arguments as constants: plans share a compiled program
    only where those are equal (an array by its values)."""

    def scale(x, k):
        return x * k

    @rrule(scale, arrays(shape=(3,)), arrays(shape=(3,)), nondiff=(1,))
    def scale_rrule(x, k):
        return x * k, lambda g: (g * k, None)

    ctx = next(c for c in CONTEXTS if c.name == "output-used")
    x = np.arange(3.0)

    def same(k):
        return ctx.plan(Signature(scale_rrule, (x, k), None, x * k), np.random.default_rng(0)).same

    assert same(np.ones(3)) == same(np.ones(3))
    assert same(np.ones(3)) != same(np.full(3, 2.0))
    assert same(np.ones(3)) != same(np.ones(3, dtype=np.float32))


def _programs(rule):
    return list(rule.extra.get(_jax_engine._PROGRAMS, {}).values())


def test_auto_traces_a_numpy_rules_programs_once_and_compiles_nothing(compiles):
    """Under "auto" a NumPy rule's programs are traced by JAX and run with NumPy: not one XLA compilation,
    from the first matrix on (eager JAX compiles each primitive once per shape), and a later matrix reuses
    the traces."""
    rule = _softplus_rule()
    first = run_matrix(rule, engines=["jax"], settings=AUTO)
    assert compiles["compiles"] == 0
    programs = _programs(rule)
    assert len(programs) == len(first.rows)
    assert all(p.matrices == 1 and p.compiled is None and len(p.traced) == 1 for p in programs)
    again = run_matrix(rule, engines=["jax"], settings=AUTO)
    assert all(p.matrices == 2 and p.compiled is None and len(p.traced) == 1 for p in _programs(rule))
    assert _jax_cells(again) == _jax_cells(first) == _jax_cells(run_matrix(_softplus_rule(), engines=["jax"], settings=EAGER))
    assert compiles["compiles"] > 0  # eager JAX, for comparison, compiled its primitives
    assert eager_fallbacks(rule) == {}
    compiled = run_matrix(rule, engines=["jax"], settings=JIT)
    assert all(p.compiled is not None for p in _programs(rule)) and _jax_cells(compiled) == _jax_cells(first)


def test_a_traced_program_serves_other_weights_with_the_cells_eager_jax_gives():
    """The weights are arguments of a trace: the matrix at another seed (other weights, other inputs of the same
    shapes) traces nothing again, and its cells are eager JAX's at that seed. A trace keyed on the weights'
    values traced every program again."""
    rule = _softplus_rule()
    run_matrix(rule, engines=["jax"], settings=AUTO)
    traced = {id(p) for p in _programs(rule)}
    other = run_matrix(rule, engines=["jax"], settings=AUTO, seed=1)
    assert {id(p) for p in _programs(rule)} == traced
    assert all(p.matrices == 2 and len(p.traced) == 1 for p in _programs(rule))
    assert _jax_cells(other) == _jax_cells(run_matrix(_softplus_rule(), engines=["jax"], settings=EAGER, seed=1))
    assert _values(other) == pytest.approx(_values(run_matrix(_softplus_rule(), engines=["jax"], settings=EAGER, seed=1)))


def _values(outcome):
    return [(float(r.cells["jax"].value), r.cells["jax"].slope) for r in outcome.rows if r.cells["jax"].value is not None]


def test_a_float32_rules_traced_program_stays_float32_with_the_weights_as_arguments():
    """The loss's scales are Python floats: as arguments of the trace they stay weakly typed, as constants are,
    so a float32 output is not promoted, and the traced program gives eager JAX's values to float32's rounding."""
    def make():
        @rrule(_softplus, arrays(shape=(3,), dtype="float32", min_value=-5.0, max_value=5.0))
        def softplus32_rrule(x):
            return _softplus(x), lambda g: (g / (1.0 + np.exp(-x)),)

        return softplus32_rrule

    rule = make()
    traced = run_matrix(rule, engines=["jax"], settings=TRACED)
    eager = run_matrix(make(), engines=["jax"], settings=EAGER)
    assert _jax_cells(traced) == _jax_cells(eager)
    assert {status for _, status, _ in _jax_cells(traced)} == {"right"}
    programs = _programs(rule)
    assert programs and all(len(p.traced) == 1 for p in programs)
    bends = [eqn for p in programs for closed, _ in p.traced.values() for eqn in closed.jaxpr.eqns if eqn.primitive.name == "sin"]
    assert bends and {str(eqn.outvars[0].aval.dtype) for eqn in bends} == {"float32"}  # sin(y / s) as eager JAX runs it


def test_a_fixed_argument_that_sets_the_outputs_shape_stays_a_number_while_jax_traces():
    """A repeat count is a number under eager JAX (the rule's output shape follows it); traced as an argument
    it would be a tracer, the output's shape inferred from another count, and every cell an error. Traced
    programs keep the plan's constants concrete, and reuse a trace only for the same constants."""
    from gradguard.checker import constant

    def repeat(x, k):
        return np.repeat(x, k, axis=1)

    def make():
        @rrule(repeat, arrays(shape=(2, 3)), constant(2))
        def repeat_rrule(x, k):
            return repeat(x, k), lambda g: (g.reshape(*x.shape, k).sum(axis=-1), None)

        return repeat_rrule

    rule = make()
    traced = run_matrix(rule, engines=["jax"], settings=TRACED)
    assert _jax_cells(traced) == _jax_cells(run_matrix(make(), engines=["jax"], settings=EAGER))
    assert {status for _, status, _ in _jax_cells(traced)} == {"right"}
    assert eager_fallbacks(rule) == {}


def test_a_program_holding_a_primitive_numpy_does_not_run_here_runs_eagerly_recorded(monkeypatch):
    from gradguard.engines.jax_engine import _numpy_eval

    monkeypatch.delitem(_numpy_eval.KNOWN, "mul")
    rule = _softplus_rule()
    traced = run_matrix(rule, engines=["jax"], settings=TRACED)
    assert _jax_cells(traced) == _jax_cells(run_matrix(_softplus_rule(), engines=["jax"], settings=EAGER))
    fallen = eager_fallbacks(rule)
    assert set(fallen) == {r.context.name for r in traced.rows}
    assert all(why.startswith("run by JAX, not NumPy: the program holds primitives run here only by JAX: mul")
               for why in fallen.values())


def _jax_softplus_rule():
    from gradguard.checker import jax_rule

    @jax.custom_vjp
    def softplus(x):
        return jnp.logaddexp(0.0, x)

    softplus.defvjp(lambda x: (jnp.logaddexp(0.0, x), x), lambda x, g: (g * jax.nn.sigmoid(x),))
    return jax_rule(softplus, arrays(shape=(3,)), name="softplus")


def test_a_jax_rules_programs_run_eagerly_under_traced():
    rule = _jax_softplus_rule()
    traced = run_matrix(rule, engines=["jax"], settings=TRACED)
    assert all(p.traced == {} for p in _programs(rule))
    assert all(status == "right" for _, status, _ in _jax_cells(traced))


def test_auto_compiles_a_jax_rules_program_at_once_only_while_the_persistent_cache_is_in_force(tmp_path):
    from gradguard.engines.jax_engine._runtime import load

    jax_softplus = _jax_softplus_rule()
    config = load().config
    before = config.jax_compilation_cache_dir
    assert _jax_engine._compiles_under_auto(jax_softplus) == bool(before)
    assert not _jax_engine._compiles_under_auto(_softplus_rule())  # host callbacks: never in the persistent cache
    config.update("jax_compilation_cache_dir", str(tmp_path))
    try:
        assert _jax_engine._compiles_under_auto(jax_softplus)
        assert not _jax_engine._compiles_under_auto(_softplus_rule())
    finally:
        config.update("jax_compilation_cache_dir", before)


def test_jax_column_setting_is_validated_and_reaches_the_matrix():
    rule = _softplus_rule()
    with pytest.raises(UsageError, match=r"jax_column='fast'.*'auto', 'jit', 'eager', 'traced'"):
        check(rule, jax_column="fast")
    with pytest.raises(ValueError, match=r"jax_column='fast'.*'auto', 'jit', 'eager', 'traced'"):
        run_matrix(rule, engines=["jax"], settings={"jax_column": "fast"})
    with pytest.raises(ValueError, match=r"engine setting 'jax_mode'"):
        run_matrix(rule, engines=["jax"], settings={"jax_mode": "jit"})
    for mode in ("auto", "jit", "eager", "traced"):
        report = check(rule, select=["GG501"], jax_column=mode)
        assert report.rules[0].verdict == "pass"


def test_a_rule_taking_another_path_on_jit_tracers_runs_eagerly_as_before():
    """A bwd with a fast path for traced values answers differently under jit: the first compiled run is
    checked against eager JAX, and the column keeps eager's answer (recorded as a fallback)."""
    from gradguard.checker import jax_rule

    def make():
        @jax.custom_vjp
        def cube(x):
            return x**3

        def bwd(x, g):
            return (3 * x * g,) if isinstance(x, jax.core.Tracer) else (3 * x**2 * g,)

        cube.defvjp(lambda x: (x**3, x), bwd)
        return jax_rule(cube, arrays(shape=(3,), min_value=0.5, max_value=2.0), name="cube")

    compiled_rule, eager_rule = make(), make()
    compiled = run_matrix(compiled_rule, engines=["jax"], settings=JIT)
    again = run_matrix(compiled_rule, engines=["jax"], settings=JIT)
    eager = run_matrix(eager_rule, engines=["jax"], settings=EAGER)
    assert _jax_cells(compiled) == _jax_cells(again) == _jax_cells(eager)
    assert all(status == "right" for _, status, _ in _jax_cells(eager))
    fallen = eager_fallbacks(compiled_rule)  # where the output is used (the pullback runs), not where it is unused
    assert set(fallen) == {"output-used", "captured-before", "called-twice", "fan-out", "strided-view"}
    assert all(why.startswith("jit and eager JAX disagree on this program") for why in fallen.values())

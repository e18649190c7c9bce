"""A traced JAX program run with NumPy (`_numpy_eval.evaluate`) against the same program run by eager JAX:
the same values for every primitive it knows, read-only copies for host callbacks, a clear refusal for a
primitive it does not know, and a rule's own error coming back as itself."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
lax = pytest.importorskip("jax.lax")

from gradguard.engines.errors import AdapterError  # noqa: E402
from gradguard.engines.jax_engine import to_custom_vjp  # noqa: E402
from gradguard.engines.jax_engine._numpy_eval import KNOWN, Unsupported, evaluate, primitives_of  # noqa: E402
from gradguard.engines.jax_engine._relay import RelayedError, recover  # noqa: E402
from gradguard.engines.jax_engine._runtime import load  # noqa: E402

load()  # float64 on


def _both(fn, *args):
    """(eager JAX's outputs, NumPy's outputs of the traced program), flat, as NumPy arrays."""
    closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    flat = jax.tree_util.tree_leaves(args)
    on_device = jax.tree_util.tree_map(jnp.asarray, args)  # so that `x * x` is JAX's multiplication, not NumPy's
    eager = [np.asarray(x) for x in jax.tree_util.tree_leaves(fn(*on_device))]
    ours = evaluate(closed, flat)
    assert len(ours) == len(jax.tree_util.tree_leaves(shape))
    return eager, ours, primitives_of(closed)


def _assert_same(eager, ours, atol=1e-300):
    assert len(eager) == len(ours)
    for a, b in zip(eager, ours):
        assert b.shape == a.shape and b.dtype == a.dtype
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=atol, equal_nan=True)


# Subnormal numbers among them: XLA's arithmetic on CPU reads them as zero and flushes them to zero.
# Three shapes (one, two and three dimensions): eager JAX compiles each primitive once per shape.
floats = hnp.arrays(np.float64, st.sampled_from([(4,), (2, 3), (3, 1, 2)]),
                    elements=st.floats(-3, 3, allow_nan=False) | st.sampled_from([5e-324, -2.5e-310, 1e-308, -0.0]))

ELEMENTWISE = {
    "add": lambda x: x + 1.5, "sub": lambda x: 2.0 - x, "mul": lambda x: x * x, "div": lambda x: x / (x * x + 1),
    "max": lambda x: jnp.maximum(x, 0.5), "min": lambda x: jnp.minimum(x, -0.5), "pow": lambda x: jnp.abs(x) ** 1.7,
    "atan2": lambda x: jnp.arctan2(x, 1.0 - x), "neg": lambda x: -x, "sign": jnp.sign, "abs": jnp.abs, "exp": jnp.exp,
    "exp2": jnp.exp2, "log": lambda x: jnp.log(x * x + 1), "log1p": lambda x: jnp.log1p(x * x), "expm1": jnp.expm1,
    "sqrt": lambda x: jnp.sqrt(x * x), "rsqrt": lambda x: lax.rsqrt(x * x + 1), "sin": jnp.sin, "cos": jnp.cos,
    "tan": lambda x: jnp.tan(x / 3), "asin": lambda x: jnp.arcsin(x / 4), "acos": lambda x: jnp.arccos(x / 4),
    "atan": jnp.arctan, "sinh": jnp.sinh, "cosh": jnp.cosh, "tanh": jnp.tanh, "logistic": jax.nn.sigmoid,
    "asinh": jnp.arcsinh, "acosh": lambda x: jnp.arccosh(x * x + 1), "atanh": lambda x: jnp.arctanh(x / 4),
    "floor": jnp.floor, "ceil": jnp.ceil, "square": lambda x: lax.square(x),
    "integer_pow": lambda x: (x ** 2, x ** 3, x ** 5, x ** -2, x ** 0),
    "select_n": lambda x: jnp.where(x > 0, x, -2 * x), "compare": lambda x: (x > 0, x >= 0, x < 1, x <= 1, x == 0, x != 0),
    "is_finite": lambda x: jnp.isfinite(x / x), "not": lambda x: ~(x > 0), "and_or": lambda x: ((x > 0) & (x < 1), (x > 0) | (x < -1)),
    "clip": lambda x: jnp.clip(x, -1.0, 1.0), "convert": lambda x: (x.astype(jnp.float32), (x > 0).astype(jnp.float64)),
    "complex": lambda x: jnp.real(lax.complex(x, 2 * x) * (2 - 1j)) + jnp.imag(jnp.conj(x + 1j)),
}


STRUCTURAL = {
    "reduce": lambda x: (x.sum(), x.sum(axis=0), x.max(axis=-1), x.min(), jnp.prod(x, axis=0)),
    "broadcast": lambda x: (jnp.broadcast_to(x, (2, *x.shape)), x[..., None] * jnp.ones(3), x.sum(axis=0, keepdims=True) + x),
    "reshape_transpose": lambda x: (x.reshape(-1), x.T, jnp.transpose(x[None], tuple(range(x.ndim + 1))[::-1]), jnp.squeeze(x[None])),
    "slice_rev_concat": lambda x: (x[::2], x[1:], jnp.flip(x, 0), jnp.concatenate([x, 2 * x], axis=0), x[-1]),
    "pad": lambda x: (lax.pad(x, 0.5, [(1, 2, 1)] + [(0, 0, 0)] * (x.ndim - 1)),
                      lax.pad(x, -1.0, [(-1, 1, 2)] + [(2, -1, 0)] * (x.ndim - 1)) if x.shape[0] > 1 and all(n > 1 for n in x.shape[1:]) else x),
    "dot": lambda x: (jnp.tensordot(x, x, axes=x.ndim), jnp.einsum("i...,j...->ij", x, x), x.reshape(x.shape[0], -1) @ x.reshape(x.shape[0], -1).T),
    "batched_dot": lambda x: jnp.matmul(x[..., None], 2 * x[..., None, :]),
    "iota": lambda x: x + lax.broadcasted_iota(jnp.float64, x.shape, x.ndim - 1),
    "copy": lambda x: jnp.array(x, copy=True),
    "cumulative": lambda x: (jnp.cumsum(x, axis=0), lax.cumsum(x, axis=x.ndim - 1, reverse=True), jnp.cumprod(x / 2, axis=0),
                             lax.cummax(x, axis=0), lax.cummin(x, axis=0, reverse=True)),
    "split_tile": lambda x: (*jnp.split(x, [1], axis=0), jnp.tile(x, (2,) + (1,) * (x.ndim - 1)), lax.stop_gradient(x) * 2),
}


PROGRAMS = {**ELEMENTWISE, **STRUCTURAL}
SUMS = {"reduce", "dot", "batched_dot", "cumulative"}  # programs that add many numbers (rounding depends on the order)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@settings(max_examples=12, deadline=None)
@given(x=floats)
def test_each_primitive_gives_eager_jaxs_values(name, x):
    eager, ours, _ = _both(PROGRAMS[name], x)
    # Sums may associate in another order than XLA's: the reverse cumulative sum of [1.2e-38, -1.2e-7, 1.2e-7] is
    # 1.2e-38 added last (NumPy) or lost first (XLA). Their results agree up to the summands' rounding.
    _assert_same(eager, ours, atol=8 * np.finfo(np.float64).eps * float(np.sum(np.abs(x))) if name in SUMS else 1e-300)


def test_integer_pow_flushes_its_own_subnormal_products():
    """x ** -2 at x = 1.4e-154: x * x is a subnormal 2e-308, which XLA flushes to zero inside the one primitive, so
    JAX gives inf; the NumPy evaluation gave 4.9e307 (the property test above drew it on a fresh CI run)."""
    x = np.array([1.427e-154, -1.427e-154, 1e-103, 2.0])
    eager, ours, _ = _both(PROGRAMS["integer_pow"], x)
    assert np.isinf(eager[3][:2]).all()
    _assert_same(eager, ours)


def test_the_programs_above_cover_every_known_primitive():
    """Each primitive `KNOWN` runs is exercised by one of the programs above (so each is tested against JAX)."""
    x = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    seen = set()
    for fn in PROGRAMS.values():
        seen |= _both(fn, x)[2]
    seen |= _both(lambda v: jax.value_and_grad(lambda w: (jnp.sin(w) * w).sum())(v), x)[2]
    assert set(KNOWN) - seen == set(), set(KNOWN) - seen


def test_integer_division_rounds_toward_zero_as_xla_does():
    a, b = np.array([7, -7, 7, -7, 0]), np.array([2, 2, -2, -2, 3])
    eager, ours, _ = _both(lambda p, q: lax.div(p, q), a, b)
    _assert_same(eager, ours)
    assert ours[0].tolist() == [3, -3, -3, 3, 0]


def _rule():
    def rrule(x):
        return np.sin(x), lambda g: (g * np.cos(x),)

    return to_custom_vjp(rrule, name="sin")


def test_a_numpy_rules_value_and_grad_is_eager_jaxs():
    f = _rule()
    program = jax.value_and_grad(lambda w, x: (f(x) * w).sum() + f(x.T).sum(), argnums=(0, 1))
    w, x = np.arange(6.0).reshape(2, 3), np.linspace(-1, 1, 6).reshape(2, 3)
    eager, ours, prims = _both(program, w, x)
    _assert_same(eager, ours)
    assert "pure_callback" in prims


def test_host_callbacks_get_read_only_c_contiguous_copies():
    seen = []

    def rrule(x):
        seen.append((x.flags.writeable, x.flags.c_contiguous, x.base is None or not x.flags.writeable))
        return x * 2.0, lambda g: (2.0 * g,)

    f = to_custom_vjp(rrule, name="double")
    x = np.arange(6.0).reshape(2, 3)
    closed = jax.make_jaxpr(lambda v: f(v.T).sum())(x)
    seen.clear()
    evaluate(closed, [x])
    assert seen == [(False, True, True)]


def test_what_a_callback_returns_is_copied_as_jax_copies_it():
    """A rule that returns the same buffer from every call (and overwrites it) does not change an earlier
    call's output, under eager JAX or here."""
    buffer = np.zeros(3)

    def rrule(x):
        np.multiply(x, x, out=buffer)
        return buffer, lambda g: (2 * g * x,)

    f = to_custom_vjp(rrule, name="square_into_buffer")
    program = lambda v: (f(v), f(2 * v))  # noqa: E731
    eager, ours, _ = _both(program, np.array([1.0, 2.0, 3.0]))
    _assert_same(eager, ours)
    assert ours[0].tolist() == [1.0, 4.0, 9.0]


def test_a_rule_reads_a_subnormal_argument_as_zero_as_on_xlas_thread():
    """Under JAX a host callback runs on XLA's thread, whose denormals-are-zero mode makes the rule's NumPy
    code read a subnormal argument as zero: x / x is nan there. So it is here."""

    def rrule(x):
        return x / x, lambda g: (g / x,)

    f = to_custom_vjp(rrule, name="ratio")
    x = np.array([5e-324, 1.0])
    eager, ours, _ = _both(lambda v: f(v), x)
    _assert_same(eager, ours)
    assert np.isnan(ours[0][0]) and ours[0][1] == 1.0


def test_a_rule_writing_into_its_argument_fails_as_under_eager_jax():
    def rrule(x):
        x += 1.0
        return x, lambda g: (g,)

    f = to_custom_vjp(rrule, name="addone_")
    x = np.ones(3)
    with pytest.raises(AdapterError, match="mutates its argument 0"):
        f(x)  # eager JAX
    closed = jax.make_jaxpr(lambda v: f(v).sum())(x)
    with pytest.raises(RelayedError) as caught:
        evaluate(closed, [x])
    original = recover(caught.value)
    assert isinstance(original, AdapterError) and "mutates its argument 0" in str(original)
    assert x.tolist() == [1.0, 1.0, 1.0]


def test_a_primitive_it_does_not_know_is_refused_by_name_before_anything_runs():
    calls = []

    def rrule(x):
        calls.append(1)
        return np.sin(x), lambda g: (g * np.cos(x),)

    f = to_custom_vjp(rrule, name="sin", example_args=(np.ones(3),))
    closed = jax.make_jaxpr(lambda v: jnp.sort(f(v)).sum())(np.ones(3))
    calls.clear()
    with pytest.raises(Unsupported, match="run here only by JAX: sort"):
        evaluate(closed, [np.ones(3)])
    assert calls == []


def test_a_result_of_another_shape_than_the_programs_is_refused(monkeypatch):
    import gradguard.engines.jax_engine._numpy_eval as numpy_eval

    monkeypatch.setitem(numpy_eval.KNOWN, "sin", lambda x, **_: np.sin(x).reshape(-1))
    closed = jax.make_jaxpr(jnp.sin)(np.ones((2, 2)))
    with pytest.raises(Unsupported, match=r"sin gave shape \(4,\) where the program has \(2, 2\)"):
        evaluate(closed, [np.ones((2, 2))])


def test_a_program_run_again_gives_fresh_results_and_keeps_no_state_between_runs():
    """The program is made ready once and run many times: a literal it returns, or a view of one, comes back
    as the caller's own array each time, and a subnormal input of one run does not leave a clean mark that
    spares the next run's input its flush (nor the other way round)."""
    closed = jax.make_jaxpr(lambda v: (v * 2.0, jnp.float64(1.5), jnp.zeros(2) + 0.0, v + 0.0))(np.ones(2))
    first = evaluate(closed, [np.ones(2)])
    first[1][...] = 99.0  # the caller's own: writing into it changes nothing of the program's
    second = evaluate(closed, [np.array([3.0, 5e-324])])
    assert second[0].tolist() == [6.0, 0.0] and float(second[1]) == 1.5 and second[2].tolist() == [0.0, 0.0]
    assert second[3].tolist() == [3.0, 0.0]  # read as zero by XLA's arithmetic: flushed on this run too
    third = evaluate(closed, [np.array([1e-300, 2.0])])
    assert third[3].tolist() == [1e-300, 2.0] and float(third[1]) == 1.5


def test_run_traced_gives_run_unders_jit_values_and_gradients_without_compiling():
    from jax import monitoring

    from gradguard.engines.jax_engine import run_traced, run_under

    compiled = []
    active = [True]
    monitoring.register_event_duration_secs_listener(
        lambda name, secs, **_: compiled.append(name) if active[0] and name == "/jax/core/compile/backend_compile_duration" else None)

    def f(x, y, scale):
        return jnp.tanh(x) * y.sum() * scale

    x, y, ct = np.linspace(-1, 1, 5), np.arange(3.0), np.linspace(0.5, 1.5, 5)
    try:
        value = run_traced(f, (x, y, 2.0), transform="jit")
        grads = run_traced(f, (x, y, 2.0), transform="jit_grad", cotangent=ct, nondiff=(2,))
        assert compiled == []
    finally:
        active[0] = False
    np.testing.assert_allclose(value, run_under(f, (x, y, 2.0), transform="jit"), rtol=1e-13)
    want = run_under(f, (x, y, 2.0), transform="jit_grad", cotangent=ct, nondiff=(2,))
    assert grads[2] is None and want[2] is None
    for got, ref in zip(grads[:2], want[:2]):
        np.testing.assert_allclose(got, ref, rtol=1e-13)


def test_run_traced_hands_a_trace_numpy_does_not_run_to_xla():
    from gradguard.engines.jax_engine import run_traced, run_under

    x = np.array([3.0, -1.0, 2.0])
    got = run_traced(lambda v: jnp.sort(v) * 2.0, (x,), transform="jit")  # sort: run here only by JAX
    np.testing.assert_array_equal(got, run_under(lambda v: jnp.sort(v) * 2.0, (x,), transform="jit"))
    assert got.tolist() == [-2.0, 4.0, 6.0]


def test_run_traced_without_xla_refuses_a_trace_numpy_does_not_run_and_compiles_nothing():
    from gradguard.engines.jax_engine import NotByNumpy, run_traced

    def sorted_twice(v):
        return jnp.sort(v) * 2.0

    x = np.array([3.0, -1.0, 2.0])
    refused = []

    def run() -> None:
        try:
            run_traced(sorted_twice, (x,), transform="jit", xla=False)
        except NotByNumpy as exc:
            refused.append(str(exc))

    assert _compiles_during(lambda: (run(), run())) == 0  # the first run finds NumPy cannot run it; the second knows it
    assert len(refused) == 2 and "sort" in refused[0]
    assert run_traced(sorted_twice, (x,), transform="jit").tolist() == [-2.0, 4.0, 6.0]  # XLA runs it when allowed
    with pytest.raises(NotByNumpy, match="primitives NumPy does not run"):
        run_traced(sorted_twice, (x,), transform="jit", xla=False)


def _compiles_during(run):
    """How many programs XLA compiled while ``run()`` ran."""
    from jax import monitoring

    compiled, active = [], [True]
    monitoring.register_event_duration_secs_listener(
        lambda name, secs, **_: compiled.append(name) if active[0] and name == "/jax/core/compile/backend_compile_duration" else None)
    try:
        run()
    finally:
        active[0] = False
    return len(compiled)


@pytest.mark.parametrize("transform", ["jit", "jit_grad"])
def test_a_family_whose_bound_values_change_is_run_by_xla_primitive_by_primitive_not_compiled_per_binding(transform):
    """GG203 binds a rule's fixed arguments into the function it traces, and a drawn index array binds new values
    at every input: each binding is a trace of its own. Where NumPy does not run it (a gather; its gradient a
    scatter-add), compiling each whole cost one XLA compilation per drawn input; run primitive by primitive,
    the family compiles nothing once its primitives have run on these shapes."""
    from gradguard.engines.jax_engine import run_traced, run_under

    rng = np.random.default_rng(0)
    x, ct = rng.standard_normal(6), rng.standard_normal(4)
    bindings = [rng.integers(0, 6, size=4) for _ in range(6)]

    def bound(idx):
        return lambda v: jnp.take(v, idx) * 2.0  # a new function per binding, as bind_nondiff makes one

    def run(idx, family):
        kwargs = {"cotangent": ct} if transform == "jit_grad" else {}
        return run_traced(bound(idx), (x,), transform=transform, family=family, **kwargs)

    family = ("take", transform)
    _compiles_during(lambda: [run(idx, family) for idx in bindings[:2]])  # the first compiled, the second's primitives
    assert _compiles_during(lambda: [run(idx, family) for idx in bindings[2:]]) == 0
    for idx in bindings:
        kwargs = {"cotangent": ct} if transform == "jit_grad" else {}
        want = run_under(bound(idx), (x,), transform=transform, **kwargs)
        got = run(idx, family)
        for g, w in zip(got if transform == "jit_grad" else [got], want if transform == "jit_grad" else [want]):
            np.testing.assert_allclose(g, w, rtol=1e-15)
    # Without a family each binding is compiled whole, as before.
    assert _compiles_during(lambda: [run(idx + 0, None) for idx in bindings[2:]]) >= len(bindings[2:])


def test_run_traced_raises_what_jax_raised_tracing_without_tracing_again():
    """jit traces a function as make_jaxpr does: where tracing failed, compiling it would fail the same way, and the
    same key fails again without a trace (GG203 asks at every drawn input of a primal that reads its values)."""
    import jax

    from gradguard.engines.jax_engine import run_traced

    traced = []

    def reads_its_values(v):
        traced.append(1)
        return jnp.asarray(np.asarray(v) * 2.0)

    x = np.array([1.0, 2.0])
    for _ in range(3):
        with pytest.raises(jax.errors.TracerArrayConversionError, match="numpy.ndarray"):
            run_traced(reads_its_values, (x,), transform="jit")
    assert len(traced) == 1


def test_a_failed_trace_keeps_nothing_of_its_arguments():
    """What is remembered of a failed trace is the error's type and arguments, not the exception: its frames hold
    the call's arguments, a drawn input that can be 10**6 elements, at every input of a family."""
    import gc
    import weakref

    import jax

    from gradguard.engines.jax_engine import run_traced

    x = np.arange(5.0)
    held = weakref.ref(x)
    try:
        run_traced(lambda v: jnp.asarray(np.asarray(v) + 1.0), (x,), transform="jit")
    except jax.errors.TracerArrayConversionError:
        pass
    del x
    gc.collect()
    assert held() is None


def test_a_reverse_cumulative_sum_agrees_with_xla_up_to_the_order_of_its_rounding():
    # Found by the property test above: NumPy adds 1.2e-38 last (keeping it), XLA first (losing it to -1.2e-7).
    x = np.array([[1.192092896e-07] * 3, [1.175494351e-38, -1.192092896e-07, 1.192092896e-07]])
    eager, ours, _ = _both(lambda v: lax.cumsum(v, axis=1, reverse=True), x)
    assert abs(float(ours[0][1, 0] - eager[0][1, 0])) <= 8 * np.finfo(np.float64).eps * float(np.sum(np.abs(x)))
    _assert_same(eager, ours, atol=8 * np.finfo(np.float64).eps * float(np.sum(np.abs(x))))


def test_flushed_to_zero_reads_subnormal_numbers_as_signed_zeros_and_leaves_the_rest():
    from gradguard.engines.jax_engine._numpy_eval import flushed_to_zero

    tiny = np.finfo(np.float64).tiny
    out = flushed_to_zero(np.array([-tiny / 4, tiny / 4, tiny, -2.5, 0.0]))
    assert out.tolist() == [0.0, 0.0, tiny, -2.5, 0.0] and np.signbit(out[0]) and not np.signbit(out[1])
    z = flushed_to_zero(np.array([complex(tiny / 8, 3.0)]))
    assert z[0] == 3.0j
    normal = np.array([complex(tiny, 3.0)])
    assert flushed_to_zero(normal) is normal  # nothing to flush: no copy, as for real arrays
    assert flushed_to_zero(5e-324) == 0.0 and isinstance(flushed_to_zero(5e-324), float)
    assert flushed_to_zero(np.float32(1e-40)) == 0 and flushed_to_zero(np.float32(1e-40)).dtype == np.float32
    kept = np.arange(3)
    assert flushed_to_zero(kept) is kept and flushed_to_zero("x") == "x"

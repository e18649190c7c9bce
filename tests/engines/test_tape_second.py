"""Second order on the tape: an ordinary NumPy rrule and pullback run on Tracked arrays, differentiated, and
compared with JAX (the same rule written in jax.numpy, differentiated twice) and with finite differences."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradguard.engines import fd
from gradguard.engines.tape import pullback_derivative

jax.config.update("jax_enable_x64", True)


def rules(m):
    """Each rule written once against a NumPy-like namespace ``m`` (numpy for the tape, jax.numpy for JAX)."""
    return {
        "sin": (lambda x: (m.sin(x), lambda g: (g * m.cos(x),)), [(3,)]),
        "tanh-through-output": (lambda x: (lambda t: (t, lambda g: (g * (1 - t * t),)))(m.tanh(x)), [(2, 3)]),
        "mul-broadcast": (lambda a, b: (a * b, lambda g: (g * b, m.sum(g * a, axis=0))), [(2, 3), (3,)]),
        "matmul": (lambda a, b: (a @ b, lambda g: (g @ b.T, a.T @ g)), [(2, 3), (3, 4)]),
        "log-divide": (lambda x: (m.log(x), lambda g: (g / x,)), [(3,)]),
        "exp-power": (lambda x: (m.exp(x) ** 2.0, lambda g: (2.0 * g * m.exp(2.0 * x),)), [(3,)]),
        "sum-mean": (lambda x: (m.mean(x, axis=1), lambda g: (m.reshape(g, (2, 1)) * m.ones((2, 3)) / 3.0,)), [(2, 3)]),
    }


NAMES = sorted(rules(np))


def _draw(shapes, seed):
    rng = np.random.default_rng(seed)
    args = tuple(rng.uniform(0.5, 2.0, s) for s in shapes)
    return args, rng


def _jax_reference(rule, args, ybar, w):
    def objective(xs, yb):
        tangents = rule(*xs)[1](yb)
        return sum(jnp.sum(t * wi) for t, wi in zip(tangents, w))

    gx, gy = jax.grad(objective, argnums=(0, 1))(tuple(jnp.asarray(a) for a in args), jnp.asarray(ybar))
    return [np.asarray(g) for g in gx], np.asarray(gy)


@pytest.mark.parametrize("name", NAMES)
def test_pullback_derivative_matches_jax(name: str) -> None:
    rule, shapes = rules(np)[name]
    jrule, _ = rules(jnp)[name]
    args, rng = _draw(shapes, 0)
    y = rule(*args)[0]
    ybar = rng.normal(size=np.shape(y))
    w = tuple(rng.normal(size=s) for s in shapes)
    d = pullback_derivative(rule, args, [ybar], w, diff=range(len(args)))
    gx, gy = _jax_reference(jrule, args, ybar, w)
    assert d.output_traced and d.escapes == [] and d.untraced_tangents == ()
    for got, want in zip(d.wrt_args, gx):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(d.wrt_cotangent[0], gy, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_pullback_derivative_matches_finite_differences(name: str) -> None:
    rule, shapes = rules(np)[name]
    args, rng = _draw(shapes, 1)
    ybar = rng.normal(size=np.shape(rule(*args)[0]))
    w = tuple(rng.normal(size=s) for s in shapes)
    u = tuple(rng.normal(size=s) for s in shapes)
    d = pullback_derivative(rule, args, [ybar], w, diff=range(len(args)))
    numeric = fd.directional(lambda *a: rule(*a)[1](ybar), args, u, w)
    tape = sum(float(np.sum(g * v)) for g, v in zip(d.wrt_args, u))
    assert abs(tape - numeric.value) <= 1e-7 * (1 + abs(tape)) + 10 * numeric.error


def test_a_copy_read_out_of_the_trace_is_recorded_and_constant() -> None:
    def detached(x):
        slope = np.array(np.cos(x))
        return np.sin(x), lambda g: (g * slope,)

    x = np.array([0.3, 1.2])
    d = pullback_derivative(detached, (x,), [np.ones(2)], (np.ones(2),), diff=(0,))
    assert [(e.how, e.phase) for e in d.escapes] == [("np.asarray/np.array", "forward")]
    assert d.escapes[0].site.startswith("test_tape_second.py:")
    np.testing.assert_array_equal(d.wrt_args[0], np.zeros(2))  # the tape sees a constant slope


def test_outside_a_second_order_trace_conversion_still_raises() -> None:
    from gradguard.engines.errors import TraceError
    from gradguard.engines.tape import grad

    with pytest.raises(TraceError, match="converting a Tracked value to a plain array"):
        grad(lambda x: np.sum(np.asarray(x)), np.ones(2))


# -- memory: nothing of the trace outlives the call ----------------------------------------------------
def test_the_traces_intermediates_are_freed_when_the_call_returns():
    """A trace's Tracked values refer to the tape, whose nodes refer back to them: unless the call breaks the
    cycle, every intermediate of the rrule and the pullback (on large inputs, many copies of the input) lives
    on until the garbage collector happens to run."""
    import gc
    import weakref

    kept = []

    def cos_rrule(x):
        slope = -np.sin(x)
        kept.append(weakref.ref(slope.value))  # a residual of the forward, an intermediate of the trace
        return np.cos(x), lambda g: (g * slope,)

    x, g, w = np.array([0.5, 1.0, 2.0]), np.array([1.0, -2.0, 0.5]), (np.array([1.0, 3.0, 1.0]),)
    gc.disable()
    try:
        d = pullback_derivative(cos_rrule, (x,), [g], w, diff=[0])
        assert kept and kept[0]() is None, "the trace's residual outlived the call"
    finally:
        gc.enable()
    assert np.allclose(d.wrt_args[0], -np.cos(x) * g * w[0])  # d/dx <w, g * -sin(x)>


def test_a_node_keeps_only_the_values_its_pullback_reads(monkeypatch):
    """exp's pullback reads its output, not its input; add's reads neither. The tape holds, until its sweep,
    only what the pullbacks read: an intermediate that only feeds such operations is freed as soon as the
    rule's code lets go of it (on large inputs, a copy of the input per operation), and the derivative is
    unchanged."""
    from gradguard.engines.tape import _tape

    monkeypatch.setattr(_tape, "SHAPE_ONLY_FROM_BYTES", 0)  # these arrays are small: hold them by shape too
    import weakref

    from gradguard.engines.tape import tnp
    from gradguard.engines.tape._tape import Tape, backward

    tape = Tape()
    x = tape.track(np.array([0.5, 1.0, 2.0]))
    tape.active = True
    try:
        negated = -x
        gone = [weakref.ref(negated.value)]
        e = np.exp(negated)
        del negated
        shifted = e + 1.0
        gone.append(weakref.ref(shifted.value))
        total = tnp.sum(np.log(shifted) * 1.0)  # log reads its input: ``shifted`` stays, read
        del shifted
        summed = e + e
        gone.append(weakref.ref(summed.value))
        total = total + tnp.sum(summed)
        del summed
    finally:
        tape.active = False
    assert [r() for r in gone] == [None, gone[1](), None] and gone[1]() is not None
    ct, _, _ = backward(tape, [(total, np.float64(1.0))], "skip", keep=[x.slot])
    v = x.value
    assert np.allclose(ct[x.slot], -np.exp(-v) / (np.exp(-v) + 1.0) - 2 * np.exp(-v))


def test_an_in_place_add_keeps_no_copy_of_what_it_overwrote(monkeypatch):
    """``b += a``'s pullback reads nothing: its node holds no array of the call's size, not even a copy of b's
    old values; ``b *= a`` reads b's old values and a, and holds exactly those two."""
    from gradguard.engines.tape import _tape

    monkeypatch.setattr(_tape, "SHAPE_ONLY_FROM_BYTES", 0)  # these arrays are small: hold them by shape too
    from gradguard.engines.tape import tnp
    from gradguard.engines.tape._tape import Tape, backward

    for op, held_arrays in (("add", 0), ("multiply", 2)):
        tape = Tape()
        a = tape.track(np.array([1.0, 2.0, 3.0]))
        tape.active = True
        try:
            b = a * 1.0
            if op == "add":
                b += a
            else:
                b *= a
            total = tnp.sum(b)
        finally:
            tape.active = False
        node = [n for n in tape.nodes if n.name.endswith("(in place)")][0]
        held = [c.cell_contents for c in node.pullback.__closure__ if isinstance(c.cell_contents, np.ndarray)]
        assert len([h for h in held if h.strides != (0,)]) == held_arrays, (op, [h.strides for h in held])
        ct, _, _ = backward(tape, [(total, np.float64(1.0))], "skip", keep=[a.slot])
        assert np.allclose(ct[a.slot], 2.0 if op == "add" else 2 * np.array([1.0, 2.0, 3.0]))


def test_what_the_objective_does_not_depend_on_is_let_go_before_the_sweep(monkeypatch):
    """The derivative of a pullback does not depend on the rule's output unless the pullback reads it. The
    output's node (exp's pullback reads the output) leaves the tape before the sweep starts, and with it the
    output; so do the tangent and its product with the covector (one node reads the covector only)."""
    from gradguard.engines.tape import _tape

    monkeypatch.setattr(_tape, "SHAPE_ONLY_FROM_BYTES", 0)  # these arrays are small: hold them by shape too
    import weakref

    from gradguard.engines.tape import primitive

    refs: dict[str, Any] = {}
    seen_in_sweep: list[list[Any]] = []

    def probe_rrule(s):
        def pullback(g):
            seen_in_sweep.append([r() for r in refs.values()])
            return (g * np.cos(s),)

        return np.sin(s), pullback

    probe = primitive(probe_rrule, name="probe")

    def rule(x):
        y = np.exp(x)
        refs["output"] = weakref.ref(y.value)
        s = probe(x)  # the residual; its pullback runs in the sweep, after the nodes above it
        return y, lambda g: (keep(g * s),)

    def keep(t):
        refs["tangent"] = weakref.ref(t.value)
        return t

    x, g, w = np.array([0.5, 1.0, 2.0]), np.array([1.0, -2.0, 0.5]), (np.array([1.0, 3.0, 1.0]),)
    d = pullback_derivative(rule, (x,), [g], w, diff=[0])
    assert [[v is None for v in seen] for seen in seen_in_sweep] == [[True, True]]  # output, tangent: gone
    assert np.allclose(d.wrt_args[0], g * np.cos(x) * w[0])  # d/dx <w, g * sin(x)>
    assert np.allclose(d.wrt_cotangent[0], np.sin(x) * w[0])


def test_only_a_trace_of_large_arrays_holds_values_by_shape():
    """Stand-ins cost time on every operation and save nothing on small arrays: a trace turns lean from the
    first array of SHAPE_ONLY_FROM_BYTES it tracks (an input or an intermediate), and then a node holds an
    unread large value by shape only."""
    from gradguard.engines.tape import tnp
    from gradguard.engines.tape._tape import SHAPE_ONLY_FROM_BYTES, Tape

    tape = Tape()
    x = tape.track(np.ones(3))
    tape.active = True
    try:
        small = tnp.sum(x + 1.0)
        assert not tape.lean
        n = SHAPE_ONLY_FROM_BYTES // 8 + 1
        wide = tnp.outer(x, np.ones(n))  # a large intermediate of small inputs
        assert tape.lean
        tnp.sum(wide + 1.0)
    finally:
        tape.active = False
    add = [node for node in tape.nodes if node.name == "add"][-1]
    assert add.inputs[0].value.strides == (0, 0) and add.outputs[0].value.strides == (0, 0)
    assert [node for node in tape.nodes if node.name == "add"][0].inputs[0].value is x.value
    del small


def test_backward_keeps_only_the_cotangents_asked_for_and_consumes_the_tape():
    from gradguard.engines.tape import tnp
    from gradguard.engines.tape._tape import Tape, backward

    tape = Tape()
    x = tape.track(np.array([0.5, 1.0, 2.0]))
    tape.active = True
    try:
        total = tnp.sum(np.sin(x) * np.sin(x))
    finally:
        tape.active = False
    every, _, _ = backward(tape, [(total, np.float64(1.0))], "skip")
    assert len(every) > 1 and tape.nodes  # every slot's cotangent, and the tape can be swept again
    kept, _, _ = backward(tape, [(total, np.float64(1.0))], "skip", keep=[x.slot], consume=True)
    assert list(kept) == [x.slot] and np.array_equal(kept[x.slot], every[x.slot])
    assert tape.nodes == []


def test_python_float_arguments_get_ieee_arithmetic_not_python_errors() -> None:
    """pyadjoint's AdjFloat adjoints take Python floats: the tape's own power rule computed ``y * x ** (y - 1)`` in
    Python arithmetic and raised ZeroDivisionError at x = 0.0 and OverflowError at x = 1e-300, which GG204 reported as
    the rule failing to trace. NumPy's scalars give inf and NaN there, as the same rule on arrays does."""

    def power_rrule(x, y):
        return x ** y, lambda g: (g * y * x ** (y - 1), None)

    for x, y in ((0.0, 0.0), (0.0, 1.0), (1e-300, -2.0), (2.0, 3.0)):
        with np.errstate(all="ignore"):
            d = pullback_derivative(power_rrule, (x, y), [1.0], (1.0, None), diff=(0,))
            on_arrays = pullback_derivative(power_rrule, (np.array([x]), np.array([y])), [np.ones(1)],
                                            (np.ones(1), None), diff=(0,))
        np.testing.assert_array_equal(np.asarray(d.wrt_args[0]).reshape(1), on_arrays.wrt_args[0])
    d = pullback_derivative(power_rrule, (2.0, 3.0), [1.0], (1.0, None), diff=(0,))
    assert d.wrt_args[0] == 3 * 2 * 2.0  # d/dx of y x**(y - 1) = y (y - 1) x**(y - 2)

"""The tape's Zygote/ChainRules semantics: the seed mutation hazard, watch mode, unused-output policies,
aliasing, user primitives, within_gradient, and the errors it raises instead of a wrong gradient."""

import warnings

import numpy as np
import pytest

import gradguard.engines.tape
from gradguard import engines
from gradguard.engines.errors import EngineError, TraceError
from gradguard.engines.tape import (
    MutationDiagnosis,
    MutationWarning,
    TapeResult,
    Tracked,
    grad,
    primitive,
    run_backward,
    tnp,
    value_and_grad,
    vjp,
)


def addone_rrule(a):
    """The seed rule: mutates its argument, returns a scalar; correct in isolation."""
    a += 1
    y = a.sum()
    return y, lambda ybar: (np.full(a.shape, ybar),)


addone_ = primitive(addone_rrule, name="addone_")


def addone_none_rrule(a):
    """The same rule, with a pullback that also accepts an absent (None) cotangent."""
    y, pullback = addone_rrule(a)
    return y, lambda ybar: (None,) if ybar is None else pullback(ybar)


def seed_program(x, rule=addone_):
    y = tnp.dot(x, x)  # dot's pullback captures x by reference
    rule(x)  # mutates x; its output is unused
    return x[0] + y


def mutation_free_seed_gradient(x):
    g = 2 * x  # d/dx dot(x, x), read before the mutation
    g[0] += 1
    return g


# ---- the seed hazard ----


@pytest.mark.parametrize("unused", ["zero", "none", "skip"])
def test_seed_program_gives_a_silently_wrong_gradient(unused):
    x = np.array([1.0, 2.0, 3.0])
    expected = mutation_free_seed_gradient(x.copy())
    rule = primitive(addone_none_rrule, name="addone_")

    result = run_backward(lambda x: seed_program(x, rule), (x,), 1.0, unused=unused)

    assert result.diagnoses == []  # no watch: silent
    np.testing.assert_array_equal(x, [2.0, 3.0, 4.0])  # the caller's array was mutated in place
    np.testing.assert_array_equal(result.grads[0], 2 * x + [1, 0, 0])  # dot read the mutated x
    assert not np.allclose(result.grads[0], expected)
    assert result.steps == ["dot", "addone_", "getitem", "add"]
    assert result.unused_nodes == ["addone_"]


def test_watch_names_dot_and_addone():
    x = np.array([1.0, 2.0, 3.0])
    result = run_backward(seed_program, (x,), 1.0, watch=True)

    assert MutationDiagnosis(op="dot", op_step=0, argument=0, mutated_by="addone_", mutated_step=1,
                             captured="argument 0") in result.diagnoses
    assert {(d.op, d.mutated_by) for d in result.diagnoses} == {("dot", "addone_")}
    assert result.diagnoses[0].message == (
        "`dot` (step 0) captured argument 0 by reference; `addone_` (step 1) mutated it in place before the "
        "backward pass, so dot's pullback read the mutated values."
    )
    np.testing.assert_array_equal(result.grads[0], [5.0, 6.0, 8.0])  # watching does not change the answer


def test_watch_attributes_plain_numpy_mutation_to_the_program():
    def program(x):
        y = tnp.exp(x) * 2.0
        z = tnp.sin(y)
        y.value[0] = 0.0  # in-place NumPy code the tape cannot see
        return tnp.sum(z * x)

    result = run_backward(program, (np.array([0.1, 0.2]),), 1.0, watch=True)
    (d,) = [d for d in result.diagnoses if d.op == "sin"]
    assert (d.op_step, d.argument, d.mutated_step) == (2, 0, None)
    assert d.mutated_by == "the program between step 2 and step 3"
    assert "the program between step 2 and step 3 mutated it in place" in d.message


def test_watch_reports_in_place_operator_and_grad_warns():
    def program(x):
        y = x * x
        x += 1.0  # NumPy semantics: writes into the caller's array, recorded as a step
        return tnp.sum(y) + tnp.sum(x)

    with pytest.warns(MutationWarning, match="`add \\(in place\\)` \\(step 1\\) mutated it"):
        g = grad(program, np.array([1.0, 2.0]), watch=True)
    np.testing.assert_array_equal(g, [5.0, 7.0])  # 2 * (x + 1) + 1: multiply read the mutated x


def test_in_place_operators_are_exact_when_nothing_captured_the_array():
    def program(x, y):
        x *= y  # the in-place rule keeps its own copy of the old x
        x /= 2.0
        x -= 1.0
        return tnp.sum(x * x)

    x0, y = np.array([0.3, -0.7]), np.array([2.0, 5.0])
    gx, gy = grad(program, x0.copy(), y, argnums=(0, 1))
    u = x0 * y / 2 - 1
    np.testing.assert_allclose(gx, u * y)
    np.testing.assert_allclose(gy, u * x0)


def test_in_place_operator_after_a_capture_is_the_pytorch_hazard():
    def program(x):
        x *= tnp.sin(x)  # sin's pullback captured x; the multiply then overwrites it
        return tnp.sum(x)

    result = run_backward(program, (np.array([0.3, -0.7]),), 1.0, watch=True)
    assert [(d.op, d.mutated_by) for d in result.diagnoses] == [("sin", "multiply (in place)")]


def test_no_diagnosis_without_mutation_and_none_for_skipped_pullbacks():
    x = np.array([1.0, 2.0])
    assert run_backward(lambda x: tnp.sum(tnp.dot(x, x) * x), (x,), 1.0, watch=True).diagnoses == []

    def program(x):
        y = tnp.sin(x)  # unused and captured x
        x.value[0] = 5.0
        return tnp.sum(x)

    assert run_backward(program, (x.copy(),), 1.0, watch=True, unused="skip").diagnoses == []
    assert len(run_backward(program, (x.copy(),), 1.0, watch=True, unused="zero").diagnoses) == 1


# ---- unused outputs ----


def recording_rule(calls, name):
    def rrule(a):
        def pullback(ybar):
            calls.append((name, ybar if ybar is None else np.array(ybar)))
            return (None if ybar is None else ybar * np.ones_like(a),)

        return a * 1.0, pullback

    return primitive(rrule, name=name)


def test_unused_policies():
    for policy, expected in [("zero", [("g", 0.0), ("f", 0.0)]), ("none", [("g", None), ("f", None)]), ("skip", [])]:
        calls = []
        f, g = recording_rule(calls, "f"), recording_rule(calls, "g")

        def program(x):
            g(f(x))  # f only feeds an unused node: treated as unused too
            return tnp.sum(x * x)

        result = run_backward(program, (np.array([1.0, 2.0]),), 1.0, unused=policy)
        assert [(n, None if c is None else float(np.abs(c).sum())) for n, c in calls] == expected, policy
        assert result.unused_nodes == ["f", "g"]
        np.testing.assert_array_equal(result.grads[0], [2.0, 4.0])


def test_zero_cotangent_has_the_output_shape():
    calls = []
    f = recording_rule(calls, "f")
    run_backward(lambda x: (f(x), tnp.sum(x))[1], (np.ones((2, 3)),), 1.0)
    assert calls[0][1].shape == (2, 3)


def test_none_policy_raises_when_the_pullback_does_not_accept_none():
    x = np.array([1.0, 2.0])
    with pytest.raises(TypeError):
        run_backward(seed_program, (x,), 1.0, unused="none")  # np.full(shape, None) is no tangent
    scale = primitive(lambda a: (2.0 * a, lambda ybar: (2.0 * ybar,)), name="scale")
    with pytest.raises(TypeError, match="NoneType"):
        run_backward(lambda x: (scale(x), tnp.sum(x))[1], (x,), 1.0, unused="none")
    run_backward(lambda x: (scale(x), tnp.sum(x))[1], (x,), 1.0, unused="skip")  # never called


def test_a_pullback_that_ignores_its_cotangent_leaks_through_an_unused_output():
    ones_rule = primitive(lambda a: (a.sum(), lambda ybar: (np.ones(a.shape),)), name="ones_bug")
    program = lambda x: (ones_rule(x), tnp.sum(x * x))[1]  # noqa: E731
    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(grad(program, x, unused="zero"), [3.0, 5.0])
    np.testing.assert_array_equal(grad(program, x, unused="skip"), [2.0, 4.0])


def test_bad_policy_is_rejected_eagerly():
    with pytest.raises(ValueError, match="unused='never'"):
        grad(lambda x: tnp.sum(x), np.ones(2), unused="never")


# ---- primitives ----


def test_primitive_receives_the_raw_arrays_by_reference():
    seen = []

    def rrule(a, b):
        seen.append((a, b))
        return a * b, lambda ybar: (ybar * b, ybar * a)

    mul = primitive(rrule, name="mul")
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    g = grad(lambda x, y: tnp.sum(mul(x, y)), x, y, argnums=(0, 1))
    assert seen[0][0] is x and seen[0][1] is y
    np.testing.assert_array_equal(g[0], y)
    np.testing.assert_array_equal(g[1], x)
    assert mul(x, y) is not None and type(mul(x, y)) is np.ndarray  # no Tracked argument: plain call


def test_primitive_with_tuple_output_float_output_and_nondiff_argument():
    def rrule(a, k):
        return (a * k, float(a.sum())), lambda ybar: (ybar[0] * k + ybar[1], "ignored")

    split = primitive(rrule, name="split", nondiff=(1,))
    x = np.array([1.0, 2.0])
    value, g = value_and_grad(lambda x: tnp.sum(split(x, 3.0)[0]) + split(x, 3.0)[1] * 2.0, x)
    assert value == 15.0
    np.testing.assert_array_equal(g, [5.0, 5.0])
    result = run_backward(lambda x, k: split(x, k), (x, 3.0), (np.ones(2), None))
    np.testing.assert_array_equal(result.grads[0], [3.0, 3.0])
    assert result.grads[1] == 0.0  # k is a float argument, but nondiff in the rule


def test_pullback_contract_violations_raise():
    bad_count = primitive(lambda a: (a.sum(), lambda ybar: (ybar, ybar)), name="bad_count")
    with pytest.raises(EngineError, match=r"pullback of `bad_count` must return one tangent per argument \(1\)"):
        grad(lambda x: bad_count(x), np.ones(2))
    bad_shape = primitive(lambda a: (a.sum(), lambda ybar: (np.ones(3),)), name="bad_shape")
    with pytest.raises(EngineError, match=r"shape \(3,\) for argument 0, whose shape is \(2,\)"):
        grad(lambda x: bad_shape(x), np.ones(2))
    not_pair = primitive(lambda a: a.sum(), name="not_pair")
    with pytest.raises(EngineError, match="must return a pair"):
        grad(lambda x: not_pair(x), np.ones(2))


# ---- aliasing ----


def test_same_array_in_two_slots_gets_one_gradient_per_slot():
    x = np.array([1.0, 2.0])
    ga, gb = grad(lambda a, b: tnp.sum(a * b * b), x, x, argnums=(0, 1))
    np.testing.assert_array_equal(ga, x * x)
    np.testing.assert_array_equal(gb, 2 * x * x)  # their sum is d/dx sum(x**3)


def test_view_built_inside_the_program_accumulates():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(grad(lambda x: tnp.sum(x * x.T), x), 2 * x.T)
    np.testing.assert_array_equal(grad(lambda x: tnp.sum(x @ x), x), x.sum(0)[:, None] + x.sum(1)[None, :])


# ---- within_gradient ----


def test_within_gradient_is_true_only_for_tracked_values_during_a_trace():
    seen, escaped = [], []

    def program(x, c):
        seen.append((engines.within_gradient(x), engines.within_gradient(c)))
        escaped.append(x)
        return tnp.sum(x * c)

    x = np.ones(2)
    grad(program, x, np.ones(2))
    assert seen == [(True, False)]
    assert not engines.within_gradient(x)
    assert not engines.within_gradient(escaped[0])  # the trace has finished


# ---- errors instead of wrong gradients ----


@pytest.mark.parametrize(
    "program, match",
    [
        (lambda x: np.linalg.inv(x).sum(), "np.linalg.inv is not supported on Tracked values"),
        (lambda x: np.cumsum(x).sum(), "np.cumsum is not supported"),
        (lambda x: np.arctan(x).sum(), "np.arctan is not supported"),
        (lambda x: tnp.sum(np.asarray(x)), "converting a Tracked value to a plain array"),
        (lambda x: float(x[0, 0]), r"float\(\) of a Tracked value"),
        (lambda x: x.__setitem__(0, 1.0), "item assignment into a Tracked array"),
        (lambda x: tnp.sum(np.add(x, 1.0, out=x.value)), "np.add with out="),
        (lambda x: tnp.dot(tnp.reshape(x, (1, 2, 2)), x), "tnp.dot supports operands of up to 2 dimensions"),
    ],
)
def test_unsupported_operations_raise_trace_error(program, match):
    with pytest.raises(TraceError, match=match):
        grad(program, np.eye(2))


def test_unsupported_message_says_what_to_do():
    with pytest.raises(TraceError, match=r"engines\.tape\.primitive\(rrule, name='inv'\)"):
        grad(lambda x: np.linalg.inv(x).sum(), np.eye(2))


def test_escaped_tracked_value_raises():
    escaped = []
    grad(lambda x: escaped.append(x) or tnp.sum(x), np.ones(2))
    with pytest.raises(TraceError, match="trace has finished"):
        tnp.sin(escaped[0])


def test_argument_errors_are_eager():
    with pytest.raises(TypeError, match="argument 1 is 3"):
        grad(lambda x, n: tnp.sum(x) * n, np.ones(2), 3, argnums=1)
    with pytest.raises(TypeError, match="real scalar"):
        grad(lambda x: x * 2.0, np.ones(2))
    with pytest.raises(ValueError, match="shape \\(3,\\) for output 0"):
        run_backward(lambda x: x * 2.0, (np.ones(2),), np.ones(3))


# ---- the public surface ----


def test_exports():
    assert set(engines.tape.__all__) == {
        "grad", "value_and_grad", "vjp", "run_backward", "primitive", "tnp", "Tracked", "TapeResult",
        "MutationDiagnosis", "MutationWarning", "is_tracing", "pullback_derivative", "PullbackDerivative", "Escape",
    }


def test_run_backward_result_and_vjp_shapes():
    x, n = np.array([1.0, 2.0]), 3
    result = run_backward(lambda x, n: x * n, (x, n), np.array([1.0, 1.0]), wrt=(0,))
    assert isinstance(result, TapeResult)
    np.testing.assert_array_equal(result.value, [3.0, 6.0])
    assert result.grads[1] is None and result.steps == ["multiply"]
    out, vjp_fn = vjp(lambda x, n: x * n, x, n)
    g = vjp_fn(np.array([1.0, 0.0]))
    np.testing.assert_array_equal(g[0], [3.0, 0.0])
    assert g[1] is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vjp_fn(np.array([1.0, 1.0]))  # reusable, no warnings without watch
    unconnected = grad(lambda x, y: tnp.sum(x), x, x, argnums=1)
    np.testing.assert_array_equal(unconnected, [0.0, 0.0])
    assert isinstance(Tracked, type)


def test_none_policy_never_hands_none_to_a_builtin_pullback():
    """A user pullback may return None for an argument built by a built-in op (here x.T); under the
    "none" policy that built-in must be skipped, not called with None (it once raised)."""
    from gradguard.engines.tape import grad, primitive, tnp

    def rule(a, b):
        return a * b, lambda g: (g * b, None)

    mul_first = primitive(rule, name="mul_first")
    x = np.arange(4.0).reshape(2, 2)
    g = grad(lambda x: tnp.sum(mul_first(x, x.T)), x, unused="none")
    np.testing.assert_allclose(g, x.T)

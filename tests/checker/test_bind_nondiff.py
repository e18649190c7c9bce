"""bind_nondiff (the JAX checks' rule function with its constant arguments fixed): array constants are cached by
value, so that each drawn input's new copy of the same index array reuses one traced and compiled program,
while different values, dtypes or shapes, and rules that write into their arguments, get their own."""

import numpy as np
import pytest

from gradguard import arrays, constant, rrule
from gradguard.checker.case import Case, ReplayDraws
from gradguard.checker.checks._jax import bind_nondiff


def take(x, index):
    return x[index]


@rrule(take, arrays(shape=(4,)), constant(np.array([3, 0, 3])))
def take_rrule(x, index):
    def pullback(ybar):
        g = np.zeros_like(x)
        np.add.at(g, index, ybar)
        return g, None

    return x[index], pullback


def take_into(x, index):
    x[0] = 0.0
    return x[index]


@rrule(take_into, arrays(shape=(4,)), constant(np.array([3, 0, 3])), mutates=(0,))
def take_into_rrule(x, index):
    take_into(x, index)
    return x[index], lambda ybar: (np.zeros_like(x), None)


def _case(rule, index):
    return Case(rule, (np.arange(4.0), index), ReplayDraws([]))


def test_equal_array_constants_share_one_bound_function_holding_its_own_copy():
    rule = take_rrule  # the decorator gives the RuleSpec
    first = np.array([3, 0, 3])
    bound, diff = bind_nondiff(take, _case(rule, first))
    again, _ = bind_nondiff(take, _case(rule, np.array([3, 0, 3])))
    assert diff == (0,) and again is bound
    first[:] = 1  # the case's array changes later: the cached function computes with the values it was keyed by
    np.testing.assert_array_equal(bound(np.arange(4.0)), [3.0, 0.0, 3.0])


def test_a_read_only_array_constant_stays_read_only_in_the_bound_function():
    rule = take_rrule
    index = np.array([2, 1, 0])
    index.flags.writeable = False
    seen = []
    bound, _ = bind_nondiff(lambda x, i: seen.append(i.flags.writeable) or x[i], _case(rule, index))
    np.testing.assert_array_equal(bound(np.arange(4.0)), [2.0, 1.0, 0.0])
    assert seen == [False]


def test_different_values_dtypes_or_shapes_get_their_own_bound_function():
    rule = take_rrule
    bound, _ = bind_nondiff(take, _case(rule, np.array([3, 0, 3])))
    others = [np.array([3, 0, 2]), np.array([3, 0, 3], dtype=np.int32), np.array([[3, 0, 3]])]
    found = [bind_nondiff(take, _case(rule, index))[0] for index in others]
    assert all(f is not bound for f in found) and len({id(f) for f in found}) == len(found)
    np.testing.assert_array_equal(found[0](np.arange(4.0)), [3.0, 0.0, 2.0])


def test_a_rule_that_mutates_its_arguments_gets_the_cases_own_constants():
    rule = take_into_rrule
    bound, _ = bind_nondiff(take_into, _case(rule, np.array([3, 0, 3])))
    again, _ = bind_nondiff(take_into, _case(rule, np.array([3, 0, 3])))
    assert again is not bound


def test_a_held_copy_a_rule_wrote_into_is_not_used_again():
    rule = take_rrule  # declares no `mutates`, yet the function below writes into its index
    def writes_index(x, index):
        index[0] = 1
        return x[index]

    bound, _ = bind_nondiff(writes_index, _case(rule, np.array([3, 0, 3])))
    np.testing.assert_array_equal(bound(np.arange(4.0)), [1.0, 0.0, 3.0])
    again, _ = bind_nondiff(writes_index, _case(rule, np.array([3, 0, 3])))
    assert again is not bound  # its key says [3, 0, 3]; the copy it held now says [1, 0, 3]
    np.testing.assert_array_equal(again(np.arange(4.0)), [1.0, 0.0, 3.0])


def test_equal_jax_array_constants_share_one_bound_function():
    jnp = pytest.importorskip("jax.numpy")
    rule = take_rrule
    bound, _ = bind_nondiff(take, _case(rule, jnp.array([3, 0, 3])))
    again, _ = bind_nondiff(take, _case(rule, jnp.array([3, 0, 3])))  # a new JAX array of the same contents
    other, _ = bind_nondiff(take, _case(rule, jnp.array([2, 0, 3])))
    assert again is bound and other is not bound
    np.testing.assert_array_equal(other(np.arange(4.0)), [2.0, 0.0, 3.0])

"""GG203 at the edge of the primal's domain: where central finite differences leave the domain, one-sided ones
from the side where the primal is defined still decide between the rule and JAX's own derivative.

lsqfitgp's Matern kernel f(s) = exp(-sqrt s) (1 + sqrt s + s/3) has f'(0+) = -1/6, which its custom rule gives;
JAX differentiates through sqrt(s) and gets +1/6 at s = 2.6e-42. Every central step crosses 0, so no finite
difference was available and GG203 took JAX's word: a false error at every seed. The reference must never
overrule the primal's own finite differences, one-sided ones included; where those agree with JAX, the finding
stands and says so."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradguard.checker import arrays, check, jax_rule
from gradguard.checker.kinks import contracted, defined_side

jax.config.update("jax_enable_x64", True)


def matern_with(derivative, name):
    @jax.custom_vjp
    def matern(s):
        r = jnp.sqrt(s)
        return jnp.exp(-r) * (1 + r)  # 1 - s/2 + O(s^2): smooth from the right at 0

    def fwd(s):
        return matern(s), s

    matern.defvjp(fwd, lambda s, g: (g * derivative(s),))
    # at s within 1e-30 of 0 JAX's derivative of sqrt(s) cancels to 0 (1 + r rounds to 1), not -1/2
    return jax_rule(matern, arrays(shape=(3,), min_value=0.0, max_value=1e-30), name=name)


def test_one_sided_differences_overrule_jax_at_the_edge_of_the_domain():
    right = matern_with(lambda s: -0.5 * jnp.exp(-jnp.sqrt(s)), "matern")
    for seed in (0, 1):
        result = check(right, seed=seed, select=["GG203"]).rules[0]
        assert result.verdict == "pass", [f.message for f in result.findings]
        assert result.checks_run == ["GG203"]


def sqrt_squared_with(factor, name):
    @jax.custom_vjp
    def sqrt_squared(s):
        return jnp.sqrt(s) ** 2  # s for s >= 0, NaN below: JAX's derivative is 1 wherever sqrt(s) > 0

    sqrt_squared.defvjp(lambda s: (sqrt_squared(s), None), lambda _, g: (factor * g,))
    return jax_rule(sqrt_squared, arrays(shape=(3,), min_value=1e-300, max_value=1e-200), name=name)


def test_where_one_sided_differences_agree_with_jax_the_finding_says_so():
    assert check(sqrt_squared_with(1.0, "sqrt_squared"), select=["GG203"]).rules[0].verdict == "pass"
    (finding,) = check(sqrt_squared_with(2.0, "sqrt_squared_doubled"), select=["GG203"]).findings
    assert finding.message.startswith(
        "the pullback of sqrt_squared_doubled disagrees with the JAX reference gradient (jax.vjp of the function "
        "underneath the custom_vjp): cotangent for argument 0 (s) at ")
    assert finding.message.endswith(
        "One-sided finite differences of the primal, from the side where it is defined, along the difference of the two agree with JAX."), finding.message


def test_defined_side_reads_the_one_side_where_the_function_is_defined():
    g = contracted(lambda s: np.sqrt(s) ** 2 + 3 * s, 1.0)
    value, error = defined_side(g, (np.array([1e-40]),), (np.array([1.0]),))
    assert value == pytest.approx(4.0, rel=1e-8) and error < 1e-6
    value, _ = defined_side(g, (np.array([1e-40]),), (np.array([-1.0]),))  # the defined side is behind: t < 0
    assert value == pytest.approx(-4.0, rel=1e-8)
    assert defined_side(g, (np.array([2.0]),), (np.array([1.0]),)) is None  # both sides defined: central ones serve
    assert defined_side(g, (np.array([-1.0]),), (np.array([1.0]),)) is None  # outside the domain altogether

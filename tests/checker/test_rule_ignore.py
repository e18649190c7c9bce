"""A rule's own ``ignore=``: a surrogate gradient (not the derivative on purpose) leaves the checks it fails by design
out of its own runs, and every other rule of the run keeps them."""

import numpy as np
import pytest

from gradguard.checker import arrays, check, rrule
from gradguard.checker.cache import _spec_text
from gradguard.checker.errors import SpecError

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def spike(x):
    return (x >= 0).astype(x.dtype)


def surrogate(**options):
    # a spiking network's Heaviside step, whose backward is the sigmoid's derivative on purpose
    @rrule(spike, arrays(shape=(4,), min_value=-3.0, max_value=3.0), name=options.pop("name", "spike_rrule"), **options)
    def spike_rrule(x):
        s = 1 / (1 + np.exp(-4 * x))
        return spike(x), lambda ybar: (None,) if ybar is None else (ybar * 4 * s * (1 - s),)

    return spike_rrule


def errors(result):
    return sorted({f.check_id for f in result.findings if f.severity == "error"})


def test_a_surrogate_fails_gg201_and_gg501_by_design_and_the_fix_says_how_to_leave_them_out():
    result = check(surrogate()).rules[0]
    assert {"GG201", "GG203", "GG501"} <= set(errors(result))
    (gg201,) = [f for f in result.findings if f.check_id == "GG201"][:1]
    assert 'rrule(..., ignore=["GG201", "GG203", "GG501"])' in gg201.fix
    gg501 = next(f for f in result.findings if f.check_id == "GG501" and "output-used" in f.message)
    assert 'with ignore= in its declaration (ignore=["GG201", "GG203", "GG501"]' in gg501.fix


def test_the_rules_ignore_leaves_its_checks_out_and_says_so_and_the_other_rules_keep_them():
    quiet = surrogate(name="quiet_spike_rrule", ignore=["GG201", "GG203", "GG501"])
    report = check([quiet, surrogate(name="loud_spike_rrule")])
    by_name = {r.name: r for r in report.rules}
    assert errors(by_name["quiet_spike_rrule"]) == []
    assert by_name["quiet_spike_rrule"].verdict == "pass"
    skipped = {s["id"]: s["reason"] for s in by_name["quiet_spike_rrule"].checks_skipped}
    assert skipped["GG201"] == skipped["GG501"] == "left out by the rule's declaration (ignore=['GG201', 'GG203', 'GG501'])"
    assert "GG201" not in by_name["quiet_spike_rrule"].checks_run
    assert {"GG201", "GG501"} <= set(errors(by_name["loud_spike_rrule"]))


def test_ignore_takes_prefixes_and_comma_separated_ids_and_goes_into_the_cache_key():
    rule = surrogate(ignore="gg201, GG5")
    assert rule.ignore == ("GG201", "GG5")
    result = check(rule, select=["GG2", "GG5"]).rules[0]
    left_out = {s["id"] for s in result.checks_skipped if s["reason"].startswith("left out by the rule's declaration")}
    assert left_out == {"GG201", "GG501", "GG502", "GG503"}
    assert _spec_text(rule) != _spec_text(surrogate())


@pytest.mark.parametrize("value, message", [
    (["GG2O1"], "Got ignore='GG2O1', but a check id or prefix is GG followed by up to three digits"),
    (201, "Got ignore=201, but ignore must be a check id or prefix, or a list of them"),
    ([201], "Got 201 in ignore=, but each entry must be a check id or prefix such as 'GG201'."),
])
def test_an_ignore_that_is_no_check_id_is_a_spec_error_at_declaration(value, message):
    with pytest.raises(SpecError) as err:
        surrogate(ignore=value)
    assert str(err.value).startswith(message), str(err.value)


def test_an_ignore_that_matches_no_check_makes_the_rule_an_error_that_names_it():
    result = check(surrogate(ignore="GG999")).rules[0]
    assert result.verdict == "error" and result.error["type"] == "SpecError"
    assert result.error["message"] == ("the declaration of spike_rrule: Got ignore='GG999', which matches no check id. "
                                       "Known ids: GG101..GG707.")


def test_a_torch_rule_takes_ignore_too():
    torch = pytest.importorskip("torch")
    from gradguard.checker import torch_rule

    class Spike(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return (x >= 0).to(x.dtype)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            s = torch.sigmoid(4 * x)
            return g * 4 * s * (1 - s)

    rule = torch_rule(Spike, arrays(shape=(4,), min_value=-3.0, max_value=3.0), ignore=["GG201", "GG501"])
    assert rule.ignore == ("GG201", "GG501")
    assert errors(check(rule, select=["GG201", "GG501"]).rules[0]) == []


def test_a_cell_wrong_where_the_programs_gradient_is_0_shows_a_relative_error_of_1_not_one_over_atol():
    from gradguard.checker.contexts import run_matrix

    rows = {row.context.name: row for row in run_matrix(surrogate()).rows}
    base = rows["output-used"]
    assert base.slope == 0.0  # a step's finite differences, away from its jump
    wrong = [c for c in base.cells.values() if c.status == "wrong"]
    assert wrong and all(c.rel_error == 1.0 for c in wrong)  # it read 6e+08: the error over atol's 1e-9


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_two_input_surrogate_is_not_blamed_for_aliasing_where_the_baseline_has_no_verdict(seed):
    # BrainPy's inv_square_grad2 as a custom_vjp: its aliased pullbacks add up exactly as JAX's gradient of
    # spike2(x, x) does; GG502 said they did not accumulate at seeds 0 and 2, whose baseline input sat on the jump
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from gradguard.checker import jax_rule

    @jax.custom_vjp
    def spike2(x_new, x_old):
        return jnp.asarray(jnp.logical_and(x_new >= 0, x_old < 0), dtype=x_new.dtype)

    def fwd(x_new, x_old):
        return spike2(x_new, x_old), (x_new, x_old)

    def bwd(res, dz):
        x_new, x_old = res
        dx_new = (dz / (100.0 * jnp.abs(x_new) + 1.0) ** 2) * jnp.asarray(x_old < 0, dtype=x_old.dtype)
        dx_old = -(dz / (100.0 * jnp.abs(x_old) + 1.0) ** 2) * jnp.asarray(x_new >= 0, dtype=x_new.dtype)
        return dx_new, dx_old

    spike2.defvjp(fwd, bwd)
    x = arrays(shape=(5,), min_value=-3.0, max_value=3.0)
    rule = jax_rule(spike2, x, x, ignore=["GG201", "GG203", "GG501"])
    assert errors(check(rule, seed=seed).rules[0]) == []


def test_the_verbose_matrix_of_a_rule_that_leaves_gg501_out_says_its_cells_are_not_judged():
    from gradguard.checker.terminal import render_text

    text = render_text(check(surrogate(ignore=["GG201", "GG203", "GG501"])), verbose=True)
    assert "(the matrix's cells are not judged: GG501 left out by the rule's declaration)" in text
    assert "not judged" not in render_text(check(surrogate()), verbose=True)

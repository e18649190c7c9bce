"""``nondiff_outputs=``: outputs of a tuple that programs never differentiate.

maxtext's cross-entropy returns its loss and a z-loss its training only logs, and its bwd ignores the z-loss's
cotangent. Undeclared, GG201 reports that (rightly: a program that differentiates the z-loss gets a wrong
gradient); declared, every check hands that output a zero cotangent, as PyTorch does for an output marked with
``ctx.mark_non_differentiable``, and the other outputs are checked as before. A declaration never hides a pullback
that ignores a differentiated output, and one that names no output is a contract error (GG101).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from gradguard.checker import arrays, check, rrule
from gradguard.checker.errors import SpecError


def _loss_and_z(x):
    lse = np.log(np.sum(np.exp(x)))
    return np.sum(x**2), lse**2


def _z_pullback(x, g):
    lse = np.log(np.sum(np.exp(x)))
    return 2 * lse * np.exp(x - lse) * g


SPEC = arrays(shape=(4,), min_value=-2, max_value=2)


def _loss_only(x):
    return _loss_and_z(x), lambda g: (2 * x * g[0],)  # the z-loss's cotangent ignored


def _z_only(x):
    return _loss_and_z(x), lambda g: (_z_pullback(x, g[1]),)  # the loss's cotangent ignored


def _both(x):
    return _loss_and_z(x), lambda g: (2 * x * g[0] + _z_pullback(x, g[1]),)


def _errors(result):
    return sorted({f.check_id for f in result.findings if f.severity == "error"})


def test_a_declared_output_s_ignored_cotangent_is_no_error_and_every_other_check_still_runs():
    declared = rrule(_loss_and_z, SPEC, nondiff_outputs=(1,), name="declared")(_loss_only)
    result = check(declared, seed=0)
    assert result.rules[0].verdict == "pass", [(f.check_id, f.message) for f in result.findings]
    assert {"GG201", "GG202", "GG301", "GG501"} <= {c for c in result.rules[0].checks_run}


def test_undeclared_the_same_rule_fails_gg201_and_the_fix_offers_the_declaration():
    undeclared = rrule(_loss_and_z, SPEC, name="undeclared")(_loss_only)
    (f,) = check(undeclared, select=["GG201"]).findings
    assert f.severity == "error"
    assert f.fix.endswith("and declaring it (nondiff_outputs=(1,)) checks the other outputs alone."), f.fix


def test_a_declaration_never_hides_a_pullback_that_ignores_a_differentiated_output():
    # the loss's cotangent ignored, the z-loss declared: the differentiated output is still judged
    wrong_output = rrule(_loss_and_z, SPEC, nondiff_outputs=(1,), name="wrong_output")(_z_only)
    assert "GG201" in _errors(check(wrong_output, seed=0))
    # the declaration on the wrong position: the z-loss's cotangent is drawn and ignored
    wrong_place = rrule(_loss_and_z, SPEC, nondiff_outputs=(0,), name="wrong_place")(_loss_only)
    assert "GG201" in _errors(check(wrong_place, seed=0))
    # the correct rule declared so passes too: the declaration asks nothing of the pullback
    full = rrule(_loss_and_z, SPEC, nondiff_outputs=(1,), name="full")(_both)
    assert check(full, seed=0).rules[0].verdict == "pass"


def test_a_declaration_that_names_no_output_is_a_contract_error():
    past_end = rrule(_loss_and_z, SPEC, nondiff_outputs=(2,), name="past_end")(_both)
    result = check(past_end, seed=0)
    (f,) = [f for f in result.findings if f.check_id == "GG101"]
    assert f.message == ("the declaration of past_end says nondiff_outputs=(2,), but the rule returns a tuple of 2 "
                         "output(s), positions 0 to 1: position(s) 2 name no output.")
    assert f.fix.startswith("nondiff_outputs names positions in the tuple the rule returns as its output")
    assert result.rules[0].verdict == "fail"

    def square(x):
        return x * x

    single = rrule(square, SPEC, nondiff_outputs=(0,), name="single")(lambda x: (x * x, lambda g: (2 * x * g,)))
    (g,) = [f for f in check(single, seed=0).findings if f.check_id == "GG101"]
    assert re.fullmatch(r"the declaration of single says nondiff_outputs=\(0,\), but the rule returns an? .*, not a "
                        r"tuple of outputs: position\(s\) 0 name no output\.", g.message), g.message
    # declared where it fits, GG101 passes the same rule's structure
    fits = rrule(_loss_and_z, SPEC, nondiff_outputs=(0, 1), name="fits")(_both)
    assert not [f for f in check(fits, select=["GG101"]).findings]


@pytest.mark.parametrize("value, text", [
    ((-1,), "Got nondiff_outputs=(-1,), but -1 is not a non-negative output position."),
    ("z", "Got nondiff_outputs='z', but nondiff_outputs must be a tuple of output positions, e.g. nondiff_outputs=(0,)."),
    ((1.0,), "Got nondiff_outputs=(1.0,), but 1.0 is not a non-negative output position."),
])
def test_a_malformed_declaration_is_refused_where_it_is_written(value, text):
    with pytest.raises(SpecError) as info:
        rrule(_loss_and_z, SPEC, nondiff_outputs=value)
    assert str(info.value) == text


def test_jax_rule_with_a_logged_output():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from gradguard.checker import jax_rule

    @jax.custom_vjp
    def loss_and_z(x):
        lse = jax.nn.logsumexp(x)
        return jnp.sum(x**2), lse**2

    def fwd(x):
        return loss_and_z(x), x

    def bwd(x, g):
        return (2 * x * g[0],)  # the z-loss's cotangent ignored, as maxtext's

    loss_and_z.defvjp(fwd, bwd)
    undeclared = jax_rule(loss_and_z, SPEC, name="undeclared")
    assert "GG201" in _errors(check(undeclared, seed=0))
    declared = jax_rule(loss_and_z, SPEC, nondiff_outputs=1, name="declared")
    result = check(declared, seed=0)
    assert result.rules[0].verdict == "pass", [(f.check_id, f.message) for f in result.findings]


def test_torch_rule_with_a_logged_output():
    torch = pytest.importorskip("torch")
    from gradguard.checker import torch_rule

    class LossAndZ(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return (x**2).sum(), torch.logsumexp(x, 0) ** 2

        @staticmethod
        def backward(ctx, g, gz):
            (x,) = ctx.saved_tensors
            return 2 * x * g  # gz ignored: not marked non-differentiable, so PyTorch would pass it

    assert "GG201" in _errors(check(torch_rule(LossAndZ, SPEC, name="undeclared"), seed=0))
    result = check(torch_rule(LossAndZ, SPEC, nondiff_outputs=(1,), name="declared"), seed=0)
    assert result.rules[0].verdict == "pass", [(f.check_id, f.message) for f in result.findings]

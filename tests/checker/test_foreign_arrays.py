"""Arrays of other libraries in a rule's inputs and outputs (gradguard.checker.foreign).

A spec that draws ``jax.Array`` values (``arrays(...).map(jnp.asarray)``, the way a JAX user declares what the
rule takes) made every float argument look like a value without a tangent: a correct pullback got GG106 ("its
tangent must be None"), for `jax_rule` and `rrule` alike, and an rrule written with ``jax.numpy`` that returns
JAX arrays was refused as an unsupported output. The checks now see NumPy copies and the rule gets its own
library's arrays: correct rules pass, broken twins still fail, and a reproducer replays them.
"""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import strategies as st
from click.testing import CliRunner

from gradguard.checker import arrays, check, jax_rule, rrule
from gradguard.checker.cli import main
from gradguard.checker.foreign import PlainArgs, library_of, to_numpy

jax.config.update("jax_enable_x64", True)


def _result(rule, **kwargs):
    result = check(rule, seed=0, **kwargs).rules[0]
    assert result.verdict != "error", result.error
    return result


def _ids(result):
    return {f.check_id for f in result.findings}


# -- a jax_rule whose spec draws jax arrays ----------------------------------------------------------------------


@jax.custom_vjp
def softplus(x):
    return jnp.logaddexp(0.0, x)


def _softplus_fwd(x):
    return jnp.logaddexp(0.0, x), jax.nn.sigmoid(x)


softplus.defvjp(_softplus_fwd, lambda sig, g: (g * sig,))


@jax.custom_vjp
def softplus_doubled(x):
    return jnp.logaddexp(0.0, x)


softplus_doubled.defvjp(_softplus_fwd, lambda sig, g: (2.0 * g * sig,))  # a factor 2 too many


def test_a_jax_rule_drawn_as_jax_arrays_passes_and_its_broken_twin_fails():
    spec = arrays(shape=(5,), min_value=-30.0, max_value=30.0).map(jnp.asarray)
    fine = _result(jax_rule(softplus, spec))
    assert fine.findings == [] and fine.verdict == "pass"
    assert "GG106" in fine.checks_run
    broken = _result(jax_rule(softplus_doubled, spec), select=["GG1", "GG2"])
    assert "GG106" not in _ids(broken)
    assert {"GG201", "GG203"} <= _ids(broken)


# -- an rrule written with jax.numpy, on the jax arrays its spec draws ------------------------------------------


def doubled_first_tanh(x):
    return jnp.tanh(x.at[0].set(2.0 * x[0]))


def _doubled_first_tanh_rrule(x, factor):
    y = jnp.tanh(x.at[0].set(2.0 * x[0]))  # .at: a method only jax arrays have

    def pullback(ybar):
        g = ybar * (1.0 - y**2)  # ybar arrives as a jax array too: the output is one
        return (g.at[0].multiply(factor),)

    return y, pullback


JAX_SPEC = arrays(shape=(3,)).map(jnp.asarray)
doubled_first_tanh_rrule = rrule(doubled_first_tanh, JAX_SPEC)(lambda x: _doubled_first_tanh_rrule(x, 2.0))
forgets_factor_rrule = rrule(doubled_first_tanh, JAX_SPEC, name="forgets_factor")(
    lambda x: _doubled_first_tanh_rrule(x, 1.0))


def test_an_rrule_on_jax_arrays_passes_and_its_broken_twin_fails():
    fine = _result(doubled_first_tanh_rrule)
    assert fine.findings == [] and fine.verdict == "pass", [f.message for f in fine.findings]
    broken = _result(forgets_factor_rrule, select=["GG1", "GG2"])
    assert "GG106" not in _ids(broken)
    gg201 = next(f for f in broken.findings if f.check_id == "GG201")
    assert gg201.message.startswith("the pullback of forgets_factor disagrees with finite differences of the primal: "
                                    "cotangent for argument 0 (x) at [0]")


def test_an_rrule_on_numpy_inputs_may_return_jax_arrays():
    def tanh(x):
        return np.tanh(x)

    @rrule(tanh, arrays(shape=(4,)))
    def tanh_rrule(x):
        y = jnp.tanh(x)  # a jax array out of NumPy input: was refused as an unsupported output
        return y, lambda ybar: (ybar * (1.0 - y**2),)

    result = _result(tanh_rrule)
    assert result.findings == [] and result.verdict == "pass"


def test_the_reproducer_of_a_rule_on_jax_arrays_hands_it_jax_arrays_again(tmp_path):
    module = tmp_path / "jax_input_rule.py"
    module.write_text(textwrap.dedent("""
        import jax
        import jax.numpy as jnp
        from gradguard import arrays, rrule

        jax.config.update("jax_enable_x64", True)

        def doubled_first(x):
            return x.at[0].multiply(2.0)

        @rrule(doubled_first, arrays(shape=(3,)).map(jnp.asarray))
        def doubled_first_rrule(x):
            return x.at[0].multiply(2.0), lambda ybar: (jnp.asarray(ybar),)   # the factor 2 forgotten
    """))
    script = _gg201_reproducer_fails(module, "doubled_first_rrule")
    assert "libraries={0: 'jax'}" in script


def _gg201_reproducer_fails(module, rule_name):
    """The text of the GG201 reproducer `gradguard check --reproducers` writes for ``module``, after running it:
    it must fail with the finding (not with an error of its own)."""
    repros = module.parent / "repros"
    run = CliRunner().invoke(main, ["check", str(module), "--select", "GG201", "--reproducers", str(repros),
                                    "--no-cache"])
    assert run.exit_code == 1, run.output
    (script,) = repros.glob("*GG201*.py")
    replay = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=module.parent)
    assert replay.returncode == 1
    assert f"AssertionError: GG201 pullback disagrees with finite differences: the pullback of {rule_name}" \
        in replay.stderr, replay.stderr
    return script.read_text()


def test_the_argument_strategy_has_the_same_repr_in_every_build():
    """The verdict cache keys a rule by its strategy's repr: the map must not print an address."""
    first = rrule(doubled_first_tanh, JAX_SPEC)(lambda x: _doubled_first_tanh_rrule(x, 2.0))
    second = rrule(doubled_first_tanh, JAX_SPEC)(lambda x: _doubled_first_tanh_rrule(x, 2.0))
    assert repr(first.args_strategy) == repr(second.args_strategy) == repr(st.tuples(JAX_SPEC))
    assert "0x" not in repr(first.args_strategy)


def test_a_spec_of_numpy_arrays_is_searched_exactly_as_without_the_layer():
    """The layer consumes no choice of its own: a seeded search draws the same examples through it. (It adds no
    span either and keeps the inner label, which a plain .map does not: test_torch_checks' seed-2 GG705 case moved
    with a map, and holds with the layer.)"""
    from hypothesis import given, seed, settings

    from gradguard.checker.foreign import plain_args

    raw = st.tuples(arrays(shape=(3, 2)), arrays(shape=(2,), min_value=0.5, max_value=2.0))

    def examples(strategy):
        seen = []

        @seed(3)
        @settings(max_examples=40, database=None, derandomize=False)
        @given(strategy)
        def collect(args):
            seen.append(tuple(a.tobytes() for a in args))

        collect()
        return seen

    wrapped, _ = plain_args(raw)
    assert examples(wrapped) == examples(raw)
    assert len(set(examples(raw))) > 10


def test_plain_args_converts_only_concrete_foreign_arrays():
    plain = PlainArgs()
    x = jnp.arange(3.0)
    out = plain((x, np.ones(2), 1.5, {"w": jnp.ones((2, 2))}))
    assert isinstance(out[0], np.ndarray) and out[0].flags.writeable and np.array_equal(out[0], [0.0, 1.0, 2.0])
    assert isinstance(out[3]["w"], np.ndarray)
    assert plain.libraries == {0: "jax", 3: "jax"}
    back = plain.restore(out)
    assert library_of(back[0]) == "jax" and library_of(back[1]) is None and back[2] == 1.5
    seen = []
    jax.jit(lambda t: seen.append(library_of(t)) or t)(x)  # a tracer is never read out
    assert seen == [None]
    assert to_numpy(3.0) == 3.0
    index = jnp.arange(3)  # an integer array has no tangent: the rule gets it as drawn
    assert to_numpy(index) is index


torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install 'gradguard[torch]'")


def test_an_rrule_on_torch_tensors_passes_and_its_broken_twin_fails():
    def tsin(x):
        return torch.sin(x)

    spec = arrays(shape=(3,)).map(torch.from_numpy)

    @rrule(tsin, spec)
    def tsin_rrule(x):
        c = torch.cos(x)
        return torch.sin(x), lambda ybar: (ybar * c,)

    @rrule(tsin, spec, name="tsin_doubled")
    def tsin_doubled_rrule(x):
        c = torch.cos(x)
        return torch.sin(x), lambda ybar: (2 * ybar * c,)

    fine = _result(tsin_rrule)
    assert fine.findings == [] and fine.verdict == "pass"
    broken = _result(tsin_doubled_rrule, select=["GG1", "GG2"])
    assert "GG106" not in _ids(broken) and "GG201" in _ids(broken)


AFFINE_MODULE = '''
from typing import NamedTuple

import torch
from gradguard import arrays, constant, torch_rule


class Params(NamedTuple):
    """norse's pattern: a Function's parameters as a NamedTuple of tensors, passed as one argument."""
    scale: torch.Tensor = torch.as_tensor(0.9, dtype=torch.float64)
    shift: torch.Tensor = torch.as_tensor(0.5, dtype=torch.float64)


class Affine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p):
        ctx.scale = p.scale
        return p.scale * x + p.shift          # the parameter on the left: a NumPy copy of it cannot take a tensor

    @staticmethod
    def backward(ctx, g):
        return FACTOR * ctx.scale * g, None


affine_rule = torch_rule(Affine, arrays(shape=(3,)), constant(Params()), name="affine_rule")
'''


def test_a_constant_holding_tensors_reaches_the_rule_as_declared(tmp_path):
    """A NamedTuple of tensor parameters declared constant(...) had its fields turned into NumPy copies, so
    norse's LIF adjoint Function drew GG101 ("unsupported operand type(s) ... 'numpy.ndarray' and 'Tensor'") at
    every seed. The broken twin's reproducer gives the rule the declared NamedTuple again (it wrote a plain tuple)."""
    from gradguard.checker.loader import load_module, rules_in

    fine_path, broken_path = tmp_path / "affine_fine.py", tmp_path / "affine_broken.py"
    fine_path.write_text(AFFINE_MODULE.replace("FACTOR * ", ""))
    broken_path.write_text(AFFINE_MODULE.replace("FACTOR", "2.0"))
    (fine,) = rules_in(load_module(fine_path))
    result = check(fine).rules[0]
    assert result.verdict == "pass", [(f.check_id, f.message) for f in result.findings]
    script = _gg201_reproducer_fails(broken_path, "affine_rule")
    assert "CONSTANT)  # CONSTANT: the value the rule declares with constant(...)" in script


class SparseTimesDense(torch.autograd.Function):
    """y = A @ B for a sparse A; ``factor`` scales A's gradient (1: right, 2: the broken twin)."""

    @staticmethod
    def forward(ctx, A, B, factor):
        ctx.save_for_backward(A, B)
        ctx.factor = factor
        return torch.sparse.mm(A, B)

    @staticmethod
    def backward(ctx, g):
        A, B = ctx.saved_tensors
        A = A.coalesce()
        i, j = A.indices()
        gA = ctx.factor * (g.index_select(0, i) * B.index_select(0, j)).sum(1)
        return torch.sparse_coo_tensor(A.indices(), gA, A.shape), torch.sparse.mm(A.t(), g), None


SPARSE = arrays(shape=(2, 3), min_value=0.5, max_value=2.0).map(lambda a: torch.from_numpy(a).to_sparse())


def test_a_sparse_tensor_to_differentiate_is_refused_with_the_fix():
    """A sparse float tensor drawn at a differentiated position was handed to the rule as a constant: a backward
    whose gradient for it was twice the right one passed, and only GG702's skip ("fewer than two differentiable
    inputs") hinted at it. Now the rule gets a SpecError naming the argument and both ways out."""
    from gradguard.checker import floats, torch_rule

    result = check(torch_rule(SparseTimesDense, SPARSE, arrays(shape=(3, 2)), floats(2.0, 2.0), nondiff=(2,),
                              name="sparse_a")).rules[0]
    assert result.verdict == "error" and result.error["type"] == "SpecError"
    assert result.error["message"] == (
        "the argument specs of sparse_a: argument 0 draws a sparse tensor (sparse_coo, torch.float64), and gradguard "
        "differentiates dense arrays only: taken as it is, its gradient would go unchecked. Draw it dense (arrays(...): "
        "a torch_rule or jax_rule gets it as a tensor or array) if the rule takes dense values, or hold it fixed with "
        "constant(...) or nondiff=(0,) to check the other arguments' gradients.")


def test_a_sparse_tensor_held_fixed_checks_the_other_gradients():
    """Declared nondiff, the sparse argument is held fixed and B's gradient is judged in isolation and in every
    context: the PyTorch column took no sparse argument before (it read every tensor's storage size, which a sparse
    tensor does not have), so every cell "raised" and the Function passed with no context judged."""
    from gradguard.checker import floats, torch_rule

    result = check(torch_rule(SparseTimesDense, SPARSE, arrays(shape=(3, 2)), floats(1.0, 1.0),
                              nondiff=(0, 2), name="sparse_fixed"), select=["GG201", "GG501"]).rules[0]
    assert result.verdict == "pass", (result.error, [(f.check_id, f.message) for f in result.findings])
    assert result.checks_run == ["GG201", "GG501"]
    assert {c["status"] for c in result.safety_matrix["cells"]} == {"right"}

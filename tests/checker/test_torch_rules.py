"""PyTorch rules: `torch_rule` turns a `torch.autograd.Function` (both styles) into a rule every isolation
check applies to. Test the tester: correct Functions pass, a backward off by a factor fails GG201, and what
crosses the boundary keeps its dtype."""

from __future__ import annotations

import numpy as np
import pytest

import gradguard
from gradguard.checker import SpecError, arrays, check, constant, floats, torch_rule

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install 'gradguard[torch]'")


class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


class MatMul(torch.autograd.Function):
    """The setup_context style: forward without ctx."""

    @staticmethod
    def forward(a, b):
        return a @ b

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.mT, a.mT @ grad


class ExpTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return 2 * grad * y  # off by a factor of 2


class Scale(torch.autograd.Function):
    """A non-tensor argument (an int), and a Python float that is differentiable."""

    @staticmethod
    def forward(ctx, x, s, k):
        ctx.save_for_backward(x, s)
        ctx.k = k
        return x * s * k

    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        return grad * s * ctx.k, (grad * x * ctx.k).sum(), None


class SinCos(torch.autograd.Function):
    """Two outputs: PyTorch hands backward a zero gradient for the one a program does not use."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, gs, gc):
        (x,) = ctx.saved_tensors
        return gs * x.cos() - gc * x.sin()


exp_rule = torch_rule(Exp, arrays(shape=(3,), max_value=3.0), primal=np.exp)
matmul_rule = torch_rule(MatMul, arrays(shape=(2, 3)), arrays(shape=(3, 4)))
exp_twice_rule = torch_rule(ExpTwice, arrays(shape=(3,), max_value=3.0))
scale_rule = torch_rule(Scale, arrays(shape=(3,)), floats(), constant(3))
sincos_rule = torch_rule(SinCos, arrays(shape=(4,)))


def _report(rule, **kwargs):
    report = check(rule, max_examples=kwargs.pop("max_examples", 20), **kwargs)
    assert report.rules[0].error is None, report.rules[0].error
    return report


@pytest.mark.parametrize("rule", [exp_rule, matmul_rule, scale_rule, sincos_rule], ids=lambda r: r.name)
def test_correct_functions_pass_every_check(rule):
    report = _report(rule)
    assert report.passed, [f"{f.check_id}: {f.message}" for f in report.findings]
    result = report.rules[0]
    assert result.kind == "torch"
    for check_id in ("GG102", "GG103", "GG104", "GG105", "GG201", "GG202", "GG301", "GG401", "GG403"):
        assert check_id in result.checks_run, (check_id, result.checks_skipped)


def test_backward_off_by_a_factor_fails_gg201():
    report = _report(exp_twice_rule, select=["GG201"])
    assert not report.passed
    [finding] = [f for f in report.findings if f.check_id == "GG201"]
    assert "ExpTwice" in finding.message and "finite differences" in finding.message


class DoubleAndSquare(torch.autograd.Function):
    """(2x, x**2) with the square marked non-differentiable (roma's Procrustes marks US and V so): the backward
    owes the derivative of the first output only."""

    @staticmethod
    def forward(ctx, x):
        square = x * x
        ctx.mark_non_differentiable(square)
        return 2 * x, square

    @staticmethod
    def backward(ctx, g, g_square):
        return 2 * g


class TripleAndSquare(DoubleAndSquare):
    @staticmethod
    def backward(ctx, g, g_square):
        return 3 * g  # wrong for the differentiable output


double_and_square_rule = torch_rule(DoubleAndSquare, arrays(shape=(3,), min_value=0.5, max_value=2.0))
triple_and_square_rule = torch_rule(TripleAndSquare, arrays(shape=(3,), min_value=0.5, max_value=2.0))


def test_outputs_marked_non_differentiable_carry_no_derivative():
    """No cotangent is drawn for an output the Function marks with ctx.mark_non_differentiable (it is recorded as
    None) and no context program weighs it: PyTorch passes no gradient through it."""
    report = check(double_and_square_rule, seed=0)
    assert report.passed, [f"{f.check_id}: {f.message}" for f in report.findings]
    assert {c["status"] for c in report.rules[0].safety_matrix["cells"]} <= {"right", "n/a"}
    broken = check(triple_and_square_rule, seed=0, select=["GG201", "GG5"])
    by_id = {f.check_id: f for f in broken.findings}
    assert {"GG201", "GG501"} <= set(by_id)
    assert by_id["GG201"].counterexample["draws"]["cotangent"].endswith(", None)")


def test_the_rule_keeps_dtypes_at_the_boundary():
    rule = torch_rule(Exp, arrays(shape=(3,), dtype="float32"))
    x = np.array([0.0, 1.0, -1.0], dtype=np.float32)
    y, pullback = rule(x.copy())
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)
    (g,) = pullback(np.ones(3, dtype=np.float32))
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.exp(x), rtol=1e-6)
    assert _report(rule).passed


def test_pullback_is_torch_autograd_with_a_materialized_zero_for_an_unused_output():
    x = np.linspace(-1.0, 1.0, 4)
    (ys, yc), pullback = sincos_rule(x)
    np.testing.assert_allclose(ys, np.sin(x))
    (g,) = pullback((np.ones(4), None))  # the cosine is unused: backward gets zeros for it
    np.testing.assert_allclose(g, np.cos(x))
    (g2,) = pullback((None, np.ones(4)))
    np.testing.assert_allclose(g2, -np.sin(x))


def test_python_float_and_constant_arguments():
    y, pullback = scale_rule(np.array([1.0, 2.0]), 0.5, 3)
    np.testing.assert_allclose(y, [1.5, 3.0])
    gx, gs, gk = pullback(np.ones(2))
    np.testing.assert_allclose(gx, [1.5, 1.5])
    assert isinstance(gs, float) and gs == pytest.approx(9.0)
    assert gk is None


def test_spec_names_forward_parameters_and_rejects_non_functions():
    with pytest.raises(SpecError, match="torch.autograd.Function"):
        torch_rule(lambda x: x, arrays(shape=(3,)))
    with pytest.raises(SpecError, match="Exp"):
        torch_rule(Exp, arrays(shape=(3,)), arrays(shape=(3,)))  # forward takes one argument


def test_exported_from_the_package():
    assert gradguard.torch_rule is torch_rule
    assert exp_rule.extra["torch_function"] is Exp
    assert exp_rule.source_lines is not None and exp_rule.source_file.endswith("test_torch_rules.py")


def _refusing_grad(factor):
    class ScaleUnderBackwardOnly(torch.autograd.Function):
        """fairscale's CheckpointFunction pattern: a backward that runs only under .backward()."""

        @staticmethod
        def forward(ctx, x):
            return 2 * x

        @staticmethod
        def backward(ctx, g):
            if not torch.autograd._is_checkpoint_valid():
                raise RuntimeError("Checkpointing is not compatible with .grad(), please use .backward() if possible")
            return factor * g

    return ScaleUnderBackwardOnly


def test_a_graph_that_refuses_autograd_grad_is_differentiated_by_backward():
    """Reentrant checkpointing (torch.utils.checkpoint with use_reentrant=True, fairscale's CheckpointFunction)
    refuses torch.autograd.grad: a correct Function drew GG103 ("the pullback raised RuntimeError: ...
    incompatible with .grad()") from every check that pulled back. The engine falls back to .backward()."""
    from torch.utils.checkpoint import CheckpointFunction

    def block(x):
        return torch.tanh(x) * x

    checkpointed = check(torch_rule(CheckpointFunction, constant(block), constant(True), arrays(shape=(4,)),
                                    name="checkpointed_block")).rules[0]
    assert {"GG201", "GG501", "GG705"} <= set(checkpointed.checks_run)
    # Reentrant checkpointing has no double backward: under create_graph=True the gradient it returns carries no
    # graph (a gradient penalty through it raises "element 0 of tensors does not require grad", or silently
    # misses its terms beside others), which GG705 reports; every other check passes.
    assert [f.check_id for f in checkpointed.findings] == ["GG705"], [f.message for f in checkpointed.findings]
    assert "carry no graph" in checkpointed.findings[0].message
    fine = check(torch_rule(_refusing_grad(2.0), arrays(shape=(3,)), name="double_under_backward")).rules[0]
    assert fine.verdict == "pass", [f.message for f in fine.findings]
    broken = check(torch_rule(_refusing_grad(3.0), arrays(shape=(3,)), name="triple_under_backward"),
                   select=["GG1", "GG201"]).findings
    assert [f.check_id for f in broken] == ["GG201"]


class Dropout(torch.autograd.Function):
    """A dropout mask drawn from PyTorch's global generator and saved for backward, as torch.nn.Dropout draws it."""

    @staticmethod
    def forward(ctx, x, p):
        mask = (torch.rand_like(x) > p).to(x.dtype) / (1 - p)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask, None


class DropoutDrawsAgainInBackward(torch.autograd.Function):
    """The broken twin: backward draws a new mask instead of saving the forward's."""

    @staticmethod
    def forward(ctx, x, p):
        ctx.p = p
        return x * (torch.rand_like(x) > p).to(x.dtype) / (1 - p)

    @staticmethod
    def backward(ctx, g):
        return g * (torch.rand_like(g) > ctx.p).to(g.dtype) / (1 - ctx.p), None


def test_a_mask_from_the_global_generator_saved_for_backward_passes_and_one_drawn_again_fails():
    """Every forward starts from one fixed state of PyTorch's global generators (as a program re-run under
    torch.manual_seed): a correct dropout Function drew GG102, GG202, GG406, GG503 and GG703 at every seed, the
    checks comparing calls that drew different masks. A backward that draws its own mask still fails, and the
    caller's generator state is left as it was."""
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    saved = check(torch_rule(Dropout, arrays(shape=(6,)), constant(0.5), name="dropout")).rules[0]
    assert torch.equal(torch.rand(3), expected)  # nothing the checks ran moved the caller's global state
    assert saved.verdict == "pass", [(f.check_id, f.message) for f in saved.findings]
    assert {"GG102", "GG202", "GG406", "GG501", "GG703"} <= set(saved.checks_run)
    redrawn = check(torch_rule(DropoutDrawsAgainInBackward, arrays(shape=(6,)), constant(0.5), name="redrawn"),
                    select=["GG201", "GG406"]).rules[0]
    messages = {f.check_id: f.message for f in redrawn.findings}
    assert set(messages) == {"GG201", "GG406"}
    assert messages["GG406"].startswith("the pullbacks of two forward calls of redrawn on identical copies of the same "
                                        "input gave different tangents for the same cotangent")


def _stochastic_round(generator):
    """brevitas' StochasticRoundSteFn (core/function_wrapper/stochastic_round.py): a straight-through estimator
    drawing from the generator its factory closes over (seeded by the module, `StochasticRoundSte(seed=0)`)."""

    class StochasticRoundSteFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            floor_x = torch.floor(x)
            prob = torch.bernoulli(torch.abs(x - floor_x), generator=generator)
            return torch.where(prob.to(torch.bool), floor_x + 1.0, floor_x)

        @staticmethod
        def backward(ctx, g):
            return g

    return StochasticRoundSteFn


class RoundsWithAFreshGenerator(torch.autograd.Function):
    """The broken twin: a generator made, unseeded, in every forward."""

    @staticmethod
    def forward(ctx, x):
        floor_x = torch.floor(x)
        prob = torch.bernoulli(torch.abs(x - floor_x), generator=torch.Generator().manual_seed(torch.seed()))
        return torch.where(prob.to(torch.bool), floor_x + 1.0, floor_x)

    @staticmethod
    def backward(ctx, g):
        return g


def test_a_generator_the_function_holds_starts_every_forward_from_one_state():
    """brevitas' stochastic rounding drew GG406 with a seeded generator of its own, and passed with the global one.
    Its state is held for each forward as the global generator's is, and given back afterwards."""
    generator = torch.Generator().manual_seed(0)
    before = generator.get_state()
    spec = arrays(shape=(4,), dtype="float32", min_value=-8.0, max_value=8.0)
    own = check(torch_rule(_stochastic_round(generator), spec, ignore=["GG201", "GG203", "GG501"],
                           name="stochastic_round"), select=["GG406"]).rules[0]
    assert own.error is None and own.findings == [] and "GG406" in own.checks_run, own.findings
    assert torch.equal(generator.get_state(), before)  # the program's generator is where it was
    (f,) = check(torch_rule(RoundsWithAFreshGenerator, spec, name="fresh_generator"), select=["GG406"]).findings
    assert f.message.startswith("two forward calls of fresh_generator on identical copies of the same input gave "
                                "different outputs: "), f.message


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64))

    def forward(self, x):
        return x * self.w


def _recompute(x_factor):
    class Recompute(torch.autograd.Function):
        """PyG's InvertibleFunction, memcnn's and RevTorch's pattern: a module's function and that module's own
        parameters, passed so that autograd.grad in backward reaches them."""

        @staticmethod
        def forward(ctx, fn, x, *weights):
            ctx.fn, ctx.weights = fn, weights
            ctx.save_for_backward(x)
            with torch.no_grad():
                return fn(x)

        @staticmethod
        def backward(ctx, gy):
            (x,) = ctx.saved_tensors
            with torch.enable_grad():
                xd = x.detach().requires_grad_()
                out = ctx.fn(xd)
            gx, *gw = torch.autograd.grad(out, (xd,) + ctx.weights, gy)
            return (None, x_factor * gx, *gw)

    return Recompute


def test_a_module_s_parameters_beside_its_function_stay_that_module_s():
    """A clone of the parameter (every case's fresh copy), or a deepcopy of each argument apart (a search starting
    from an earlier check's input), is not the tensor the module's function uses: its backward raised "appears to
    not have been used in the graph" (GG103) where plain PyTorch runs it."""
    module = _Scaled()
    ok = check(torch_rule(_recompute(1.0), constant(module.forward), arrays(shape=(3,)), constant(module.w),
                          name="recompute"), select=["GG1", "GG201", "GG403"]).rules[0]
    assert ok.error is None and ok.findings == [], [f.message for f in ok.findings]
    wrong = check(torch_rule(_recompute(2.0), constant(module.forward), arrays(shape=(3,)), constant(module.w),
                             name="recompute_doubled"), select=["GG1", "GG201", "GG403"]).rules[0]
    assert wrong.error is None and [f.check_id for f in wrong.findings] == ["GG201"], \
        [f.message for f in wrong.findings]


def test_a_kept_input_is_copied_whole_so_shared_objects_stay_shared():
    """A search that starts from an earlier check's input copies it: each argument apart, the copy of the module's
    bound method held its own copy of the parameter passed beside it. An argument deepcopy refuses still passes."""
    import types

    from gradguard.checker._search import _kept_input

    module = _Scaled()
    fn, x, w = _kept_input((module.forward, np.ones(3), module.w))
    assert fn.__self__.w is w and w is not module.w
    held = types.ModuleType("held")  # deepcopy refuses a module: the others are copied one by one
    kept = _kept_input((held, np.ones(2)))
    assert kept[0] is held and kept[1] is not None


def _cube_with_numpy_output(factor):
    class CubeWithNumpyOutput(torch.autograd.Function):
        """NumpyCubeNotComposable's pattern (PyTorch's autograd_function_db): a NumPy array beside the tensor."""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3, x.detach().numpy().copy()

        @staticmethod
        def backward(ctx, grad_output, grad_np):
            (x,) = ctx.saved_tensors
            return grad_output * factor * x**2

    return CubeWithNumpyOutput


def test_an_output_that_is_not_a_tensor_carries_no_derivative():
    """Autograd does not see a NumPy array a forward returns beside its tensors, and backward gets None for it:
    a correct Function drew GG201 and GG501, gradguard asking for the copy's derivative too."""
    spec = arrays(shape=(4,), min_value=0.8, max_value=2.0)
    right = check(torch_rule(_cube_with_numpy_output(3.0), spec, name="cube_np_out")).rules[0]
    assert right.verdict == "pass", [(f.check_id, f.message) for f in right.findings]
    wrong = check(torch_rule(_cube_with_numpy_output(2.0), spec, name="cube_np_out_slip"), select=["GG201"]).findings
    assert [f.check_id for f in wrong] == ["GG201"]
    assert wrong[0].message.startswith("the pullback of cube_np_out_slip disagrees with finite differences of the "
                                       "primal: cotangent for argument 0 (x) at ")


class RoundToBfloat16(torch.autograd.Function):
    """torchao's _RoundToFloat8 pattern: a low-precision cast with a straight-through backward."""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16)

    @staticmethod
    def backward(ctx, g):
        return g.to(torch.float64)


def test_an_output_numpy_cannot_hold_is_an_error_naming_its_dtype_not_a_crash():
    """A bfloat16 or float8 output crashed the checker (an internal error in GG701: "Got unsupported ScalarType")."""
    result = check(torch_rule(RoundToBfloat16, arrays(shape=(3,)), name="round_to_bf16")).rules[0]
    assert result.verdict == "error" and result.error["type"] == "UnsupportedOutput", result.error
    assert result.error["message"].startswith(
        "round_to_bf16 computes a torch.bfloat16 tensor, a dtype NumPy has no counterpart for; ")


def _reversible(restore: float) -> type:
    """A reversible block's pattern (pyg's InvertibleFunction, memcnn): y = 2 x, and the input's memory freed in
    forward and rebuilt in backward from the output (``restore * y``; 0.5 rebuilds it exactly)."""

    class Reversible(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = 2 * x
            x.untyped_storage().resize_(0)
            ctx.x, ctx.y = x, y.detach()
            return y

        @staticmethod
        def backward(ctx, grad):
            x = ctx.x
            with torch.no_grad():
                x.untyped_storage().resize_(x.numel() * x.element_size())
                x.copy_(ctx.y * restore)
            return 2 * grad

    return Reversible


def test_a_function_that_frees_its_input_in_forward_and_rebuilds_it_in_backward():
    """Such a Function drew a false GG103 ("Trying to resize storage that is not resizable": gradguard read its
    tensors with ``.numpy()``, which pins a storage's size for good), and once past that crashed the checker's
    process: GG703 wrote into the freed input, and context programs read it or handed a freed view back to the
    rule. The storage stays the Function's, what it freed is never read, and a program that reads it after the
    call is a loud cell ("raised"), as in PyTorch, where it would crash."""
    right = check(torch_rule(_reversible(0.5), arrays(shape=(3,)), name="reversible"), seed=1).rules[0]
    assert right.verdict == "pass", [(f.check_id, f.message) for f in right.findings]
    cells = {c["context"]: c["status"] for c in right.safety_matrix["cells"] if c["engine"] == "torch"}
    assert cells["output-used"] == "right" and cells["read-after"] == "raised", cells
    wrong = check(torch_rule(_reversible(1.0), arrays(shape=(3,), min_value=0.5, max_value=2.0), name="rebuilt_wrong"),
                  select=["GG402"]).findings
    assert [f.check_id for f in wrong] == ["GG402"]
    assert wrong[0].message.startswith("the pullback of rebuilt_wrong wrote into argument 0 (x): x at ")


def test_readable_tells_a_freed_tensor():
    from gradguard.engines.torch_engine import readable

    x = torch.arange(6.0)
    view = x[1:]
    assert readable(x) and readable(x[::2]) and readable(x.reshape(2, 3).T) and readable(view)
    x.untyped_storage().resize_(0)
    assert not readable(x) and not readable(view)


def _square_with_extras(factor: float, extra: str):
    """x * x, with what PyTorch never differentiates beside it: a list of tensors (theseus' forward kinematics returns
    its poses so), or a class object and a flag (torchopt's implicit gradient returns ``type(output)``)."""

    class SquareWithExtras(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            if extra == "list":
                return x * x, [x * 3.0, x + 1.0]
            return x * x, True, tuple

        @staticmethod
        def backward(ctx, grad, *rest):
            (x,) = ctx.saved_tensors
            return factor * x * grad

    return torch_rule(SquareWithExtras, arrays(shape=(3,), min_value=-2.0, max_value=2.0), name=f"square_{extra}_{factor:g}")


@pytest.mark.parametrize("extra", ["list", "class"])
def test_outputs_pytorch_never_differentiates_carry_no_derivative(extra):
    """The list drew cotangents and finite differences of its own (a false GG201: 28.93 against 1.29); the class object
    made every check an error ("the output holds type <class 'tuple'>")."""
    right = check(_square_with_extras(2.0, extra), seed=0)
    assert right.rules[0].error is None and right.rules[0].verdict == "pass", (right.rules[0].error, [
        f.message for f in right.findings])
    wrong = check(_square_with_extras(3.0, extra), select=["GG201"], seed=0)
    assert [f.check_id for f in wrong.findings] == ["GG201"]


class SampledLogSumExp(torch.autograd.Function):
    """pytorch-struct's `_SampledLogSumExp` (torch_struct/semirings/sample.py, harvardnlp/pytorch-struct), its
    backward as the source has it: a one-hot sample of softmax(input), drawn from the global generator on every
    backward call, in place of the gradient."""

    @staticmethod
    def forward(ctx, input, dim):
        ctx.save_for_backward(input, torch.tensor(dim))
        return torch.logsumexp(input, dim=dim)

    @staticmethod
    def backward(ctx, grad_output):
        logits, dim = ctx.saved_tensors
        grad_input = None
        if ctx.needs_input_grad[0]:
            def sample(ls):
                pre_shape = ls.shape
                draws = torch.multinomial(ls.softmax(-1).view(-1, pre_shape[-1]), 1, True)
                return torch.nn.functional.one_hot(draws, pre_shape[-1]).view(*pre_shape).type_as(ls)

            s = sample(logits)
            grad_input = grad_output.unsqueeze(int(dim)).mul(s)
        return grad_input, None


def test_a_backward_that_samples_is_blamed_on_its_randomness_not_on_what_each_comparison_probes():
    """The sampled logsumexp drew GG202, GG404, GG703 ("reads the output as changed in place") and GG705 ("double
    backward wrong"), each reading a second call's new sample as its own fault. They give no verdict on it now;
    GG403 and GG406 say what is wrong, and GG201 that the backward is not the derivative."""
    rule = torch_rule(SampledLogSumExp, arrays(shape=(3, 4), min_value=-3, max_value=3), constant(-1), name="sampled")
    result = _report(rule, ignore=["GG5"]).rules[0]
    ids = {f.check_id for f in result.findings}
    assert ids == {"GG201", "GG403", "GG406"}, [(f.check_id, f.message) for f in result.findings]
    skipped = {s["id"]: s["reason"] for s in result.checks_skipped}
    for check_id in ("GG202", "GG404", "GG703", "GG705"):
        assert skipped.get(check_id, "").startswith("it compares separate calls of the rule, whose pullback does not "
                                                    "reproduce its own result ("), (check_id, skipped)


class LogSumExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.logsumexp(x, dim=-1)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g.unsqueeze(-1) * (x - y.unsqueeze(-1)).exp()


def test_gg203_says_why_it_cannot_judge_a_function_written_in_torch():
    """JAX's tracers met torch.logsumexp in a Function's forward: the skip said "primal is not traceable by JAX:
    TypeError: logsumexp(): argument 'input' (position 1) must be Tensor, not LinearizeTracer", as if the rule
    were at fault."""
    result = _report(torch_rule(LogSumExp, arrays(shape=(2, 3))), ignore=["GG5"]).rules[0]
    assert result.findings == [], [(f.check_id, f.message) for f in result.findings]
    (reason,) = [s["reason"] for s in result.checks_skipped if s["id"] == "GG203"]
    assert reason.startswith("the primal calls PyTorch operations, which JAX cannot trace ("), reason
    assert reason.endswith("); GG201's finite differences judge the backward"), reason


# quantized.pytorch's BiReLU (eladhoffer/quantized.pytorch e09c447, models/modules/rnlu.py: a ReLU on the first half of
# the channels and its mirror on the second, in place with ctx.mark_dirty where asked). At seed 0 the called-twice
# program's inputs hold six elements within 1e-27 of the kinks; the out-of-place Function got no verdict there ("the
# rule's primal has kinks at 2 of its 2 calls"), the in-place one with the same draws, gradient and finite differences
# "wrong (relative error 3.7e-01)": the per-call kink evidence was not asked of a rule that declares mutates=. Its
# probes now run the primal on copies of each call's recorded arguments.
def _birelu(masked: bool):
    from torch.autograd.function import InplaceFunction

    class BiReLUFunction(InplaceFunction):
        @classmethod
        def forward(cls, ctx, input, inplace=False):
            ctx.inplace = inplace
            if ctx.inplace:
                ctx.mark_dirty(input)
                output = input
            else:
                output = input.clone()
            pos, neg = output.chunk(2, dim=1)
            pos.clamp_(min=0)
            neg.clamp_(max=0)
            ctx.save_for_backward(output)
            return output

        @staticmethod
        def backward(ctx, grad_output):
            output, = ctx.saved_tensors
            # BUG where masked is False: the clamped elements get the cotangent too
            return (grad_output.masked_fill(output.eq(0), 0) if masked else grad_output.clone()), None

    return BiReLUFunction


def test_an_in_place_function_at_kinks_in_two_calls_gets_the_same_verdict_as_out_of_place():
    from gradguard.checker.contexts import run_matrix

    spec = arrays(shape=(3, 4), min_value=-3, max_value=3)
    cells = {}
    for name, inplace, mutates in (("birelu", False, ()), ("birelu_inplace", True, (0,))):
        rule = torch_rule(_birelu(True), spec, constant(inplace), mutates=mutates, name=name)
        (row,) = run_matrix(rule, seed=0, contexts=["called-twice"], engines=["torch"]).rows
        cells[name] = row.cells["torch"]
    assert cells["birelu"].status == cells["birelu_inplace"].status == "skipped", cells
    assert cells["birelu_inplace"].message.startswith("no verdict: the rule's primal has kinks at 2 of its 2 calls")


def test_an_in_place_function_that_passes_the_cotangent_through_its_clamp_is_still_wrong_in_context():
    from gradguard.checker.contexts import run_matrix

    spec = arrays(shape=(3, 4), min_value=0.5, max_value=3)  # away from the kinks: the second half clamped to 0
    for masked, status in ((False, "wrong"), (True, "right")):
        rule = torch_rule(_birelu(masked), spec, constant(True), mutates=(0,), name=f"birelu_inplace_{masked}")
        (row,) = run_matrix(rule, seed=0, contexts=["called-twice"], engines=["torch"]).rows
        assert row.cells["torch"].status == status, row.cells["torch"].message


# A backward that reuses a preallocated buffer passed as a constant (smooth top-k's LogSumExp keeps two): it resizes
# the buffer and fills it. The constant tensor is copied for every call as NumPy constants are: before, one tensor
# reached every check, GG705's create_graph backward left a graph-carrying value in it, and GG103 then called the
# pullback raising ("cannot resize variables that require grad") at an input where, run alone, it passes. What stands
# is what the rule does to its argument: its pullback writes into the caller's buffer (GG402).
class SquareIntoBuffer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, buf):
        ctx.save_for_backward(x)
        ctx.buf = buf
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        b = ctx.buf.resize_as_(x)
        b.copy_(2 * x)
        return g * b, None


class SquareOwnBuffer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, buf):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (2 * x), None


def test_a_tensor_constant_is_copied_for_every_call_so_one_check_leaves_nothing_in_it_for_another():
    rule = torch_rule(SquareIntoBuffer, arrays(shape=(3,)), constant(torch.zeros(0, dtype=torch.float64)))
    report = check(rule, select=["GG1", "GG4", "GG705"], max_examples=5)
    ids = sorted({f.check_id for f in report.findings})
    assert ids == ["GG402"], [(f.check_id, f.message) for f in report.findings]
    (gg402,) = [f for f in report.findings if f.check_id == "GG402"]
    assert gg402.message == (
        f"the pullback of {rule.name} wrote into argument 1 (buf): buf (shape) changed from (0,) to (3,). A pullback "
        "must only read the arguments: the caller still owns buf, and other pullbacks may have captured it.")


def test_the_twin_that_leaves_its_buffer_alone_passes():
    rule = torch_rule(SquareOwnBuffer, arrays(shape=(3,)), constant(torch.zeros(0, dtype=torch.float64)))
    report = check(rule, select=["GG1", "GG4", "GG705"], max_examples=5)
    assert report.passed, [(f.check_id, f.message) for f in report.findings]


# A real tensor times a complex one (butterfly's ComplexMul with one real operand): the backward returns the complex
# product grad * conj(Y) for the real X, which PyTorch refuses ("input_is_complex == grad_is_complex"). That was a
# GG103 "pullback raised"; GG701 names what PyTorch refuses, and the twin returning the real part passes.
class RealTimesComplex(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y.conj(), g * x


class RealTimesComplexRealPart(RealTimesComplex):
    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return (g * y.conj()).real, g * x


def test_a_complex_gradient_for_a_real_input_is_gg701_not_gg103():
    rule = torch_rule(RealTimesComplex, arrays(shape=(3,)), arrays(shape=(3,), dtype="complex128"))
    report = check(rule, select=["GG1", "GG2", "GG7"], max_examples=5)
    assert {f.check_id for f in report.findings} == {"GG701"}, [(f.check_id, f.message) for f in report.findings]
    (f,) = report.findings
    assert f.message == (
        f"the backward of {rule.name} returned a complex gradient (complex128 array of shape (3,)) for input 0 of "
        "forward, which is real (float64); PyTorch raises on it. The gradient of a real input is real.")
    assert "grad.real" in f.fix


def test_the_real_part_for_a_real_input_passes():
    rule = torch_rule(RealTimesComplexRealPart, arrays(shape=(3,)), arrays(shape=(3,), dtype="complex128"))
    report = check(rule, select=["GG1", "GG2", "GG7"], max_examples=5)
    assert report.passed, [(f.check_id, f.message) for f in report.findings]


def _channels_last(a):
    return torch.as_tensor(a).contiguous(memory_format=torch.channels_last)


class _DoubleInto(torch.autograd.Function):
    """Doubles; its backward writes the gradient's memory in NCHW order into a tensor made like x."""

    fmt = torch.preserve_format  # x's own layout: channels_last where x is (the broken twin)

    @classmethod
    def forward(cls, ctx, x):
        ctx.save_for_backward(x)
        return 2 * x

    @classmethod
    def backward(cls, ctx, dy):
        (x,) = ctx.saved_tensors
        gx = torch.empty_like(x, memory_format=cls.fmt)
        torch.as_strided(gx, (gx.numel(),), (1,)).copy_(2 * dy.contiguous().view(-1))  # memory read as NCHW
        return gx


class _DoubleIntoContiguous(_DoubleInto):
    fmt = torch.contiguous_format


# stylegan2-ada-pytorch's convolutions run on channels_last tensors, which a spec may draw; the checks handed the
# rule NumPy copies rebuilt in C order, so such a rule met the layout its spec declares in a dozen of a thousand
# calls, and a backward that assumed NCHW memory passed every isolation check.
def test_a_spec_drawing_channels_last_tensors_hands_the_rule_that_layout():
    spec = arrays(shape=(2, 3, 4, 5)).map(_channels_last)
    broken = check(torch_rule(_DoubleInto, spec, name="double_into"), seed=0, select=["GG201"]).findings
    assert [f.check_id for f in broken] == ["GG201"]
    assert broken[0].message.startswith("the pullback of double_into disagrees with finite differences of the primal")
    fixed = check(torch_rule(_DoubleIntoContiguous, spec, name="double_into_contiguous"), seed=0, select=["GG201"])
    assert fixed.findings == [] and fixed.rules[0].checks_run == ["GG201"]

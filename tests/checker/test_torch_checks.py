"""Test the tester: the PyTorch-specific checks (GG701-GG707). Each broken Function fails its check with the
exact message; its correct twin passes."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

from gradguard.checker import arrays, check, constant, torch_rule

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install 'gradguard[torch]'")

NUM = r"(-?[0-9.e+-]+|nan|inf)"


def findings(rule, check_id, max_examples=20):
    report = check(rule, select=[check_id], max_examples=max_examples)
    assert report.rules[0].error is None, report.rules[0].error
    return report, [f for f in report.findings if f.check_id == check_id]


def skips(report, check_id):
    return [s["reason"] for r in report.rules for s in r.checks_skipped if s["id"] == check_id]


# -- GG701 -------------------------------------------------------------------------------------------
class ScaleOneGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k


class ScaleGradForK(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k, grad.sum()  # k is a Python float, not a tensor


class ScaleRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k, None


def test_gg701_wrong_number_of_gradients() -> None:
    rule = torch_rule(ScaleOneGrad, arrays(shape=(3,)), constant(2.0))
    _, (f,) = findings(rule, "GG701")
    assert f.message == ("the backward of ScaleOneGrad must return one gradient per input of forward (2), but "
                         "returned 1. Return a tuple with one entry per forward input; use None for inputs that are "
                         "not tensors or need no gradient.")
    report = check(rule, select=["GG201"], max_examples=5)  # PyTorch refuses it: the other checks skip
    assert report.findings == [] and skips(report, "GG201")[0].startswith(
        "PyTorch refuses what the backward of ScaleOneGrad returns (see GG701): function ScaleOneGradBackward "
        "returned an incorrect number of gradients")


def test_gg701_gradient_for_a_non_tensor_input() -> None:
    _, (f,) = findings(torch_rule(ScaleGradForK, arrays(shape=(3,)), constant(2.0)), "GG701")
    assert f.message == ("the backward of ScaleGradForK returned a gradient (float64 array of shape ()) for input 1 "
                         "of forward, which is not a tensor (float 2.0); PyTorch raises on it. Return None at that "
                         "position.")
    assert f.location == "argument 1"


class ScaleListGrads(ScaleRight):
    # torch-interpol's SplineCoeff (balbasty/torch-interpol bab3b86, interpol/autograd.py): `return [grad] + [None] * 4`
    @staticmethod
    def backward(ctx, grad):
        return [grad * ctx.k, None]


class DoubleRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, grad):
        return grad * 2.0


class DoubleListGrad(DoubleRight):
    @staticmethod
    def backward(ctx, grad):
        return [grad * 2.0]


class DoubleNumpyGrad(DoubleRight):
    @staticmethod
    def backward(ctx, grad):
        return grad.numpy() * 2.0


@pytest.mark.parametrize("function, args, listed", [
    (ScaleListGrads, (arrays(shape=(3,)), constant(2.0)), 2),
    (DoubleListGrad, (arrays(shape=(3,)),), 1),
])
def test_gg701_a_list_of_gradients(function, args, listed) -> None:
    """PyTorch unpacks only a tuple: a list of gradients (however many) is one gradient to it, and every backward
    through the Function raises. GG701 counted the list's entries and passed the rule, while every other check
    skipped it as refused: the verdict was pass."""
    rule = torch_rule(function, *args)
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError):  # what PyTorch itself does with it
        function.apply(x, *([2.0] if len(args) == 2 else [])).sum().backward()
    _, (f,) = findings(rule, "GG701")
    assert f.message == (f"the backward of {function.__name__} returned a list of {listed}; PyTorch unpacks only a "
                         "tuple into one gradient per input of forward and takes a list as a single gradient, so it "
                         "raises. Return a tuple.")
    assert (f.expected, f.actual) == (f"a tuple of {len(args)} gradients", f"a list of {listed}")
    report = check(rule, select=["GG201"], max_examples=5)  # the others skip it as refused, not as an error of theirs
    assert report.findings == [] and skips(report, "GG201")[0].startswith(
        f"PyTorch refuses what the backward of {function.__name__} returns (see GG701)")


def test_gg701_a_gradient_that_is_not_a_tensor() -> None:
    rule = torch_rule(DoubleNumpyGrad, arrays(shape=(3,)))
    _, (f,) = findings(rule, "GG701")
    assert f.message == ("the backward of DoubleNumpyGrad returned a value of type ndarray as the gradient for "
                         "input 0 of forward; PyTorch accepts only a tensor or None there, and raises. Return a tensor "
                         "(torch.as_tensor) or None.")
    assert f.location == "argument 0"


def test_gg701_one_gradient_returned_alone_passes() -> None:
    report = check(torch_rule(DoubleRight, arrays(shape=(3,))), max_examples=10, ignore=["GG5"])
    assert report.passed, [f"{f.check_id}: {f.message}" for f in report.findings]


def test_gg701_correct_twin_passes() -> None:
    report = check(torch_rule(ScaleRight, arrays(shape=(3,)), constant(2.0)), max_examples=10, ignore=["GG5"])
    assert report.passed, [f"{f.check_id}: {f.message}" for f in report.findings]


# -- GG702 -------------------------------------------------------------------------------------------
class MulWrongFlag(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        ga = grad * b if ctx.needs_input_grad[0] else None
        gb = grad * a if ctx.needs_input_grad[0] else None
        return ga, gb


class MulSavesLess(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(b if ctx.needs_input_grad[0] else None, a)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        b, a = ctx.saved_tensors
        return grad * b, grad * a  # ignores needs_input_grad: b is None when only b needs a gradient


class MulRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (grad * b if ctx.needs_input_grad[0] else None), (grad * a if ctx.needs_input_grad[1] else None)


MUL_SPECS = (arrays(shape=(3,), min_value=0.5, max_value=2.0), arrays(shape=(3,), min_value=0.5, max_value=2.0))


def test_gg702_reads_the_wrong_flag() -> None:
    _, (f,) = findings(torch_rule(MulWrongFlag, *MUL_SPECS), "GG702")
    assert re.fullmatch(
        rf"with only input 1 requiring grad \(ctx\.needs_input_grad = \(False, True\)\), the backward of MulWrongFlag "
        rf"gives input 1 the gradient 0\.0 at \[\d\], but {NUM} when every input requires grad\.", f.message), f.message


def test_gg702_raises_when_a_flag_is_false() -> None:
    _, (f,) = findings(torch_rule(MulSavesLess, *MUL_SPECS), "GG702")
    assert f.message.startswith("the backward of MulSavesLess raises when only input 1 requires grad "
                                "(ctx.needs_input_grad = (False, True)), though it runs when every input does: "
                                "TypeError:"), f.message


def test_gg702_correct_twin_passes() -> None:
    report, found = findings(torch_rule(MulRight, *MUL_SPECS), "GG702")
    assert found == [] and skips(report, "GG702") == []


# -- GG703 -------------------------------------------------------------------------------------------
class SquareAttr(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return x * x

    @staticmethod
    def backward(ctx, grad):
        return 2 * ctx.x * grad


class ExpAttrOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.y = y
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.y


class SquareSaved(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def test_gg703_input_kept_as_an_attribute() -> None:
    _, (f,) = findings(torch_rule(SquareAttr, arrays(shape=(3,))), "GG703")
    assert re.fullmatch(
        rf"the backward of SquareAttr reads input 0 as changed in place after forward: changing it between forward "
        rf"and backward \(x\.mul_\(1\.5\)\.add_\(0\.25\)\) changed the gradient of input 0 at \[\d\] from {NUM} to "
        rf"{NUM}, and PyTorch raised nothing\.", f.message), f.message


def test_gg703_output_kept_as_an_attribute() -> None:
    _, (f,) = findings(torch_rule(ExpAttrOutput, arrays(shape=(3,), max_value=3.0)), "GG703")
    assert f.message.startswith("the backward of ExpAttrOutput reads the output as changed in place after forward"), f.message


def test_gg703_saved_tensors_are_loud_not_wrong() -> None:
    report, found = findings(torch_rule(SquareSaved, arrays(shape=(3,))), "GG703")
    assert found == [] and skips(report, "GG703") == []


# -- GG704 -------------------------------------------------------------------------------------------
class DoubleUnmarked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        return x

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


class DoubleMarked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


def test_gg704_in_place_forward_without_mark_dirty() -> None:
    _, (f,) = findings(torch_rule(DoubleUnmarked, arrays(shape=(3,)), mutates=0), "GG704")
    assert f.message == ("the forward of DoubleUnmarked writes into input 0 in place (its version counter went from "
                         "0 to 1) without ctx.mark_dirty on it.")


def test_gg704_marked_dirty_passes() -> None:
    report, found = findings(torch_rule(DoubleMarked, arrays(shape=(3,)), mutates=0), "GG704")
    assert found == [] and skips(report, "GG704") == []


# -- GG706 -------------------------------------------------------------------------------------------
class SquareSettingGrad(torch.autograd.Function):
    """memcnn's InvertibleCheckpointFunction "mimics backwards": it sets each input's .grad and returns the same
    gradient, so a leaf input's .grad after .backward() is twice the gradient (measured on memcnn itself: 2.0x)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        gx = 2 * x * grad
        x.grad = gx
        return gx


class SquareSettingGradOnly(torch.autograd.Function):
    """Writes .grad and returns no gradient: a leaf's .grad is right, so nothing is counted twice (that the
    returned gradient is missing for a tensor that is not a leaf is GG201's to find)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        x.grad = 2 * x * grad
        return None


def test_gg706_a_backward_that_writes_its_inputs_grad_counts_a_leafs_gradient_twice() -> None:
    _, (f,) = findings(torch_rule(SquareSettingGrad, arrays(shape=(3,), min_value=0.5, max_value=2.0)), "GG706")
    m = re.fullmatch(
        rf"the backward of SquareSettingGrad writes a gradient into input 0's \.grad itself and returns one for it as "
        rf"well: where that input is a leaf tensor \(a parameter, an input created with requires_grad=True\) and the "
        rf"program calls \.backward\(\), autograd adds the returned gradient to the one backward wrote, and its "
        rf"\.grad at \[(\d)\] is {NUM} where the gradient backward returns is {NUM}\.",
        f.message,
    )
    assert m and float(m[2]) == pytest.approx(2 * float(m[3])), f.message
    assert f.severity == "error" and f.location == f"argument 0 at [{m[1]}]"
    assert "leave .grad alone" in f.fix
    # a Python number the engine hands the Function as a tensor is a leaf in such a program too
    _, (f,) = findings(torch_rule(SquareSettingGrad, st.floats(0.5, 2.0), name="square_of_a_number"), "GG706")
    assert f.severity == "error" and f.message.startswith("the backward of square_of_a_number writes a gradient"), f.message


def test_gg706_passes_a_backward_that_only_returns_its_gradients_or_only_writes_grad() -> None:
    report, found = findings(torch_rule(SquareSaved, arrays(shape=(3,))), "GG706")
    assert found == [] and skips(report, "GG706") == []
    _, found = findings(torch_rule(SquareSettingGradOnly, arrays(shape=(3,))), "GG706")
    assert found == []


# -- GG705 -------------------------------------------------------------------------------------------
class SinDetached(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.detach().cos()


class XSinPartlyDetached(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.sin() + x * x.detach().cos())  # one factor of the product rule detached


class SinOnce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


class SinRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


def test_gg705_partly_detached_backward() -> None:
    _, (f,) = findings(torch_rule(XSinPartlyDetached, arrays(shape=(3,))), "GG705")
    assert re.fullmatch(
        rf"double backward through XSinPartlyDetached is wrong: along a random direction u, d/dt <w, grad at "
        rf"\(x \+ t u\)\(ybar\)> = {NUM} by finite differences of the gradient, but PyTorch's derivative of the "
        rf"backward \(create_graph=True\) gives {NUM}\.", f.message), f.message


class _SwishSavingItsSigmoid(torch.autograd.Function):
    """residual-flows' SwishFn: forward saves sigmoid(x), computed without a graph, which double backward then holds
    constant."""

    @staticmethod
    def forward(ctx, x):
        s = torch.sigmoid(x)
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        return grad * (s + x * s * (1 - s))


def test_gg705_fix_names_a_tensor_forward_computed_and_saved() -> None:
    _, (f,) = findings(torch_rule(_SwishSavingItsSigmoid, arrays(shape=(3,))), "GG705")
    assert f.message.startswith("double backward through _SwishSavingItsSigmoid is wrong: "), f.message
    assert ("recompute in backward what forward computed and saved besides the inputs and outputs (forward runs "
            "without a graph, so such a tensor is a constant to double backward") in f.fix, f.fix


def test_gg705_fix_of_a_surrogate_first_order_does_not_send_to_gg201() -> None:
    """bitsandbytes' int8 matmul, declared a straight-through estimator (GG201 left out): GG705's fix began "If the
    first order is wrong too (GG201), fix it first", a check the declaration had left out."""
    _, (plain,) = findings(torch_rule(_SwishSavingItsSigmoid, arrays(shape=(3,))), "GG705")
    assert plain.fix.startswith("If the first order is wrong too (GG201), fix it first"), plain.fix
    surrogate = torch_rule(_SwishSavingItsSigmoid, arrays(shape=(3,)), ignore=["GG201", "GG203", "GG501"],
                           name="surrogate")
    _, (f,) = findings(surrogate, "GG705")
    assert f.fix.startswith("The rule leaves GG201 out (a surrogate first order): this compares the derivative of its "
                            "backward as written with finite differences of that same backward. Write backward with "
                            "differentiable torch operations"), f.fix
    assert "GG201), fix it first" not in f.fix


def test_gg705_backward_without_a_graph() -> None:
    """physicsnemo's _SafeAcos: the message said "impossible", as if PyTorch always raised; in a larger loss (SafeAcos
    plus x**3) the Hessian-vector product came out 3.0 with no error, where 2.2302 is right."""
    _, (f,) = findings(torch_rule(SinDetached, arrays(shape=(3,))), "GG705")
    assert re.fullmatch(
        rf"double backward through SinDetached is missing: the gradients its backward returns carry no graph "
        rf"\(torch\.autograd\.grad with create_graph=True gave tensors that do not require grad\), so differentiating "
        rf"a gradient raises where nothing else in the program carries a graph, and silently leaves out the terms "
        rf"through this Function where something does \(a gradient penalty, a Hessian-vector product of a larger "
        rf"loss\); but along a random direction u, d/dt <w, grad at \(x \+ t u\)\(ybar\)> = {NUM} by finite "
        rf"differences of the gradient\.",
        f.message), f.message
    assert f.severity == "error"

    # what the message says, shown in PyTorch itself
    x = torch.tensor([0.5], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(SinDetached.apply(x).sum() + (x ** 3).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x)
    assert torch.allclose(h, 6 * x.detach())  # the -sin(x) term through the Function is silently absent


def test_gg705_a_declared_once_differentiable_backward_is_named() -> None:
    """@once_differentiable declares that the backward is not differentiable: PyTorch raises where the cotangent
    carries a graph, and where it carries none the second-order terms through the Function are silently absent.
    The finding says so (an error still: the labelled corpus holds it as a bug, and the absence is silent)."""
    _, (f,) = findings(torch_rule(SinOnce, arrays(shape=(3,))), "GG705")
    assert re.fullmatch(
        r"double backward through SinOnce is silently incomplete: its backward is declared @once_differentiable, and "
        r"for a cotangent that carries no graph the gradients it returns carry none \(PyTorch raises only where the "
        r"cotangent carries one\), so a program that differentiates its gradient misses the terms through it: along "
        rf"a random direction u, d/dt <w, grad at \(x \+ t u\)\(ybar\)> = {NUM} by finite differences of the "
        r"gradient\.", f.message), f.message
    assert f.severity == "error" and f.actual == "no graph (declared @once_differentiable)"


class _SolvedToATolerance(torch.autograd.Function):
    """A solver's Function (zuko's adaptive ODE adjoint): its steps move with x, so its gradient moves by a part of
    the solver's tolerance that its @once_differentiable backward does not give a second order for."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 2.0 * x + 1e-4 * x.sin()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (2.0 + 1e-4 * x.cos())


def test_gg705_judges_a_missing_second_order_against_the_declared_tolerance_of_the_gradient() -> None:
    """The missing term is 5e-5 of the gradient: an error at float64's tolerance, none where the rule declares the
    solver's rtol=1e-3, which holds relative to the gradient as it does where PyTorch's second order is compared."""
    _, (f,) = findings(torch_rule(_SolvedToATolerance, arrays(shape=(3,), min_value=0.5, max_value=1.5)), "GG705")
    assert f.message.startswith("double backward through _SolvedToATolerance is silently incomplete"), f.message
    declared = torch_rule(_SolvedToATolerance, arrays(shape=(3,), min_value=0.5, max_value=1.5), rtol=1e-3)
    assert findings(declared, "GG705")[1] == []


class SinIntoOut(torch.autograd.Function):
    """torch-householder's backward writes with torch.bmm(..., out=): right to first order, and autograd refuses out=
    on tensors that require grad, which they do under create_graph=True alone."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        out = torch.empty_like(x)
        torch.mul(grad, x.cos(), out=out)
        return out


def test_gg705_a_backward_that_raises_only_under_create_graph_is_a_warning_about_second_order() -> None:
    """It was an error whose fix spoke of the input, as if the first-order backward raised there; a raise in the
    second differentiation itself was already a warning. The first order stays checked (and right)."""
    report, (f,) = findings(torch_rule(SinIntoOut, arrays(shape=(3,))), "GG705")
    assert re.fullmatch(
        r"the backward of SinIntoOut raises RuntimeError: .*out=.* when asked for a gradient with a graph "
        r"\(torch\.autograd\.grad with create_graph=True\) and runs without one: a program that differentiates this "
        r"gradient \(a gradient penalty, a Hessian-vector product\) stops there, so its second order is not checked\.",
        f.message), f.message
    assert f.severity == "warning" and f.fix.startswith("If programs are to differentiate this gradient")
    assert check(torch_rule(SinIntoOut, arrays(shape=(3,))), select=["GG201"]).findings == []


def _bisected_threshold(x, eps=1e-4):
    """nu with sum(sigmoid(x + nu)) = 2, bisected to eps, as LML finds its threshold."""
    lo, hi = -x.max(dim=-1).values - 7.0, -x.min(dim=-1).values + 7.0
    while (hi - lo).max() > eps:
        mid = (lo + hi) / 2
        above = torch.sigmoid(x + mid.unsqueeze(-1)).sum(-1) > 2
        hi, lo = torch.where(above, mid, hi), torch.where(above, lo, mid)
    return (lo + hi) / 2


class Cap(torch.autograd.Function):
    """LML's projection in small: the forward's values climb in stairs (its threshold is bisected to 1e-4), and the
    backward, the exact implicit derivative, reads the saved output, so double backward is right; finite differences
    of the gradient at steps finer than a stair read that stair's slope (-0.149 where -0.1417 is right)."""

    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x + _bisected_threshold(x).unsqueeze(-1))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        h = y * (1 - y)
        return h * (g - (h * g).sum(-1, keepdim=True) / h.sum(-1, keepdim=True))


class CapPartlyDetached(Cap):
    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        h = y.detach() * (1 - y)  # BUG: half of h's dependence on x cut off: double backward wrong, not missing
        return h * (g - (h * g).sum(-1, keepdim=True) / h.sum(-1, keepdim=True))


_CAP = arrays(shape=(6,), min_value=-5.0, max_value=5.0)


def test_gg705_judges_a_forward_in_stairs_by_steps_across_many_stairs() -> None:
    report = check(torch_rule(Cap, _CAP, name="cap"), select=["GG705"], seed=2)  # seed 2: an error before
    assert report.rules[0].error is None and report.findings == [], [f.message for f in report.findings]
    assert report.rules[0].checks_run == ["GG705"]
    for seed in (0, 2):
        (f,) = check(torch_rule(CapPartlyDetached, _CAP, name="cap_detached"), select=["GG705"], seed=seed).findings
        assert f.message.startswith("double backward through cap_detached is wrong"), f.message


def test_gg705_differentiable_backward_passes() -> None:
    report, found = findings(torch_rule(SinRight, arrays(shape=(3,))), "GG705")
    assert found == [] and skips(report, "GG705") == []


class ComplexSin(torch.autograd.Function):  # holomorphic: PyTorch's convention, grad * conj(cos(z))
    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return z.sin()

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return grad * z.cos().conj()


class ComplexZSinPartlyDetached(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return z * z.sin()

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return grad * (z.sin() + z * z.detach().cos()).conj()  # one factor of the product rule detached


def test_gg705_a_complex_differentiable_backward_passes() -> None:
    """The probe of torchlpc's complex LPC Function (gradgradcheck passes): GG705 warned "double backward through
    ... raises RuntimeError: grad can be implicitly created only for real scalar outputs but got torch.complex128",
    its own torch.autograd.grad of a complex <w, grad>, so no complex Function's second order was ever checked."""
    report, found = findings(torch_rule(ComplexSin, arrays(shape=(3,), dtype="complex128", min_value=-2.0,
                                                           max_value=2.0)), "GG705")
    assert found == [] and skips(report, "GG705") == []


def test_gg705_a_complex_partly_detached_backward_still_fails() -> None:
    _, (f,) = findings(torch_rule(ComplexZSinPartlyDetached, arrays(shape=(3,), dtype="complex128", min_value=-2.0,
                                                                    max_value=2.0)), "GG705")
    assert re.fullmatch(
        rf"double backward through ComplexZSinPartlyDetached is wrong: along a random direction u, d/dt <w, grad at "
        rf"\(x \+ t u\)\(ybar\)> = {NUM} by finite differences of the gradient, but PyTorch's derivative of the "
        rf"backward \(create_graph=True\) gives {NUM}\.", f.message), f.message


class SinThroughFloat32(torch.autograd.Function):
    """soft-DTW's pattern (pytorch-softdtw): a float64 Function whose table goes through a float32 tensor
    (``torch.Tensor(array)``), and whose backward is computed in NumPy from it."""

    @staticmethod
    def forward(ctx, x):
        table = torch.Tensor(np.sin(x.detach().numpy())).type(x.dtype)  # float32, then back to float64
        ctx.save_for_backward(x)
        return table

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        slope = torch.Tensor(np.cos(x.detach().numpy())).type(x.dtype)
        return grad * slope


def test_gg705_a_backward_without_a_graph_is_found_through_float32_rounding() -> None:
    """Its gradient rounds at 1e-7 of its value, and the kink test read that rounding as a kink on every input
    (one-sided slopes whose difference grew as the step shrank), which excused the missing graph: GG705 passed
    pytorch-softdtw's NumPy backward, which gradgradcheck fails."""
    _, (f,) = findings(torch_rule(SinThroughFloat32, arrays(shape=(4,), min_value=-3.0, max_value=3.0)), "GG705")
    assert f.message.startswith("double backward through SinThroughFloat32 is missing: the gradients its backward "
                                "returns carry no graph"), f.message
    from gradguard.checker.checks.second_order import kinked

    x, u, w = np.array([0.3, -1.2, 2.0, 0.7]), (np.array([1.0, -0.5, 0.25, 2.0]),), (np.array([0.5, 1.5, -1.0, 2.0]),)
    rounded = lambda x: (np.cos(x).astype(np.float32).astype(np.float64),)  # noqa: E731
    assert not kinked(rounded, (x,), u, w)  # rounding is not a kink
    assert kinked(lambda x: (np.abs(x - 0.3).astype(np.float32).astype(np.float64),), (x,), u, w)  # a kink still is


# kymatio's ModulusStable: |(re, im)| per row, gradient x/|x| with 0 at x = 0. At a zero row the gradient jumps (the
# midpoint of its sides at 0, so both one-sided slopes were the same 1/h and the jump went unseen), and where the
# cotangent weighs that row by 0 PyTorch's double backward multiplies its infinite second derivative by 0 (NaN).
class Modulus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        output = (x[..., 0] * x[..., 0] + x[..., 1] * x[..., 1]).sqrt()
        ctx.save_for_backward(x, output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        x, output = ctx.saved_tensors
        grad_input = x.mul(grad_output.unsqueeze(-1)).div(output.unsqueeze(-1))
        grad_input.masked_fill_(output.unsqueeze(-1) == 0, 0)
        return grad_input


class SquareViaAbs(torch.autograd.Function):
    """x**2 with the gradient 2 |x| sign(x): right, smooth (2x), but its double backward is NaN at 0 (d|x| = x/|x|)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * torch.sqrt(x * x) * torch.sign(x)


class _RefusesSecondOrder(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grad, x):
        ctx.save_for_backward(x)
        return grad * x.cos()

    @staticmethod
    def backward(ctx, gg):
        raise AssertionError("higher-order gradients are not supported")  # stylegan3's grid sample asserts so


class SinRefusingSecondOrder(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _RefusesSecondOrder.apply(grad, x)


def test_gg705_at_a_cone_point_the_gradient_jumps_and_a_nan_there_is_a_warning() -> None:
    from gradguard.checker.checks.second_order import kinked

    def pulled(x):
        x = torch.tensor(x, requires_grad=True)
        return torch.autograd.grad(Modulus.apply(x), x, torch.ones(3))[0].numpy()

    zero, ones = np.zeros((3, 2)), np.ones((3, 2))
    assert kinked(pulled, (zero,), (ones,), (ones,))  # the jump: one-sided slopes equal, growing as 1/h
    assert not kinked(pulled, (ones,), (ones,), (ones,))
    report, found = findings(torch_rule(Modulus, arrays(shape=(3, 2))), "GG705")  # seed 0: an error before
    assert found and all(f.severity == "warning" for f in found), [f.message for f in found]
    assert all(re.fullmatch(
        rf"double backward through Modulus gives nan at an input where its gradient has no derivative that finite "
        rf"differences resolve \(with every output and every entry weighted by 1, the gradient at x \+ t u jumps or "
        rf"kinks at t = 0 at the steps they take\): along a random "
        rf"direction u, d/dt <w, grad at \(x \+ t u\)\(ybar\)> = {NUM} by finite differences of the gradient for this "
        rf"cotangent and covector, along which it shows no jump, but PyTorch's derivative of the backward, taken "
        rf"through the entries without a derivative, is not finite\.", f.message) for f in found), [f.message for f in found]
    # kymatio's ModulusStable divides by |z| before masking the zeros: its backward is all differentiable torch, and
    # the fix that spoke of .detach() and no_grad sent its author after nothing; the NaN is the division's
    assert all(f.fix.startswith("Keep inf and NaN out of the backward's own graph") for f in found), found[0].fix


def test_gg705_the_jump_is_seen_whatever_the_covector_weighs() -> None:
    """Seed 2 draws a row (1.1e-177, -4.9e-324) whose |x|**2 underflows (a cone point in floats) and a covector that
    weighs its jumping entry by 0: the jump test read with that covector saw nothing, and the NaN was an error."""
    from gradguard.checker.case import Case, ReplayDraws
    from gradguard.checker.checks.registry import CHECKS

    x = np.array([[-4.519151684744335e-270, 6.666067230259941], [1.0943916292628345e-177, -5e-324],
                  [3.85118815502196, -1.7689724806862264e-260]])
    draws = [np.array([-1.1680897660234346, 0.0, 3.221127068983243]),
             (np.array([[-3.4881497532747776, 0.0], [-2.340593587600281, 0.0], [-1.463401550504773, 0.0]]),),
             (np.array([[-3.0, 3.579054178280698], [0.0, -1.9070564100249636], [1.1, 0.0]]),)]  # as seed 2 drew them
    found = list(CHECKS["GG705"].fn(Case(torch_rule(Modulus, arrays(shape=(3, 2))), (x,), ReplayDraws(draws))))
    assert found and all(f.severity == "warning" for f in found), [(f.severity, f.message) for f in found]


def test_gg705_the_jump_is_seen_where_the_direction_does_not_move() -> None:
    """Seed 1 draws a zero row that the direction u leaves still: PyTorch's double backward is NaN there (its infinite
    second derivative times u's 0), while along u the gradient is smooth (980.264 by finite differences, and by
    hand). The jump is looked for along the entries where PyTorch's derivative is not finite too."""
    report = check(torch_rule(Modulus, arrays(shape=(1, 2, 3, 2), min_value=-2.0, max_value=2.0)), seed=1)
    assert report.rules[0].error is None, report.rules[0].error
    found = [f for f in report.findings if f.check_id == "GG705"]
    assert all(f.severity == "warning" for f in found), [(f.severity, f.message) for f in found]


class _ReciprocalZeroAtZero(torch.autograd.Function):
    """torch_linalg_ext's Reciprocal: 1/x, and 0 at 0 by its documentation, with the backward to match; PyTorch's
    double backward is NaN at the zeros (the untaken branch's 1/x**2)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.where(x == 0, torch.zeros_like(x), 1 / x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return torch.where(x == 0, torch.zeros_like(x), -g / x**2)


def test_gg705_a_nan_at_a_pole_of_the_gradient_is_no_error() -> None:
    """At x = 0 the gradient is 0 and -1/(t u)**2 on either side: central differences give exactly 0 at every step
    and GG705 called PyTorch's NaN wrong, at every seed (its shrunk input: zeros). The value at 0 stands apart from
    both sides, so there is no second derivative to judge; a smooth gradient and float32 rounding are not read so."""
    from gradguard.checker.checks.second_order import kinked

    def pole(x):
        return np.where(x == 0, 0.0, -1 / np.where(x == 0, 1.0, x) ** 2)

    zero, ones = np.zeros(3), np.ones(3)
    assert kinked(pole, (zero,), (ones,), (ones,))
    assert not kinked(pole, (ones,), (ones,), (ones,))
    rounded = lambda x: (np.sin(x).astype(np.float32) + np.float32(0)).astype(np.float64)  # noqa: E731
    assert not kinked(rounded, (ones * 0.3,), (ones,), (ones,))  # float32 rounding stays far below APART
    for seed in (0, 1):
        report = check(torch_rule(_ReciprocalZeroAtZero, arrays(shape=(3,))), select=["GG705"], seed=seed)
        errors = [f.message for f in report.findings if f.severity == "error"]
        assert errors == [], errors


def test_gg705_a_nan_where_the_gradient_is_smooth_is_still_an_error() -> None:
    _, (f,) = findings(torch_rule(SquareViaAbs, arrays(shape=(3,), min_value=0.0, max_value=0.0)), "GG705")
    assert f.severity == "error" and f.actual == "nan", (f.severity, f.message)
    assert f.message.startswith("double backward through SquareViaAbs is wrong: ")


def test_gg705_is_not_shown_where_the_output_jumps_at_the_input_alone() -> None:
    """roma's Procrustes has a wrong double backward (63.94 where PyTorch's SVD derivative and finite differences of
    the gradient give 129.87); its counterexample shrank to M = 0, where R jumps (polar(u) on one side, polar(-u) on
    the other), the double backward is NaN, and "0.0 by finite differences" held only along the ray the shrunk
    direction drew. GG705 has no derivative to judge there: the counterexample is an M with a derivative. (The
    real-world corpus's copy of the Function, whose GG705 is a listed upstream flaw.)"""
    from gradguard.checker.loader import load_module

    corpus = load_module(Path(__file__).parents[1] / "realworld" / "correct_torch_functions.py")
    report, found = findings(corpus.roma_procrustes_rotation_rule, "GG705")  # roma/mappings.py, verbatim
    (f,) = [f for f in found if f.severity == "error"]
    assert f.message.startswith("double backward through roma_procrustes_rotation_rule is wrong: "), f.message
    m = eval(f.counterexample["args"][0], {"array": lambda a, shape=None: np.array(a)})  # noqa: S307 - its own literal
    assert np.linalg.svd(m, compute_uv=False).min() > 1e-3, m  # R is smooth around it: it has a derivative


class SquareByDifferenceSaved(torch.autograd.Function):
    """sigkernel's _SigKernel in miniature: backward differentiates by a finite difference of its own at a step of
    1e-9, against a value saved without a graph, so its double backward is d/dx ((x + h)**2 - saved) / h = 2e9 x."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.at_x = (x * x).detach()
        return (x * x).sum()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        h = 1e-9
        return grad * ((x + h) * (x + h) - ctx.at_x) / h


@pytest.mark.parametrize("shape", [(3,), (12,), (4, 6)])
def test_gg705_a_gradient_noisy_around_the_input_is_no_jump_at_the_input(shape) -> None:
    """sigkernel's double backward is about 1e9 off, and GG705 passed it at every seed: its gradient, a difference
    quotient at a step of 1e-9, is noisy at 1e-7, and the noise's second differences kept their size at a 1000-fold
    finer step, which read as a jump at x, where a double backward has nothing to be judged by. This miniature of
    it passed at seeds 0 to 2 for shapes (12,) and (4, 6). The noise is there around x too (the gradient is not
    smooth a tenth of a step away), and 1e-7 of noise over the differences' step explains no gap of 1e9: the
    finding stands. (A jump at x alone, roma's Procrustes at M = 0, is still excused: the test above.)"""
    spec = arrays(shape=shape, min_value=0.5, max_value=2.0)
    _, (f,) = findings(torch_rule(SquareByDifferenceSaved, spec), "GG705")
    m = re.fullmatch(
        rf"double backward through SquareByDifferenceSaved is wrong: along a random direction u, d/dt <w, grad at "
        rf"\(x \+ t u\)\(ybar\)> = {NUM} by finite differences of the gradient, but PyTorch's derivative of the "
        rf"backward \(create_graph=True\) gives {NUM}\.", f.message)
    assert m and abs(float(m[2])) > 1e6 * abs(float(m[1])), f.message


def test_gg705_a_double_backward_that_raises_is_a_warning_not_a_crash() -> None:
    report, (f,) = findings(torch_rule(SinRefusingSecondOrder, arrays(shape=(3,))), "GG705")
    assert f.severity == "warning" and report.rules[0].verdict == "pass"
    assert f.message == (
        "double backward through SinRefusingSecondOrder raises AssertionError: higher-order gradients are not "
        "supported (torch.autograd.grad of the gradient, which backward returned with a graph): a program that "
        "differentiates this gradient (a gradient penalty, a Hessian-vector product) stops there, so its second "
        "order is not checked.")


# -- the example module ----------------------------------------------------------------------------
EXAMPLES = {"Exp": [], "Scale": ["GG701"], "Mul": ["GG702"], "Square": ["GG703"], "Double_": ["GG704"],
            "Sin": ["GG705"], "Cube": ["GG706"], "Flat": ["GG707"]}


@pytest.mark.slow
def test_examples_fail_the_checks_they_illustrate() -> None:
    from pathlib import Path

    from gradguard.checker.loader import load_module, rules_in

    path = Path(__file__).resolve().parents[2] / "examples" / "torch_rules.py"
    rules = {r.name: r for r in rules_in(load_module(path))}
    assert set(rules) == set(EXAMPLES)
    for name, ids in EXAMPLES.items():
        got = {f.check_id for f in check(rules[name], max_examples=10).findings}
        assert got == set(ids), (name, got)


INJECTED = torch.tensor([0.5, -1.0], dtype=torch.float64)


class Inject(torch.autograd.Function):
    """NeMo's GradInsert pattern: the output is a tensor the caller supplies (a declared constant), as it is."""

    @staticmethod
    def forward(ctx, x, value):
        return value

    @staticmethod
    def backward(ctx, g):
        return torch.zeros(2, dtype=g.dtype), None


def test_gg703_gives_back_the_callers_tensor_it_changed() -> None:
    """GG703 changes each output in place between forward and backward; an output that is the caller's own
    constant kept the change, so every later draw (and the failing input a report showed) saw it scaled again."""
    report = check(torch_rule(Inject, arrays(shape=(2,)), constant(INJECTED), name="inject"), select=["GG703"])
    assert report.rules[0].checks_run == ["GG703"] and report.rules[0].verdict == "pass"
    assert INJECTED.tolist() == [0.5, -1.0]


def _numpy_linear(differentiable_backward: bool) -> type:
    """y = A x; the backward A^T g computed in NumPy (fast-soft-sort's and many wrappers' pattern) or in torch."""
    a = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0], [2.0, 1.0, 1.0]])

    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return torch.from_numpy(a @ x.detach().numpy())

        @staticmethod
        def backward(ctx, g):
            if differentiable_backward:
                return torch.from_numpy(a.T) @ g
            return torch.from_numpy(a.T @ g.detach().numpy())

    return Linear


def test_gg705_differentiates_the_backward_with_respect_to_its_cotangent():
    """A gradient penalty differentiates a Function's backward through its cotangent too. A backward computed in
    NumPy from the cotangent is right to first order and its second derivative in the input is 0, so GG705 passed
    it, while gradgradcheck fails it ("Numerical gradient for function expected to be zero")."""
    right = check(torch_rule(_numpy_linear(True), arrays(shape=(3,)), name="linear"), select=["GG705"]).findings
    assert right == [], [f.message for f in right]
    wrong = check(torch_rule(_numpy_linear(False), arrays(shape=(3,)), name="numpy_linear"), select=["GG705"]).findings
    assert [f.check_id for f in wrong] == ["GG705"]
    assert wrong[0].message.startswith(
        "double backward through numpy_linear is wrong with respect to the cotangent: along c (ybar with every second "
        "element negated), d/ds <w, grad(ybar + s c)> = ")
    assert "carry no graph from the cotangent" in wrong[0].message and wrong[0].actual == "0.0"


class SwiGLUDecomposed(torch.autograd.Function):
    """xformers' _SwiGLUDecomposedFunc (xformers/ops/swiglu_op.py), verbatim but for FORCE_BW_F32 (False there by
    default): its backward takes silu' through x.float() inside float64 arithmetic, so no value of its gradient is a
    float32 number, yet each rounds at float32's 1e-7."""

    @staticmethod
    def _silu_backward(dy, x):
        sigm = 1 / (1 + torch.exp(-x.float()))
        return (dy.float() * sigm * (1 + x.float() * (1 - sigm))).to(x.dtype)

    @staticmethod
    def forward(ctx, x, w1, b1, w2, b2, w3, b3):
        x1 = x @ w1.transpose(-2, -1) + b1
        x2 = x @ w2.transpose(-2, -1) + b2
        x3 = torch.nn.functional.silu(x1)
        x4 = x3 * x2
        x5 = x4 @ w3.transpose(-2, -1) + b3
        ctx.save_for_backward(x, w1, b1, w2, b2, w3, b3, x1, x2, x3, x4, x5)
        return x5

    @staticmethod
    def backward(ctx, dx5):
        x, w1, b1, w2, b2, w3, b3, x1, x2, x3, x4, x5 = ctx.saved_tensors
        dx4 = dx5 @ w3
        dw3 = dx5.transpose(-2, -1) @ x4
        db3 = dx5.sum(0)
        dx3 = dx4 * x2
        dx2 = dx4 * x3
        dx1 = SwiGLUDecomposed._silu_backward(dx3, x1)
        dx = dx2 @ w2
        dw2 = dx2.transpose(-2, -1) @ x
        db2 = dx2.sum(0)
        dx += dx1 @ w1
        dw1 = dx1.transpose(-2, -1) @ x
        db1 = dx1.sum(0)
        return (dx, dw1, db1, dw2, db2, dw3, db3)


def test_gg705_judges_the_cotangent_part_at_the_rounding_the_backward_shows():
    """xformers' SwiGLU at the input and draws seed 2 gave it: "d/ds <w, grad(ybar + s c)> = 0.169364 ..., but
    PyTorch's derivative ... gives 0.169364", terms of size 8 that cancel, each rounded at float32's 1e-7 by its
    silu', judged at float64's rounding. The backward's measured departure from an affine function of the cotangent
    is that rounding. (A backward detached from its cotangent still fails:
    test_gg705_differentiates_the_backward_with_respect_to_its_cotangent.)

    With respect to its inputs, xformers' double backward is wrong (plain autograd of the same forward gives
    81.3065 here, and central differences of its gradient 81.3065 at steps 1e-3 to 1e-5): GG705 missed it at
    this input while noise of float32's rounding everywhere around x read as a jump at x; it finds it now."""
    from gradguard.checker.case import Case, ReplayDraws
    from gradguard.checker.checks.registry import CHECKS

    a = np.array
    args = (a([[-0.8302561538361395, 0.5462784002579801], [-0.06680329321055245, -1.0881359943580986e-80],
               [-1.8588341495363565e-208, -1.0016746901696283]]),
            a([[0.10461377327751564, -0.7212567571033124], [2.133510227588946e-91, -0.47082256182653814],
               [-0.7339187136591403, 1.9447542837771783e-116], [6.103515625e-05, -0.7816341548166523]]),
            a([0.45930782429414774, 1.1754943508222875e-38, 0.8700436778419993, 0.2961987918576485]),
            a([[-2.61462434943843e-154, -1.6793121281900652e-222], [-0.12098493075056793, 1.0],
               [0.0, 6.398954863070933e-107], [0.28060543079576106, -0.897651695547026]]),
            a([-0.26592580080263584, -4.5546877876600767e-191, -0.9301938426702439, -0.046945014031994914]),
            a([[-3.1542158162898785e-177, -0.8895669856928272, 0.2865355249460644, -0.7338942644648361],
               [-0.5, 0.5268061785388376, -0.6523537697373287, -0.4942124604779864]]),
            a([-2.220446049250313e-16, 0.49558421644868766]))
    draws = [
        a([[-3.3882937341035664, -3.4580815559014493], [0.9249197815981196, 2.5576762238738606], [-1.85676801828459, 0.0]]),
        (a([[-1.1215610052847302, -0.812529834516897], [0.0, 0.0], [0.8785104584995684, 3.0723706846880923]]),
         a([[1.1889670107423003, 3.0], [0.0, 0.857718290544482], [0.0, -0.5], [0.8009174206128291, 0.0]]),
         a([-1.9273381307508823, 0.5852910800303919, 0.0, -3.4840614805845753]),
         a([[0.0, -2.9061224269358057], [2.6786819233031647, 0.0], [-3.569722618259229, 1.9], [0.5397364849976478, -1.5]]),
         a([0.0, 3.218358833128475, -3.4843661941145587, 0.0]),
         a([[-1.6835242313451277, 0.3333333333333333, -2.429969300986403, -1.094680246566543],
            [0.0, 0.0, -3.9999999999999996, -1.0279044371892243]]),
         a([0.7699164476307692, -1.0903165407609232])),
        (a([[-4.0, 0.0], [1.05253482480222, 0.0], [-3.802622289234396, -3.9999999999999996]]),
         a([[0.0, 0.0], [2.2295644869597346, 1.2923929933491012], [1.9050104500805736, -1.7722290976570227],
            [-3.0261186118216017, -3.764370140262388]]),
         a([2.8813123669497056, -2.9711754569993296, -2.5454501487636136, 3.951623489482932]),
         a([[-3.8797931970757222, 0.0], [0.6446830576055058, 0.0], [-3.1074942881886596, 2.3610676671565347],
            [1.6140142431174658, -1.8984550821869806]]),
         a([0.0, 0.0, 1.960780798680168, -3.290854804581734]),
         a([[3.2471258764779503, 3.2408154344018083, 0.0, 0.0], [-3.1015443528343045, 3.494673578868216, -3.0, -0.4410155022012061]]),
         a([-0.5236513549670674, 0.5]))]
    specs = [arrays(shape=np.shape(x)) for x in args]
    rule = torch_rule(SwiGLUDecomposed, *specs, name="swiglu")
    (found,) = CHECKS["GG705"].fn(Case(rule, args, ReplayDraws(draws)))
    m = re.fullmatch(
        rf"double backward through swiglu is wrong: along a random direction u, d/dt <w, grad at \(x \+ t u\)\(ybar\)> "
        rf"= {NUM} by finite differences of the gradient, but PyTorch's derivative of the backward "
        rf"\(create_graph=True\) gives {NUM}\.", found.message)
    assert m and abs(float(m[1]) - 81.3065) < 1e-2 and abs(float(m[2]) - 81.3065) > 1, found.message
    from gradguard.checker.checks.torch_checks import _along_cotangent

    assert _along_cotangent(Case(rule, args, ReplayDraws(draws)), draws[0], draws[2]) is None


# -- GG403 on a Function: PyTorch refuses a saved tensor changed in place -----------------------------------
class DoubleSavedInPlace(torch.autograd.Function):
    """normflows' MemoryEfficientLogDetEstimator pattern: the gradient is computed in place on a saved tensor."""

    @staticmethod
    def forward(ctx, x):
        scale = torch.full_like(x, 2.0)
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        return scale.mul_(grad)


class DoubleSaved(DoubleSavedInPlace):
    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        return scale * grad


def test_gg403_names_a_saved_tensor_changed_in_place() -> None:
    """The second backward raises PyTorch's "modified by an inplace operation": the finding said the backward
    consumes its residuals (list.pop, next()), which is not what happened; it now says what PyTorch refused."""
    _, (f,) = findings(torch_rule(DoubleSavedInPlace, arrays(shape=(3,))), "GG403")
    assert "modified by an inplace operation" in f.message
    assert f.message.endswith("on its second call with the same cotangent, after the first call succeeded. Its first "
                              "call changed a tensor saved for backward in place (an in-place operation on a saved "
                              "tensor or on a gradient computed from one), and PyTorch refuses to read it again."), f.message
    assert f.fix.startswith("Compute the gradients out of place in backward")
    assert findings(torch_rule(DoubleSaved, arrays(shape=(3,))), "GG403")[1] == []


class InnerBackward(torch.autograd.Function):
    """lava-dl's CustomRecurrent pattern: forward records a graph under enable_grad, backward runs it with
    torch.autograd.backward (without retain_graph) and reads the leaf's .grad."""

    @staticmethod
    def forward(ctx, x):
        with torch.enable_grad():
            leaf = x.detach().requires_grad_()
            y = torch.sin(leaf)
        ctx.leaf, ctx.y = leaf, y
        return y.detach()

    @staticmethod
    def backward(ctx, grad):
        ctx.leaf.grad = None
        with torch.enable_grad():
            torch.autograd.backward(ctx.y, grad)
        return ctx.leaf.grad.clone()


class InnerBackwardRetained(InnerBackward):
    @staticmethod
    def backward(ctx, grad):
        ctx.leaf.grad = None
        with torch.enable_grad():
            torch.autograd.backward(ctx.y, grad, retain_graph=True)
        return ctx.leaf.grad.clone()


def test_gg403_names_a_graph_freed_by_a_backward_inside_backward() -> None:
    """A backward running its own graph without retain_graph raised "backward through the graph a second time" on
    its second call, and the finding said it consumes its residuals (list.pop, next()): a probe of lava-dl's
    CustomRecurrent read that as a wrong diagnosis. It now names the freed graph and retain_graph."""
    _, (f,) = findings(torch_rule(InnerBackward, arrays(shape=(3,))), "GG403")
    assert "backward through the graph a second time" in f.message
    assert f.message.endswith("Its first call ran a backward through a graph PyTorch then freed (.backward(), "
                              "torch.autograd.backward or torch.autograd.grad inside backward, without "
                              "retain_graph=True), so its second call finds the graph's saved tensors gone; PyTorch's "
                              "own operations can be differentiated again under retain_graph=True, and this backward "
                              "cannot."), f.message
    assert f.fix.startswith("Pass retain_graph=True to the backward or grad call inside backward")
    assert findings(torch_rule(InnerBackwardRetained, arrays(shape=(3,))), "GG403")[1] == []


class TorchEigh(torch.autograd.Function):
    """An eigendecomposition handing its cotangents to PyTorch's own eigh backward (tbmalt's _SymEigB likewise)."""

    @staticmethod
    def forward(ctx, a):
        w, v = torch.linalg.eigh(a)
        ctx.save_for_backward(a)
        return w, v

    @staticmethod
    def backward(ctx, gw, gv):
        (a,) = ctx.saved_tensors
        with torch.enable_grad():
            a_ = a if a.requires_grad else a.detach().requires_grad_(True)
            w, v = torch.linalg.eigh(a_)
            (g,) = torch.autograd.grad((w, v), a_, (gw, gv), create_graph=torch.is_grad_enabled())
        return (g + g.mT) / 2


class TorchEighDetached(TorchEigh):
    @staticmethod
    def backward(ctx, gw, gv):
        (a,) = ctx.saved_tensors
        with torch.enable_grad():
            a_ = a.detach().requires_grad_(True)  # BUG: cut off from the input, so no second order
            w, v = torch.linalg.eigh(a_)
            (g,) = torch.autograd.grad((w, v), a_, (gw, gv))
        return (g + g.mT) / 2


# A nearly decoupled eigenvalue (couplings 1.3e-128 and -6.9e-32): LAPACK's sign of its eigenvector at x differs from
# the one at x + t u for t above about 1e-6, and the cotangent on the eigenvectors turns that flip into a jump of the
# gradient; every table from the first step down to 1e-6 averaged it (8.31059 against PyTorch's 6.5545, which central
# differences at steps below 1e-7 give).
DECOUPLED = (np.array([[[8.701065, 5.732246, 6.314812], [5.732246, -7.972987, 0.75], [6.314812, 0.75, -2.00587]],
                       [[5.566706, -1.122838, 1.33757e-128], [-1.122838, 6.833982, -6.856442e-32],
                        [1.33757e-128, -6.856442e-32, -5.336285e-14]]]),)
DECOUPLED_DRAWS = [
    (np.array([[0.0, 0.0, 3.059635], [2.749554, 3.702926, -0.399068]]),
     np.array([[[-1.979832, 0.107497, -1.749733], [2.082933, -2.988427, 3.92662], [2.086588, 0.113348, 3.180008]],
               [[-1.567489, 2.738099, 0.78053], [-0.283027, -3.234763, 2.693485], [-2.117554, -2.057213, 3.440032]]])),
    (np.array([[[0.535335, -0.554047, -3.247409], [-1.215364, 0.972072, -3.82676], [2.997059, 2.832396, -3.645566]],
               [[2.419368, -2.521639, 1.564991], [-2.759998, 1.532958, 3.669071], [3.87988, 1.306362, -2.691295]]]),),
    (np.array([[[-0.919155, 1.135634, 0.401518], [-2.558203, -3.891322, 0.658782], [3.965711, 3.623406, -2.487055]],
               [[-2.727012, -0.043069, -0.471379], [-1.112079, 2.070675, 0.322455], [-2.908551, 0.65133, 0.852793]]]),),
]


def test_gg705_does_not_judge_a_gradient_by_tables_that_average_a_sign_flip_near_x() -> None:
    """A probe of tbmalt's _SymEigB and of PyTorch's own eigh backward drew GG705 at seed 2 at this input: the finite
    differences' steps all straddled an eigenvector sign flip a hair from x. GG705 now asks finer steps first, as
    GG204 does; an eigh whose backward is cut off from its input still fails it."""
    from gradguard.checker.reproducer import replay

    rule = torch_rule(TorchEigh, arrays(shape=(2, 3, 3), structure="symmetric"), name="torch_eigh")
    replay(rule, "GG705", DECOUPLED, [*DECOUPLED_DRAWS, DECOUPLED_DRAWS[0]])  # raises AssertionError on a finding
    broken = torch_rule(TorchEighDetached, arrays(shape=(2, 3, 3), structure="symmetric"), name="torch_eigh_detached")
    assert [f.check_id for f in findings(broken, "GG705")[1]] == ["GG705"]


# -- the safety matrix's kink excuse with a tensor passed as a constant ---------------------------------------
SIGNS = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0], dtype=torch.float64)


class SignedRelu(torch.autograd.Function):
    """deepinv's spline Functions take their knots as tensors; relu's one-sided derivative at 0 is a subgradient."""

    @staticmethod
    def forward(ctx, x, s):
        ctx.save_for_backward(x, s)
        return s * torch.relu(x)

    @staticmethod
    def backward(ctx, g):
        x, s = ctx.saved_tensors
        return g * s * (x > 0).to(g.dtype), None


class SignedReluOneWrong(SignedRelu):
    @staticmethod
    def backward(ctx, g):
        x, s = ctx.saved_tensors
        flip = torch.ones_like(x)
        flip[0] = -1.0  # the first element's gradient has the wrong sign
        return g * s * flip * (x > 0).to(g.dtype), None


_ON_KINKS = arrays(shape=(6,), elements=st.sampled_from([0.0, 0.0, 0.5, -0.5, 1.0]))


def test_a_tensor_constant_leaves_the_kink_excuse_to_the_contexts() -> None:
    """Several elements exactly at relu's kink: every context program is judged call by call, which needs each
    call's arguments to move affinely with the input. A tensor passed as a constant (the sign pattern here) made
    that analysis give up, and seed 2 reported a wrong gradient under called-twice (-0.133 against 1.308)."""
    right = check(torch_rule(SignedRelu, _ON_KINKS, constant(SIGNS), name="signed_relu"), seed=2).rules[0]
    assert right.verdict == "pass", [(f.check_id, f.message) for f in right.findings]
    wrong = check(torch_rule(SignedReluOneWrong, _ON_KINKS, constant(SIGNS), name="signed_relu_wrong"), seed=2)
    assert {"GG201", "GG501"} <= {f.check_id for f in wrong.findings}


# -- GG705 on a Function that returns a float32 gradient for a float64 input ----------------------------------
class ScaleSumFloat32Grad(torch.autograd.Function):
    """nncf's QuantizeAsymmetricTorch returns grad_low.float(): a float32 gradient, cast back to float64 by PyTorch."""

    @staticmethod
    def forward(ctx, x, a):
        ctx.save_for_backward(x, a)
        return x * a

    @staticmethod
    def backward(ctx, g):
        x, a = ctx.saved_tensors
        return g * a, (g * x).sum(dim=-1, keepdim=True).float()


class ScaleSumFloat32GradDetached(ScaleSumFloat32Grad):
    @staticmethod
    def backward(ctx, g):
        x, a = ctx.saved_tensors
        return g * a, (g.detach() * x).sum(dim=-1, keepdim=True).float()  # cut off from the cotangent


_NEAR_1000 = arrays(shape=(2,), min_value=1000.0, max_value=1000.01)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gg705_reads_a_float32_gradient_at_float32_precision(seed) -> None:
    """Its backward values near 2000, rounded at float32's 1e-4, nearly cancel in the difference GG705's cotangent
    part takes, and that difference was judged at float64's precision against PyTorch's exact derivative: a false
    GG705 at every seed. A gradient cut off from the cotangent still fails."""
    spec = (_NEAR_1000, arrays(shape=(1,), min_value=0.5, max_value=2.0))
    _, found = findings(torch_rule(ScaleSumFloat32Grad, *spec, name="scale_sum_float32"), "GG705")
    assert found == [], [f.message for f in found]
    _, cut = findings(torch_rule(ScaleSumFloat32GradDetached, *spec, name="scale_sum_cut"), "GG705")
    assert cut and cut[0].message.startswith("double backward through scale_sum_cut is wrong with respect to the "
                                             "cotangent"), [f.message for f in cut]



def _chol_solve(detached: bool):
    """x = A^-1 b by Cholesky, which reads A's lower triangle only (linear_operator's Solve): right on symmetric A."""

    class CholSolve(torch.autograd.Function):
        @staticmethod
        def forward(ctx, b, A):
            x = torch.cholesky_solve(b, torch.linalg.cholesky(A))
            ctx.save_for_backward(A, x)
            return x

        @staticmethod
        def backward(ctx, g):
            A, x = ctx.saved_tensors
            if detached:  # a second order that misses how the solve moves with A
                A = A.detach()
            gb = torch.cholesky_solve(g, torch.linalg.cholesky(A))
            return gb, -(gb @ x.mT + x @ gb.mT) / 2

    return torch_rule(CholSolve, arrays(shape=(3, 2), min_value=-2.0, max_value=2.0),
                      arrays(shape=(3, 3), structure="psd", min_value=-2.0, max_value=2.0),
                      name="chol_solve_detached" if detached else "chol_solve")


def test_gg705_reads_a_structured_rule_along_its_structure() -> None:
    """Finite differences of the gradient moved A off the symmetric matrices, where the Function reads only its lower
    triangle: 3.33041 against PyTorch's -1.55052 (linear_operator's Solve, at every seed). Along the symmetric part
    of the direction the two agree; a backward detached from A still fails."""
    report, found = findings(_chol_solve(False), "GG705")
    assert found == [], [f.message for f in found]
    _, found = findings(_chol_solve(True), "GG705")
    assert [f.severity for f in found] == ["error"], [f.message for f in found]


def test_gg705_shows_the_direction_it_moved_along_beside_the_drawn_one() -> None:
    """The counterexample showed the drawn direction u for A, declared psd, where the finite differences moved along
    u's symmetric part; it now shows that part too, and the reproducer still replays the draws themselves."""
    from gradguard.checker.case import Case, ReplayDraws
    from gradguard.checker.checks import CHECKS
    from gradguard.checker.per_rule import draws_by_label

    b = np.array([[0.5, -1.0], [1.5, 0.25], [-0.75, 1.0]])
    A = np.array([[2.0, 0.3, 0.1], [0.3, 1.5, -0.2], [0.1, -0.2, 1.2]])
    u_A = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0], [1.0, 0.0, 1.0]])
    draws = [np.ones((3, 2)), (np.ones((3, 2)), u_A), (np.ones((3, 2)), np.ones((3, 3)))]
    case = Case(_chol_solve(True), (b, A), ReplayDraws(draws))
    found = list(CHECKS["GG705"].fn(case))
    assert [p.severity for p in found] == [None], [p.message for p in found]
    [(label, (used_b, used_A))] = case.derived
    assert label == "direction as used (moved onto the declared psd structure)"
    np.testing.assert_array_equal(used_A, (u_A + u_A.T) / 2)
    np.testing.assert_array_equal(used_b, np.ones((3, 2)))
    shown = draws_by_label(case.record, case.derived)
    assert list(shown) == ["cotangent", "direction", "covector", label]
    assert [v for _, v in case.record] == draws  # the reproducer's draws are the drawn ones


class _GuardlessWhere(torch.autograd.Function):
    """spikingjelly's s2nn pattern: the backward's torch.where divides by zero in the branch it does not take at
    x = -1, so its own derivative there is 0 * inf = NaN, while the backward itself is smooth (sigmoid'')."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.where(x < 0, torch.sigmoid(x), torch.log(torch.clamp(x, min=0) + 1) + 0.5)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * torch.where(x < 0, s * (1 - s), 1 / (x + 1))


class _GuardedWhere(_GuardlessWhere):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        safe = torch.where(x < 0, torch.ones_like(x), x + 1)  # the operand guarded before the division
        return g * torch.where(x < 0, s * (1 - s), 1 / safe)


def test_gg705_a_nan_double_backward_from_an_untaken_branch_says_how_to_guard_it_and_the_guarded_twin_passes():
    spec = arrays(shape=(3,), elements=st.sampled_from([-1.0, -2.0, -0.5]))
    found = [f for f in check(torch_rule(_GuardlessWhere, spec), select=["GG705"]).findings if f.check_id == "GG705"]
    assert found and found[0].severity == "error"
    assert "by finite differences of the gradient, but PyTorch's derivative of the backward (create_graph=True) gives nan" in found[0].message
    assert found[0].fix.startswith("Keep inf and NaN out of the backward's own graph")
    assert not check(torch_rule(_GuardedWhere, spec), select=["GG705"]).findings


# -- GG707 -------------------------------------------------------------------------------------------
class ScaleByView(torch.autograd.Function):
    """Flattens its gradient with .view(): PyTorch raises on an expanded or transposed one."""

    @staticmethod
    def forward(ctx, x):
        return 3 * x

    @staticmethod
    def backward(ctx, grad):
        return (3 * grad.view(-1)).view(grad.shape)


class ScaleByReshape(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 3 * x

    @staticmethod
    def backward(ctx, grad):
        return (3 * grad.reshape(-1)).reshape(grad.shape)


class ScaleRowsByView(torch.autograd.Function):
    """Views the gradient as (rows, rest): an expanded gradient (strides (0, 4, 1)) still merges its last two axes,
    a transposed one (strides (12, 1, 3)) does not."""

    @staticmethod
    def forward(ctx, x):
        return 3 * x

    @staticmethod
    def backward(ctx, grad):
        return (3 * grad.view(grad.shape[0], -1)).view(grad.shape)


class ScaleInMemoryOrder(torch.autograd.Function):
    """Reads the gradient in its memory order, as a kernel walking data_ptr does: silently wrong where that order is
    not the logical one."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad):
        flat = grad.numpy().ravel(order="K")
        return torch.from_numpy(2 * flat.reshape(grad.shape))


class DoubleInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad):
        return grad.mul_(2)


class SplitByView(torch.autograd.Function):
    """Two outputs; only the second's gradient is flattened with .view()."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x, 3 * x

    @staticmethod
    def backward(ctx, g1, g2):
        return 2 * g1 + (3 * g2.view(-1)).view(g2.shape)


LAYOUT_RAISES = (
    r"the backward of {name} raises when {which} is {layout} \(strides \({strides}\)\), as the backward of {how} hands "
    r"it, though it runs on a contiguous gradient with the same values: RuntimeError: {error}"
)
VIEW_ERROR = (r"view size is not compatible with input tensor's size and stride \(at least one dimension spans across "
              r"two contiguous subspaces\)\. Use \.reshape\(\.\.\.\) instead\.")


def test_gg707_a_backward_that_views_its_gradient_raises_on_the_expanded_gradient_of_y_sum_0() -> None:
    _, (f,) = findings(torch_rule(ScaleByView, arrays(shape=(3, 4))), "GG707")
    assert re.fullmatch(LAYOUT_RAISES.format(
        name="ScaleByView", which="the gradient of its output", layout="expanded along axis 0", strides="0, 1",
        how=r"y\.sum\(0\)", error=VIEW_ERROR), f.message), f.message
    assert f.severity == "error" and f.location == "output"
    assert f.fix.startswith("Make the gradient contiguous before viewing it or reading its memory: grad = "
                            "grad.contiguous()")


def test_gg707_the_transposed_layout_is_tried_where_the_expanded_one_passes() -> None:
    _, (f,) = findings(torch_rule(ScaleRowsByView, arrays(shape=(2, 3, 4))), "GG707")
    assert re.fullmatch(LAYOUT_RAISES.format(
        name="ScaleRowsByView", which="the gradient of its output", layout="transposed in memory",
        strides="12, 1, 3", how=r"y\.mT or y\.t\(\)", error=VIEW_ERROR), f.message), f.message


def test_gg707_a_backward_that_reads_memory_order_gives_a_silently_wrong_gradient() -> None:
    _, (f,) = findings(torch_rule(ScaleInMemoryOrder, arrays(shape=(3, 4), min_value=-2, max_value=2)), "GG707")
    m = re.fullmatch(
        rf"when the gradient of its output is transposed in memory \(strides \(1, 3\)\), as the backward of y\.mT or "
        rf"y\.t\(\) hands it, the backward of ScaleInMemoryOrder gives input 0 the gradient {NUM} at \[(\d), (\d)\], "
        rf"but {NUM} for the same values laid out contiguously\.",
        f.message,
    )
    assert m and float(m[1]) != float(m[4]), f.message
    assert f.location == f"argument 0 at [{m[2]}, {m[3]}]"


def test_gg707_an_in_place_write_into_the_gradient_is_told_to_compute_into_a_new_tensor() -> None:
    _, (f,) = findings(torch_rule(DoubleInPlace, arrays(shape=(3, 4))), "GG707")
    assert re.fullmatch(LAYOUT_RAISES.format(
        name="DoubleInPlace", which="the gradient of its output", layout="expanded from a single value",
        strides="0, 0", how=r"y\.sum\(\)",
        error=r"unsupported operation: more than one element of the written-to tensor refers to a single memory "
              r"location\. Please clone\(\) the tensor before performing the operation\."), f.message), f.message
    assert f.fix.startswith("Compute into a new tensor (grad * 2, not grad.mul_(2))")


SIGPY_M = np.array([1 + 2j, -0.5 + 1j, 2 - 1j, 0.3 + 0.1j])


class SigpyLinop(torch.autograd.Function):
    """Modelled on sigpy.pytorch's from_pytorch(grad_output, iscomplex=True), which to_pytorch_function's backward
    calls: it views the (..., 2) float gradient as complex numbers with ndarray.view(np.complex128), which NumPy
    refuses where the last axis is not contiguous, as it is not in the gradient of y.sum(). The linear map is a
    complex multiplication here."""

    @staticmethod
    def forward(ctx, input):
        x = input.detach().numpy().view(np.complex128)[..., 0]
        return torch.from_numpy((SIGPY_M * x).view(np.float64).reshape(x.shape + (2,)))

    @staticmethod
    def backward(ctx, grad_output):
        g = grad_output.detach().numpy().view(np.complex128)[..., 0]
        return torch.from_numpy((np.conj(SIGPY_M) * g).view(np.float64).reshape(g.shape + (2,)))


def test_gg707_sigpys_complex_bridge_raises_on_the_gradient_of_y_sum() -> None:
    _, (f,) = findings(torch_rule(SigpyLinop, arrays(shape=(4, 2))), "GG707")
    assert re.fullmatch(LAYOUT_RAISES.format(
        name="SigpyLinop", which="the gradient of its output", layout="expanded from a single value",
        strides="0, 0", how=r"y\.sum\(\)",
        error="").replace("RuntimeError: ", r"ValueError: To change to a dtype of a different size, the last axis "
                                            r"must be contiguous"), f.message), f.message
    assert f.fix.startswith("Make the gradient contiguous")


class SplitPairByView(torch.autograd.Function):
    """Two outputs; views the first's gradient only where the second's is not contiguous either: a stand-in for a
    backward that fails only when both gradients come laid out, so no output alone is to blame."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x, 3 * x

    @staticmethod
    def backward(ctx, g1, g2):
        if g2.is_contiguous():
            g1 = g1.contiguous()
        return (2 * g1.view(-1)).view(g1.shape) + 3 * g2


def test_gg707_names_the_output_whose_gradients_layout_fails_alone() -> None:
    _, (f,) = findings(torch_rule(SplitByView, arrays(shape=(3, 4))), "GG707")
    assert re.fullmatch(LAYOUT_RAISES.format(
        name="SplitByView", which="the gradient of output 1", layout="expanded along axis 0", strides="0, 1",
        how=r"y\.sum\(0\)", error=VIEW_ERROR), f.message), f.message
    assert f.location == "output 1"


def test_gg707_names_every_laid_out_output_where_none_fails_alone() -> None:
    _, (f,) = findings(torch_rule(SplitPairByView, arrays(shape=(3, 4))), "GG707")
    assert re.fullmatch(LAYOUT_RAISES.replace(r"is {layout} \(strides \({strides}\)\)", r"are {layout} \({strides}\)").format(
        name="SplitPairByView", which="the gradients of outputs 0, 1", layout="expanded along axis 0",
        strides=r"output 0: strides \(0, 1\); output 1: strides \(0, 1\)", how=r"y\.sum\(0\)",
        error=VIEW_ERROR), f.message), f.message
    assert f.location == "output 0"


def test_gg707_passes_a_backward_that_reshapes_or_reads_through_numpy() -> None:
    for rule in (torch_rule(ScaleByReshape, arrays(shape=(3, 4))), torch_rule(SquareSaved, arrays(shape=(2, 3)))):
        report, found = findings(rule, "GG707")
        assert found == [] and skips(report, "GG707") == []


def test_gg707_skips_an_output_with_no_second_entry_along_any_axis() -> None:
    report, found = findings(torch_rule(ScaleByView, arrays(shape=(1,))), "GG707")
    assert found == [] and skips(report, "GG707") == [
        "no output of the Function has two entries or more along an axis: every layout of its gradient is contiguous"]

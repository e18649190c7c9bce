"""The NumPy-rrule adapter for PyTorch: forward on the tensors' NumPy views, backward through the pullback,
with the cotangents PyTorch really hands over for unused outputs."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install 'gradguard[torch]'")

from gradguard.engines.errors import AdapterError  # noqa: E402
from gradguard.engines.torch_adapter import call, to_function  # noqa: E402


def _recording_sincos(seen):
    def rrule(x):
        def pullback(g):
            seen.append(g)
            gs, gc = g
            return (gs * np.cos(x) - gc * np.sin(x),)

        return (np.sin(x), np.cos(x)), pullback

    return to_function(rrule, name="sincos")


def test_gradient_matches_the_pullback():
    fn = _recording_sincos([])
    x = torch.tensor([0.1, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    s, c = fn.apply(x)
    (g,) = torch.autograd.grad((s * 2 + c * 3).sum(), x)
    xn = x.detach().numpy()
    np.testing.assert_allclose(g.numpy(), 2 * np.cos(xn) - 3 * np.sin(xn))


def test_an_unused_output_gets_materialised_zeros_and_no_used_output_skips_the_pullback():
    seen = []
    fn = _recording_sincos(seen)
    x = torch.tensor([0.1, 0.5], dtype=torch.float64, requires_grad=True)
    s, _ = fn.apply(x)
    torch.autograd.grad(s.sum(), x)
    (gs, gc), = seen
    assert np.array_equal(gs, np.ones(2)) and isinstance(gc, np.ndarray) and np.array_equal(gc, np.zeros(2))
    seen.clear()
    fn.apply(x)  # no output used: the Function's node is not on the path to the loss
    torch.autograd.grad((x * x).sum(), x)
    assert seen == []


def test_the_forward_writes_into_the_tensor_unseen_by_the_version_counter():
    def addone_rrule(a):
        a += 1
        return a.sum(), lambda g: (np.full(a.shape, g),)

    fn = to_function(addone_rrule, name="addone_")
    leaf = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    x = leaf.clone()
    y = torch.dot(x, x)
    fn.apply(x)
    assert x.detach().numpy().tolist() == [2.0, 3.0] and x._version == 0
    (g,) = torch.autograd.grad(y, leaf)
    assert g.numpy().tolist() == [4.0, 6.0]  # dot read the mutated x: the true gradient is [2, 4]


def test_a_pullback_with_the_wrong_number_of_tangents_is_an_adapter_error():
    fn = to_function(lambda a, b: (a * b, lambda g: (g * b,)), name="mul")
    x = torch.ones(2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(AdapterError, match=r"one tangent per argument \(2\)"):
        torch.autograd.grad(fn.apply(x, x).sum(), x)


def test_the_same_tensor_twice_is_the_same_array_twice():
    seen = []

    def rrule(a, b):
        seen.append(a is b)
        return a * b, lambda g: (g * b, g * a)

    fn = to_function(rrule, name="mul")
    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(fn.apply(x, x).sum(), x)
    assert seen == [True] and g.numpy().tolist() == [2.0, 4.0]
    fn.apply(x, x.clone())
    assert seen == [True, False]


def test_a_nested_output_is_rebuilt_for_the_caller_and_its_cotangent_for_the_pullback():
    seen = []

    def rrule(x):
        def pullback(g):
            seen.append(g)
            a, (b, c) = g
            return (2.0 * a + 2.0 * x * b + c,)

        return (x * 2.0, (x**2, np.sum(x))), pullback

    fn = to_function(rrule, name="nested")
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    y = call(fn, x)
    a, (b, c) = y
    assert isinstance(y, tuple) and isinstance(y[1], tuple) and c.dim() == 0
    (g,) = torch.autograd.grad(a.sum() + 3.0 * b.sum() + 5.0 * c, x)
    ((ga, (gb, gc)),) = seen
    assert np.array_equal(ga, np.ones(3)) and np.array_equal(gb, np.full(3, 3.0)) and gc == 5.0
    xn = x.detach().numpy()
    np.testing.assert_allclose(g.numpy(), 2.0 + 6.0 * xn + 5.0)
    assert call(to_function(lambda x: (x * 2.0, lambda g: (2.0 * g,)), name="double"), x).dim() == 1  # a leaf stays one

"""The torch column of the safety matrix: every context program under PyTorch's autograd, NumPy rules
through the adapter Function, torch rules natively; absent (not an error) where PyTorch is not installed."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gradguard.checker import arrays, check, rrule, torch_rule
from gradguard.checker.contexts import safety_matrix
from gradguard.checker.loader import load_module, rules_in

ROOT = Path(__file__).resolve().parents[2]


def _cells(matrix):
    return {(c["context"], c["engine"]): c for c in matrix["cells"]}


def test_the_torch_column_is_absent_without_torch():
    """With PyTorch unimportable, the matrix has no torch column and every other column is there."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from pathlib import Path\n"
        "from gradguard.checker.loader import load_module, rules_in\n"
        "from gradguard.checker.contexts import safety_matrix, engines_for\n"
        "rule = next(r for r in rules_in(load_module(Path('examples/addone.py'))) if r.name == 'addone_rrule')\n"
        "m = safety_matrix(rule, contexts=['output-used', 'read-after'])\n"
        "print(m['engines'], sorted({c['status'] for c in m['cells']}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['tape[zero]', 'tape[skip]', 'jax'] ['raised', 'right', 'wrong']"


torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install 'gradguard[torch]'")


def sinsum(x, w):
    return np.sin(x) @ w


@rrule(sinsum, arrays(shape=(3,)), arrays(shape=(3, 2)))
def sinsum_rrule(x, w):
    s = np.sin(x)
    return s @ w, lambda g: (None, None) if g is None else (np.cos(x) * (w @ g), np.outer(s, g))


def test_a_correct_numpy_rule_is_right_in_the_torch_column():
    m = safety_matrix(sinsum_rrule)
    assert "torch" in m["engines"]
    torch_cells = [c for c in m["cells"] if c["engine"] == "torch"]
    assert len(torch_cells) == len(m["contexts"]) >= 6
    assert {c["status"] for c in torch_cells} == {"right"}, [c for c in torch_cells if c["status"] != "right"]


def add(x, y):
    return x + y


@rrule(add, arrays(shape=(3,)), arrays(shape=(3,)))
def add_same_tangent_rrule(x, y):
    return x + y, lambda g: (None, None) if g is None else (g, g)  # one array for both arguments (PyTensor's Add)


@rrule(add, arrays(shape=(3,)), arrays(shape=(3,)))
def add_scaled_tangent_rrule(x, y):
    return x + y, lambda g: (None, None) if g is None else (g, 2 * g)


def test_one_array_as_two_tangents_is_right_in_the_torch_column():
    """A pullback may return the same array for two arguments; the adapter gives PyTorch one buffer per argument,
    where two tensors over one buffer let PyTorch's in-place accumulation into one gradient change the other
    (`captured-before` adds dot(x, x)'s gradient to x's)."""
    m = safety_matrix(add_same_tangent_rrule)
    torch_cells = {c["context"]: c["status"] for c in m["cells"] if c["engine"] == "torch"}
    assert set(torch_cells.values()) == {"right"}, torch_cells
    broken = {c["context"]: c["status"] for c in safety_matrix(add_scaled_tangent_rrule)["cells"] if c["engine"] == "torch"}
    assert broken["output-used"] == broken["captured-before"] == "wrong"


@pytest.mark.parametrize("path", ["addone.py", "mutation_in_context.py"])
def test_a_rule_mutating_a_captured_input_is_wrong_under_torch_as_under_the_tape(path):
    """The adapter's forward writes through the tensor's NumPy view: PyTorch's version counter does not see
    the write, so dot's saved input is silently stale, exactly as on the tape (same <gradient, v>)."""
    rule = next(r for r in rules_in(load_module(ROOT / "examples" / path)) if r.name == "addone_rrule")
    m = safety_matrix(rule)
    cells = _cells(m)
    for context in ("captured-before", "read-after"):
        assert cells[(context, "torch")]["status"] == "wrong"
        assert cells[(context, "torch")]["message"] == cells[(context, "tape[zero]")]["message"]
    for context in ("output-used", "output-unused", "fan-out"):
        assert cells[(context, "torch")]["status"] == "right"


# An in-place forward that marks its input dirty, as the torch checks' GG704 pair has it.
from test_torch_checks import DoubleMarked  # noqa: E402

double_rule = torch_rule(DoubleMarked, arrays(shape=(3,)), mutates=0)


def test_a_torch_rule_runs_natively_and_the_version_counter_catches_a_captured_input():
    """A native in-place Function bumps the version of the tensor dot saved: PyTorch raises at backward.
    The tape (which would run the rule through NumPy) silently reads the mutated value, but a Function is
    never used on the tape: its matrix is the torch column alone."""
    m = safety_matrix(double_rule, contexts=["output-used", "captured-before"])
    assert m["engines"] == ["torch"]
    cells = _cells(m)
    assert cells[("output-used", "torch")]["status"] == "right"
    caught = cells[("captured-before", "torch")]
    assert caught["status"] == "raised" and "modified by an inplace operation" in caught["message"]
    forced = _cells(safety_matrix(double_rule, contexts=["captured-before"], engines=["tape[zero]", "torch"]))
    assert forced[("captured-before", "tape[zero]")]["status"] == "wrong"  # asked for, the column still runs


class ExpMarkedDirty(torch.autograd.Function):
    """PyTorch's NumpyExp_ (autograd_function_db): in place, marked dirty, the output saved for backward."""

    @staticmethod
    def forward(ctx, x):
        x.exp_()
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


def test_a_correct_in_place_function_is_judged_where_it_runs():
    """NumpyExp_ drew GG501 from the tape and JAX columns (captured-before, read-after: no version counter
    there) while PyTorch, the only engine it runs in, raises in those programs."""
    result = check(torch_rule(ExpMarkedDirty, arrays(shape=(4,), min_value=-3.0, max_value=3.0), mutates=(0,),
                              name="exp_marked_dirty"), select=["GG5"]).rules[0]
    assert result.verdict == "pass", [(f.check_id, f.message) for f in result.findings]
    assert result.safety_matrix["engines"] == ["torch"]


def sincos(x):
    return np.sin(x), np.cos(x)


@rrule(sincos, arrays(shape=(3,)))
def sincos_strict_rrule(x):
    """Right for the cotangents PyTorch hands over; refuses a None cotangent (fine: PyTorch never sends one)."""
    def pullback(g):
        gs, gc = g
        return (gs * np.cos(x) - gc * np.sin(x),)

    return sincos(x), pullback


def test_torch_hands_materialised_zeros_or_skips_the_pullback():
    m = safety_matrix(sincos_strict_rrule, contexts=["output-used", "output-unused"])
    cells = _cells(m)
    assert cells[("output-used", "torch")]["status"] == "right"  # both outputs used
    assert cells[("output-unused", "torch")]["status"] == "right"  # backward never called


# The nested-output rules of the isolation checks' exotic-output tests, here under the torch column.
from test_precision import nested_ok, nested_unscaled  # noqa: E402


def test_a_nested_output_reaches_the_program_and_the_pullback_in_its_structure():
    """PyTorch's Functions return flat tuples: the adapter carries (a, (b, c)) as three tensors and rebuilds
    it on both sides, so a correct rule with a nested output is right in every torch cell, not 'raised'."""
    m = safety_matrix(nested_ok, seed=0)
    torch_cells = [c for c in m["cells"] if c["engine"] == "torch"]
    assert torch_cells and {c["status"] for c in torch_cells} == {"right"}, torch_cells


def test_a_nested_output_whose_cotangent_is_dropped_is_wrong_under_torch():
    (finding,) = check(nested_unscaled, select="GG5", seed=0).rules[0].findings
    assert finding.check_id == "GG501" and finding.location == "context output-used"
    assert re.fullmatch(
        r"in context `output-used` \(the output goes through y \+ s sin\(y/s\)/2 \(s = 1 unless the output exceeds "
        r"pi or a finite-difference step moves it further\) into a random linear functional\) the "
        r"gradient of the program is wrong under tape\[zero\], tape\[skip\], jax, torch \(relative error \S+\)\.",
        finding.message,
    ), finding.message
    cells = _cells(safety_matrix(nested_unscaled, seed=0))
    assert cells[("output-used", "torch")]["rel_error"] == pytest.approx(cells[("output-used", "tape[zero]")]["rel_error"])


class _SquaredAngle(torch.autograd.Function):
    """acos(x . y)**2 of unit rows (transformers' YOSO takes acos of such inner products): smooth up to x = y, where
    x . y rounds to 1 +- 2.2e-16 and acos of the upper one is NaN."""

    @staticmethod
    def forward(ctx, x, y):
        c = (x * y).sum(-1)
        ctx.save_for_backward(x, y, c)
        return torch.acos(c) ** 2

    @staticmethod
    def backward(ctx, g):
        x, y, c = ctx.saved_tensors
        s = torch.clamp(1 - c * c, min=0.0)
        d = torch.where(s > 1e-12, -2 * torch.acos(c.clamp(-1, 1)) / torch.sqrt(s.clamp(min=1e-300)),
                        torch.full_like(c, -2.0))
        w = (g * d).unsqueeze(-1)
        return w * y, w * x


def test_the_torch_column_hands_a_structured_argument_over_with_its_own_value():
    """The projection's formula moved a unit row by an ulp: the plain run read acos(1 + 2.2e-16) (NaN) and the torch
    column acos(1 - 1.1e-16), and GG503 called the engines' disagreement a training-mode branch."""
    rule = torch_rule(_SquaredAngle, arrays(shape=(6, 4), structure="unit"), arrays(shape=(6, 4), structure="unit"),
                      name="squared_angle_unit")
    for seed in (0, 2):
        report = check(rule, select=["GG503"], seed=seed)
        assert report.findings == [], (seed, [f.message for f in report.findings])


class SparseTimesDense(torch.autograd.Function):
    """y = A @ B with A a fixed sparse (COO) matrix, as graph and point-cloud libraries write it."""

    @staticmethod
    def forward(ctx, A, B):
        ctx.save_for_backward(A)
        return torch.sparse.mm(A, B)

    @staticmethod
    def backward(ctx, g):
        (A,) = ctx.saved_tensors
        return None, torch.sparse.mm(A.t(), g)


def test_a_fixed_sparse_argument_is_run_in_every_context():
    """The column read the storage size of every tensor argument, which a sparse tensor does not have: every cell
    "raised" (NotImplementedError: Cannot access storage of SparseTensorImpl) and the Function passed with no
    context judged."""
    from gradguard.checker import constant

    A = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], dtype=torch.float64).to_sparse()
    result = check(torch_rule(SparseTimesDense, constant(A), arrays(shape=(3, 2)), name="sparse_mm"),
                   select=["GG5"]).rules[0]
    assert result.verdict == "pass" and "GG501" in result.checks_run, result.checks_skipped
    statuses = {c["status"] for c in result.safety_matrix["cells"]}
    assert statuses == {"right"}, result.safety_matrix["cells"]


def test_a_matrix_where_every_cell_raised_is_a_skip_not_a_pass(monkeypatch):
    """GG501 and GG502 that judged no cell established nothing: they are skipped with the first cell's message."""
    from gradguard.checker.contexts._engine import Cell, Engine

    monkeypatch.setattr(Engine, "run", lambda self, view, plan: Cell(self.name, "raised", message="RuntimeError: boom"))
    square = lambda x: x * x  # noqa: E731

    @rrule(square, arrays(shape=(3, 3)))
    def square_rrule(x):
        return x * x, lambda g: (2 * g * x,)

    result = check(square_rrule, select=["GG501", "GG502"]).rules[0]
    assert result.verdict == "pass" and result.checks_run == []
    assert {s["id"]: s["reason"] for s in result.checks_skipped} == {
        check_id: "no cell of the safety matrix was judged: every engine raised in every context "
                  f"(the first, tape[zero] in `{first}`: RuntimeError: boom)"
        for check_id, first in (("GG501", "output-used"), ("GG502", "tied-weights"))}

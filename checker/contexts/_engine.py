"""What an engine is to the safety matrix: one `Engine` object, and the `Cell` it fills per context.

An engine differentiates a context's program with the rule plugged in as that engine sees it. It is
described by data plus two functions:

* ``ops(view)``: the operations namespace the program runs against (`Ops`: a NumPy-like ``xp`` and the
  rule as a callable of that engine: a tape primitive, a `jax.custom_vjp`, a `torch.autograd.Function`);
* ``differentiate(view, plan, ops)``: the program's value and its gradient with respect to the plan's
  inputs (NumPy values), raising whatever the rule raised;
* ``runs_mutation``: whether a rule's declared in-place mutation really happens under it (JAX arrays are
  immutable, so a mutating rule's value there may differ by design);
* ``unused``: its cotangent convention for an unused output ("zero", "none" or "skip": the pullback gets
  zeros, None, or is never called);
* ``kinds``: the rule kinds it applies to, ``applies`` a further condition on the rule, ``available``
  why it cannot run here (None when it can); ``complex_conventions`` the conventions for complex tangents
  it shares ("chainrules", "jax": a rule's own, by its kind or its declaration, `complex_convention_of`);
  on complex values a rule of another convention is skipped, with ``complex_note`` as the reason;
* ``diagnose(view, plan)``: optional, an account of a wrong cell (the tape's watch mode);
* ``settings``: the run settings it reads from ``view.settings``, each with its allowed values;
* ``flushes_subnormals``: whether it reads subnormal numbers as zeros (XLA does), so that its program is
  another function than plain NumPy's where an input holds one.

`RuleView` is the rule as the engines see it within one matrix, with a per-engine-family cache for the
adapted rule and the run's engine settings (how JAX runs a program: `_jax_engine.MODES`). The registry of engines is `gradguard.checker.contexts._engines`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from gradguard.checker._memory import note_memory_error
from gradguard.checker.contexts._ops import Ops
from gradguard.checker.contexts._programs import Plan
from gradguard.checker.specs import RuleSpec, complex_convention_of
from gradguard.checker.trees import leaves
from gradguard.engines.errors import TraceError

__all__ = ["Engine", "Cell", "RuleView", "ALL_KINDS", "NOT_TORCH", "text", "scalar"]

ALL_KINDS = frozenset({"numpy", "jax", "torch"})
# The rule kinds our tape and JAX run: a torch.autograd.Function runs in PyTorch alone, and PyTorch's own
# protections (the version counter, materialised zeros) are what a program using it gets, so its matrix is the
# torch column's; a tape or JAX column would judge it in an engine it is never used in (an in-place forward with
# ctx.mark_dirty, which PyTorch guards, is unsafe on a tape without version counters).
NOT_TORCH = frozenset({"numpy", "jax"})


@dataclass
class Cell:
    engine: str
    status: str  # ran (before judging) | right | wrong | raised | skipped
    rel_error: float | None = None
    message: str | None = None
    diagnosis: str | None = None
    value: Any = None  # the program's value under this engine
    slope: float | None = None  # <gradient, v>

    def to_json(self, context: str) -> dict[str, Any]:
        return {"context": context, "engine": self.engine, "status": self.status, "rel_error": self.rel_error,
                "message": self.message, "diagnosis": self.diagnosis}


class RuleView:
    """The rule within one matrix: its name, an example input, and each engine family's adapted rule."""

    def __init__(self, rule: RuleSpec, name: str, example_args: tuple, output: Any = None,
                 settings: Mapping[str, Any] | None = None) -> None:
        self.rule = rule
        self.name = name
        self.example_args = example_args
        self.settings = dict(settings or {})  # engines' settings for this run (`_jax_engine.SETTING`)
        self.complex = any(np.iscomplexobj(v) for v in leaves((example_args, output))
                           if isinstance(v, (np.ndarray, np.generic, complex, float, int)))
        # The machine epsilon of the rule's least precise floating output (None: no such output): a program through
        # a rule that computes in float32 whatever its inputs (NeMo's RNN-T loss) resolves slopes only to float32's
        # rounding, whatever the program's own dtype (`_matrix._run_row`).
        self.computed_at = max((float(np.finfo(np.asarray(v).dtype).eps) for v in leaves(output)
                                if isinstance(v, (np.ndarray, np.generic)) and np.asarray(v).dtype.kind in "fc"),
                               default=None)
        self._adapted: dict[str, Any] = {}

    def adapted(self, family: str, make: Callable[["RuleView"], Any]) -> Any:
        """``make(self)`` once per engine family (a tape primitive, a JAX function, a torch Function)."""
        if family not in self._adapted:
            self._adapted[family] = make(self)
        return self._adapted[family]


def _always(rule: RuleSpec) -> bool:
    return True


def _nothing_missing() -> str | None:
    return None


@dataclass(frozen=True)
class Engine:
    name: str  # the matrix's column, e.g. "tape[zero]"
    family: str  # the engine it belongs to ("tape", "jax", "torch")
    label: str  # its name in messages ("the tape", "JAX", "PyTorch")
    ops: Callable[[RuleView], Ops] = field(repr=False)
    differentiate: Callable[[RuleView, Plan, Ops], tuple[float, tuple]] = field(repr=False)
    runs_mutation: bool
    unused: str  # "zero" | "none" | "skip"
    kinds: frozenset[str] = ALL_KINDS
    complex_conventions: frozenset[str] = frozenset()  # "chainrules" | "jax"
    complex_note: str = "does not convert conventions for complex tangents"
    applies: Callable[[RuleSpec], bool] = field(default=_always, repr=False)
    available: Callable[[], str | None] = field(default=_nothing_missing, repr=False)
    diagnose: Callable[[RuleView, Plan], str | None] | None = field(default=None, repr=False)
    settings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # its settings and their values
    flushes_subnormals: bool = False

    def applies_to(self, rule: RuleSpec) -> bool:
        """Whether this engine is a column of ``rule``'s matrix by default."""
        return rule.kind in self.kinds and self.applies(rule) and self.available() is None

    def run(self, view: RuleView, plan: Plan) -> Cell:
        """The program's value and gradients (a cell with status "ran"), or a raised or skipped cell."""
        if view.complex and complex_convention_of(view.rule) not in self.complex_conventions:
            return Cell(self.name, "skipped", message=f"complex values: the {self.name} adapter {self.complex_note}")
        missing = self.available()
        if missing:
            return Cell(self.name, "skipped", message=missing)
        try:
            ops = self.ops(view)
        except ImportError as exc:
            return Cell(self.name, "skipped", message=f"{self.label} is not available: {exc}")
        try:
            value, grads = self.differentiate(view, plan, ops)
        except TraceError:
            raise  # a context used an operation the engine lacks: gradguard's bug, not the rule's
        except Exception as exc:  # noqa: BLE001 - the rule raised inside the program
            note_memory_error(exc)
            return Cell(self.name, "raised", message=text(exc))
        return Cell(self.name, "ran", value=(value, grads))


def scalar(value: Any) -> float:
    return float(np.real(np.asarray(value)))


def text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"

"""Our reverse-mode tape AD over NumPy, with Zygote/ChainRules semantics.

    from gradguard.engines.tape import grad, primitive, tnp

    addone_ = primitive(addone_rrule, name="addone_")
    grad(lambda x: tnp.dot(x, x) + addone_(x), x)

Modules: `_tape` (Tracked values, nodes, the reverse sweep and the unused
policy), `_rules` (the built-in rules as data), `tnp` (the NumPy-like
namespace and NumPy dispatch), `_watch` (mutation fingerprints and
diagnoses), `_api` (the entry points), `_second` (second order of a NumPy rule:
its rrule and pullback run on Tracked arrays).

Pullbacks capture arrays by reference, so an in-place mutation after a
capture gives a silently wrong gradient, as in Zygote; ``watch=True`` names
the operation and the mutator. Unused outputs follow ``unused=`` ("zero" by
default, "none" or "skip"). Complex numbers follow ChainRules: a pullback is
the conjugate transpose.
"""

from gradguard.engines._within import register_within_gradient
from gradguard.engines.tape import tnp
from gradguard.engines.tape._api import TapeResult, grad, primitive, run_backward, value_and_grad, vjp
from gradguard.engines.tape._second import PullbackDerivative, pullback_derivative
from gradguard.engines.tape._tape import Escape, Tracked
from gradguard.engines.tape._watch import MutationDiagnosis, MutationWarning

__all__ = [
    "grad",
    "value_and_grad",
    "vjp",
    "run_backward",
    "primitive",
    "tnp",
    "Tracked",
    "TapeResult",
    "MutationDiagnosis",
    "MutationWarning",
    "is_tracing",
    "pullback_derivative",
    "PullbackDerivative",
    "Escape",
]


def is_tracing(x: object) -> bool:
    """True for a Tracked value while its trace is running (the tape's `within_gradient` predicate)."""
    return isinstance(x, Tracked) and x.tape.active


register_within_gradient(is_tracing)

"""Hypothesis searches for the runner: their settings, driving one, and shrinking a failure within budget.

:func:`_drive` runs one seeded Hypothesis search over a rule's inputs and maps Hypothesis' errors to the
runner's; :func:`_search` re-finds one failing check and shrinks its counterexample, for at most a number
of evaluations (deterministic) and seconds (a safety net), and says whether a budget cut it short
(:func:`_shrink_note` words that for the report). While it shrinks, a check is asked for its verdict only
(``Case.evidence``) and an evaluation that repeats an earlier one value for value takes its outcome
(:class:`_Remembering`); the input it keeps is checked once more with its evidence (:func:`_with_evidence`).
The runner (:mod:`gradguard.checker.runner`) decides what to search and writes the results; this module
only searches.
"""

from __future__ import annotations

import copy
import hashlib
import pickle
import time
import sysconfig
import traceback
from pathlib import Path
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, given, seed as hyp_seed, settings as hyp_settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky, HypothesisException, Unsatisfiable

from gradguard.checker._deadline import at_safe_point
from gradguard.checker._hypothesis import keyless, own_constants_only, shrink_deadline
from gradguard.checker._memory import RuleMemoryLimit, note_memory_error
from gradguard.checker.errors import SpecError
from gradguard.checker.case import Case, HypothesisDraws, ReplayDraws, ReplayExhausted, RuleRaised
from gradguard.checker.checks._state import (irreproducibility_seen, note_irreproducible, unreproducible,
                                             without_verdict)
from gradguard.checker.checks.registry import CheckInfo
from gradguard.checker.problems import Problem, Skip
from gradguard.checker.specs import RuleSpec
from gradguard.checker.trees import copy_tree, leaves
from gradguard.engines.errors import clause

if TYPE_CHECKING:
    from gradguard.checker.options import Options

__all__ = ["RuleTimeout"]


class _CheckFailed(Exception):
    pass


class _BudgetSpent(BaseException):
    """Ends a search early without a failure (BaseException: Hypothesis neither catches nor shrinks it)."""


class RuleTimeout(BaseException):
    """Raised in the main thread when a rule exceeds its time limit (BaseException: Hypothesis must not catch it)."""


class _SpecCannotGenerate(Exception):
    pass


class _InternalError(Exception):
    """A check could not finish: ``kind`` "InternalError" (a bug in gradguard's check, not in the rule) or
    "MemoryError" (memory ran out, the process's limit or the machine's: not a bug, not a finding)."""

    def __init__(self, message: str, tb: str, kind: str = "InternalError") -> None:
        super().__init__(message)
        self.tb = tb
        self.kind = kind


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, the members of exception groups (Hypothesis wraps what it meets twice in one) and their causes."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack.extend(getattr(e, "exceptions", ()) or ())
        stack.extend((e.__cause__, e.__context__))


def internal_error(where: str, rule_name: str, exc: BaseException) -> _InternalError:
    """The error for a check that raised ``exc`` in ``where`` ("check GG201", "the checks")."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if any(isinstance(e, MemoryError) for e in _chain(exc)):
        for e in _chain(exc):
            note_memory_error(e)  # over the rule's memory budget: check_rule reports the budget instead
        return _InternalError(f"MemoryError: memory ran out in {where} on rule {rule_name}; check it with smaller "
                              "inputs or give it more memory", tb, kind="MemoryError")
    return _InternalError(f"internal error in {where} on rule {rule_name}: {type(exc).__name__}: {exc}", tb)


_Failure = tuple[Case, list[Problem], "RuleRaised | None"]


class SkipReason(str):
    """Why a check did not apply to one case; ``rule_wide`` and ``here`` as :class:`Skip`'s."""

    def __new__(cls, reason: str, *, rule_wide: bool = False, here: str | None = None) -> "SkipReason":
        text = super().__new__(cls, reason)
        text.rule_wide = rule_wide
        text.here = here if here is not None else reason
        return text


def _run_one(info: CheckInfo, case: Case) -> tuple[list[Problem], RuleRaised | None] | SkipReason:
    """Problems found by one check on one case, or the reason it did not apply (a :class:`SkipReason`)."""
    at_safe_point()  # an expired time limit stops here, between two checks, not inside a library call
    try:
        problems = list(info.fn(case) or ())
    except Skip as skip:
        return SkipReason(str(skip), rule_wide=skip.rule_wide, here=skip.here)
    except RuleRaised as exc:
        return [exc.problem()], exc
    if problems and info.compares_calls and severity(info, problems) == "error":
        why = irreproducible_pullback(info, case)
        if why:
            return SkipReason(why)
    return problems, None


def _kept_input(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A copy of an input kept from an earlier check, for a search that starts from it: each argument deep-copied
    where it can be, else its arrays copied and the rest passed as it is, as the specs' own ``constant(...)`` passes
    it to every drawn input. An ODL operator holds its array module, which deepcopy refuses ("cannot pickle
    'module' object"), and a rule failing two checks crashed the second's search."""
    try:
        # in one call, so that arguments that share an object stay one (a module's bound method and that module's
        # parameters beside it, as PyG's InvertibleFunction takes them: copied apart, the backward's parameters were
        # not the ones its function used)
        return tuple(copy.deepcopy(tuple(args)))
    except Exception:  # noqa: BLE001 - some argument deepcopy cannot take: each one on its own
        pass
    out = []
    for a in args:
        try:
            out.append(copy.deepcopy(a))
        except Exception:  # noqa: BLE001 - an object deepcopy cannot take (a module, a lock, a C handle)
            out.append(copy_tree(a))
    return tuple(out)


def irreproducible_pullback(info: CheckInfo, case: Case | None, *, tries: int = 0) -> str:
    """The reason ``info`` (a check with ``compares_calls``) has no verdict of its own on this rule, or '': the
    rule's pullback did not reproduce its own result at an input of this rule's check, this one included. Asked once
    per drawn input and shared by its checks; ``tries`` > 0: asked afresh that many times, for a failure already
    kept; ``case`` None: only what earlier inputs showed. Then whatever difference between separate calls the check
    saw could be that alone; GG403 and GG406 report the irreproducibility itself."""
    why = irreproducibility_seen()
    if not why and case is not None:
        why = _asked_afresh(case, tries) if tries else case.reproduction(unreproducible)
    if not why:
        return ""
    note_irreproducible(why)
    return without_verdict(why)


def _asked_afresh(case: Case, tries: int) -> str:
    """`unreproducible` asked of ``case`` up to ``tries`` times, until one shows it ('' where none does)."""
    for _ in range(tries):
        try:
            why = unreproducible(case)
        except Exception:  # noqa: BLE001 - the asking failed (a kept case's rule state): nothing shown
            return ""
        if why:
            return why
    return ""


def _hypothesis_settings(options: Options) -> Callable[[Any], Any]:
    return hyp_settings(
        max_examples=options.max_examples,
        database=None,
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
        print_blob=False,
    )


def _drive(rule: RuleSpec, options: Options, body: Callable[[Any, Any], None], label: str,
           inputs: Any = None) -> None:
    """Run a Hypothesis search over the rule's inputs (or ``inputs``), mapping Hypothesis' errors to ours."""
    strategy = rule.args_strategy if inputs is None else inputs

    crashed: list[BaseException] = []  # the checks' own exceptions (gradguard's bugs), as Hypothesis met them

    def checked(args: Any, data: Any) -> None:  # its frame tells the checks' exceptions from the specs' drawing's
        try:
            body(args, data)
        except (_CheckFailed, _BudgetSpent, HypothesisException, Flaky, RuleTimeout, RuleMemoryLimit, SpecError):
            raise
        except Exception as exc:
            # Hypothesis' own control flow (FlakyStrategyDefinition from a check's draws on a replay) is not a crash
            if not type(exc).__module__.startswith("hypothesis"):
                crashed.append(exc)
            raise

    search = keyless(_hypothesis_settings(options)(hyp_seed(options.seed)(given(strategy, st.data())(checked))))
    try:
        # (check_rule silences floating-point warnings for the whole rule: the values that caused them are
        # what GG206 and the other checks judge.)
        with own_constants_only():
            search()
    except (_CheckFailed, _BudgetSpent):
        pass
    except Flaky as exc:
        if any(isinstance(e, MemoryError) for e in _chain(exc)):  # memory ran out once: no verdict to keep
            raise internal_error(label, rule.name, exc) from None
        if crashed:
            # A check's own exception that did not replay: netket's expect gave GG202 a float0 tangent it could not
            # multiply at 3 of 20 inputs, the replays ended in FlakyStrategyDefinition, and the report said GG202
            # and GG203 passed with GG203 never called. Nothing was judged: gradguard's bug, reported as such.
            first = crashed[0]
            raise (first if isinstance(first, _InternalError) else internal_error(label, rule.name, first)) from None
        # the failure did not replay (a nondeterministic rule): the last failing example seen is kept
    except Unsatisfiable as exc:
        raise _SpecCannotGenerate(
            f"the argument specs of {rule.name} could not generate an input ({exc}). Loosen the specs' filters or bounds."
        ) from None
    except (RuleTimeout, RuleMemoryLimit, KeyboardInterrupt):
        raise
    except HypothesisException as exc:
        if any(isinstance(e, MemoryError) for e in _chain(exc)):
            raise internal_error(label, rule.name, exc) from None
        raise _SpecCannotGenerate(f"could not draw inputs for {rule.name}: {clause(exc)}. Check the argument specs.") from None
    except _InternalError:
        raise
    except Exception as exc:
        if not _raised_in(exc, checked.__code__):
            if isinstance(exc, SpecError):  # a draw the checks cannot take (a sparse tensor to differentiate)
                raise _SpecCannotGenerate(f"the argument specs of {rule.name}: {exc}") from None
            # Raised before the checks got the input: by a function the rule's own specs call while drawing it (a
            # .filter that inverts a float16 matrix, which NumPy's linalg refuses)
            raise _SpecCannotGenerate(
                f"could not draw inputs for {rule.name}: its argument specs raised {type(exc).__name__}: {exc} "
                f"(in {_innermost(exc)}). Fix the function the specs call (a .filter, .map or .flatmap), or the spec "
                "whose values it cannot take."
            ) from None
        raise internal_error(label, rule.name, exc) from None  # a bug in gradguard's check, not in the rule


def _raised_in(exc: BaseException, code: Any) -> bool:
    """Whether ``exc`` passed through a frame running ``code`` on its way up."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return True
        tb = tb.tb_next
    return False


def _innermost(exc: BaseException) -> str:
    """Where ``exc`` was raised, as ``function (file:line)``: the innermost frame of its traceback outside installed
    packages and the standard library (the user's own function the spec calls), else the innermost of all."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "an unknown place"
    installed = {str(Path(sysconfig.get_paths()[key]).resolve()) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    own = [f for f in frames if not any(str(Path(f.filename).resolve()).startswith(root) for root in installed)]
    last = (own or frames)[-1]
    return f"{last.name} ({Path(last.filename).name}:{last.lineno})"


def _shrink_note(options: Options, spent_earlier: bool) -> str:
    seconds = "no time limit" if options.shrink_budget_s is None else f"{options.shrink_budget_s:g} s per rule"
    steps = "no step limit" if options.shrink_steps is None else f"{options.shrink_steps} evaluations per check"
    budget = f"the shrinking budget ({seconds}, {steps}; raise it with check(shrink_budget_s=, shrink_steps=))"
    if spent_earlier:
        return f"not shrunk: {budget} was spent on this rule's earlier checks; this is the first failing input drawn"
    return f"stopped by {budget}: the smallest failing input found so far"


@dataclass
class _Outcome:
    ran: int = 0
    skip_reason: str | None = None
    failure: _Failure | None = None
    shrink_s: float = 0.0  # time from the first failure to the end of the search
    stopped: bool = False  # a shrinking budget ran out


def severity(info: CheckInfo, problems: list[Problem]) -> str:
    """"error" when any problem has error severity (its own, or the check's), else "warning"."""
    return "error" if any((p.severity or info.severity) == "error" for p in problems) else "warning"


def _with_evidence(rule: RuleSpec, info: CheckInfo, kept: _Failure, errors_only: bool) -> _Failure:
    """The check run once more on the input a search kept, with the same draws and its evidence (a search
    asks only for the verdict at each step, see :class:`Case`). Where it does not fail that way again (a
    nondeterministic rule), the kept failure stands, with the problems its verdict established; so it does
    where the check never asked whether to leave evidence out."""
    if not kept[0].evidence_asked:
        return kept
    case = Case(rule, kept[0].args, ReplayDraws([value for _, value in kept[0].record]))
    try:
        found = _run_one(info, case)
    except ReplayExhausted:  # it drew more than the kept run did: the rule took another path this time
        return kept
    except (RuleTimeout, RuleMemoryLimit, KeyboardInterrupt):
        raise
    except Exception as exc:
        raise internal_error(f"check {info.id}", rule.name, exc) from None
    if isinstance(found, str):
        return kept
    problems, raised = found
    if not problems or (errors_only and severity(info, problems) != "error"):
        return kept
    return case, problems, raised


_PLAIN = (np.ndarray, np.generic, float, int, complex, str, type(None))
REMEMBERED_BYTES = 1 << 16  # larger values are not remembered: repeats matter where shrinking has made inputs small


def _value_key(value: Any) -> bytes | None:
    """Bytes that are equal only for equal values (to the bit, aliasing included): the digest of the pickle
    of a container of arrays, numbers and strings of at most REMEMBERED_BYTES; None for anything else, whose
    pickle need not hold all that a rule may read, and for larger values (a search over a 5000x5000 input
    would otherwise serialise and keep every evaluation's copy of it)."""
    size = 0
    for leaf in leaves(value):
        if not isinstance(leaf, _PLAIN) or (isinstance(leaf, np.ndarray) and leaf.dtype.hasobject):
            return None
        size += leaf.nbytes if isinstance(leaf, (np.ndarray, np.generic)) else len(leaf) if isinstance(leaf, str) else 16
        if size > REMEMBERED_BYTES:
            return None
    try:
        return hashlib.blake2b(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), digest_size=20).digest()
    except Exception:  # noqa: BLE001 - a value pickle refuses is just not remembered
        return None


_Seen = tuple[bytes, tuple[bytes, ...]]  # an evaluation's input and its draws, in order


class _Repeated(BaseException):
    """The draws of an evaluation so far are all the draws of an earlier one on the same input (a
    BaseException: no handler of a check may catch it)."""

    def __init__(self, seen: _Seen) -> None:
        self.seen = seen


class _Remembering:
    """Draws that stop an evaluation once its input and draws are those of an earlier, finished evaluation.

    Hypothesis does not run a choice sequence twice, but its shrinker tries sequences that give the same
    values (a cotangent element shrunk from 0.1 to 0.05 is 0 either way): a deterministic check then makes
    the same calls and ends the same way, so the earlier evaluation's outcome is taken and the rest of this
    one (its finite differences) is not run. The draws themselves are made, so Hypothesis sees the same
    test case."""

    def __init__(self, draws: HypothesisDraws, args: bytes, finished: dict[_Seen, Any]) -> None:
        self._draws, self._args, self._finished = draws, args, finished
        self.drawn: list[bytes] | None = []

    def draw(self, strategy: st.SearchStrategy, label: str) -> Any:
        value = self._draws.draw(strategy, label)
        if self.drawn is not None:
            key = _value_key(value)
            if key is None:
                self.drawn = None  # not remembered from here on
            else:
                self.drawn.append(label.encode() + b"=" + key)
                seen = (self._args, tuple(self.drawn))
                if seen in self._finished:
                    raise _Repeated(seen)
        return value


def _search(rule: RuleSpec, info: CheckInfo, options: Options, budget_s: float | None = None,
            at: tuple[Any, ...] | None = None, errors_only: bool = False) -> _Outcome:
    """A search for one failing check: Hypothesis finds the failure again and shrinks it, for at most
    ``budget_s`` seconds and ``options.shrink_steps`` evaluations of the check. ``at``: the input is fixed
    to these arguments (a copy each time) and only the check's own draws vary. ``errors_only``: only an
    error-severity failure counts, so that a warning the same check gives elsewhere does not replace it."""
    outcome = _Outcome()
    shrink_started: float | None = None
    steps = 0
    finished: dict[_Seen, tuple[Case, Any]] = {}  # evaluations by input and draws: see _Remembering

    def _evaluate(args: tuple[Any, ...], data: HypothesisDraws) -> tuple[Case, Any]:
        key = _value_key(args)
        if key is not None and (key, ()) in finished:
            at_safe_point()
            return finished[(key, ())]
        draws = data if key is None else _Remembering(data, key, finished)
        case = Case(rule, args, draws, evidence=False)  # the verdict only: see _with_evidence
        try:
            found = _run_one(info, case)
        except _Repeated as again:
            return finished[again.seen]
        if isinstance(draws, _Remembering) and draws.drawn is not None:
            finished[(key, tuple(draws.drawn))] = (case, found)
        return case, found

    def body(args: Any, data: Any) -> None:
        nonlocal shrink_started, steps
        if shrink_started is not None:
            steps += 1
            if options.shrink_steps is not None and steps > options.shrink_steps:
                outcome.stopped = True
                raise _BudgetSpent()
        case, found = _evaluate(tuple(args), HypothesisDraws(data))
        if isinstance(found, str):
            outcome.skip_reason = found
            return
        problems, raised = found
        if problems and (not errors_only or severity(info, problems) == "error"):
            outcome.failure = (case, problems, raised)
            if shrink_started is None:
                shrink_started = time.perf_counter()
            raise _CheckFailed(info.id)
        outcome.ran += 1

    inputs = None if at is None else st.builds(_kept_input, st.just(at))
    with shrink_deadline(budget_s):
        _drive(rule, options, body, f"check {info.id}", inputs)
    if outcome.failure is not None:
        outcome.failure = _with_evidence(rule, info, outcome.failure, errors_only)
    if shrink_started is not None:
        outcome.shrink_s = time.perf_counter() - shrink_started
        outcome.stopped = outcome.stopped or (budget_s is not None and outcome.shrink_s >= budget_s)
    return outcome

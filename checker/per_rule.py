"""Checking one rule: the survey of drawn inputs, the per-rule checks, findings with their reproducers.

:func:`check_rule` runs every selected check on one rule. One Hypothesis search (the survey) runs every
per-input check on each drawn input; only the checks that failed get a search of their own, which shrinks
the failure (:mod:`gradguard.checker._search` drives Hypothesis). Structural contract checks
(``gates=...``) run first; when one fails, the checks that depend on the structure are skipped with the
reason, so the first message is the real cause (a custom_jvp's forward-mode checks still run where only its
pullback failed). Per-rule checks (the contexts' safety matrix) run last.
Checks return problems; only this module turns them into findings, reproducer scripts and the stored
safety matrix. Verdicts are deterministic for a seed.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager

import numpy as np
from hypothesis.errors import HypothesisException

from gradguard.checker import random_state, reproducer
from gradguard.checker._deadline import STUCK_EXIT, _Budget, at_safe_point
from gradguard.checker._deadline import time_limit as _time_limit
from gradguard.checker._memory import MemoryLimit, RuleMemoryLimit
from gradguard.checker._search import (RuleTimeout, SkipReason, _BudgetSpent, _drive, _Failure, _InternalError, _run_one,
                                       _search, _shrink_note, _SpecCannotGenerate, internal_error, irreproducible_pullback,
                                       severity)
from gradguard.checker.case import Case, DeviceMemoryExhausted, HypothesisDraws, RuleRaised, Shared, UnsupportedOutput
from gradguard.checker.checks import CHECKS, CheckInfo, Problem, Skip, check_prefixes
from gradguard.checker.checks._state import irreproducibility_scope
from gradguard.checker.inputs import COUNTEREXAMPLE_THRESHOLD, format_call, show
from gradguard.checker.options import SAFETY_MATRIX, Options, PerRule
from gradguard.checker.raised_warnings import collected
from gradguard.checker.errors import SpecError
from gradguard.checker.report import LEFT_OUT, Finding, RuleResult
from gradguard.checker.specs import RUN_UNUSED_COTANGENT, RuleSpec, ignores
from gradguard.engines.errors import NoNumpyDtype, PlatformUnavailable, ReverseModeError
from gradguard.engines.jax_engine._relay import callbacks_quiet

__all__ = ["check_rule", "time_limit", "RuleTimeout", "FULL_EXAMPLES_UP_TO", "STUCK_HOOKS",
           "STUCK_FOLDER", "stuck_reason"]

# Large inputs get fewer examples, decided by the size of the first (seeded) input so that verdicts stay
# deterministic: up to this many array elements a rule gets every example; beyond it, proportionally
# fewer (one at 10**6 elements, which keeps the isolation checks near 50 forward+pullback evaluations).
FULL_EXAMPLES_UP_TO = 2**14


def check_rule(rule: RuleSpec, ids: list[str], options: Options) -> RuleResult:
    start = time.perf_counter()
    result = RuleResult(
        name=rule.name,
        module=rule.module,
        source_file=_relative(rule.source_file, options.root),
        source_lines=list(rule.source_lines) if rule.source_lines else None,
        kind=rule.kind,
    )
    try:
        check_prefixes("ignore", list(rule.ignore), SpecError)  # the declaration's ids, against the registry
    except SpecError as exc:
        result.verdict = "error"
        result.error = {"type": "SpecError", "traceback": "", "message": f"the declaration of {rule.name}: {exc}"}
        return result
    infos = [CHECKS[i] for i in ids if not ignores(rule, i)]
    result.checks_skipped.extend({"id": i, "reason": f"{LEFT_OUT} (ignore={list(rule.ignore)!r})"}
                                 for i in ids if ignores(rule, i))
    rule.run_state.clear()
    if options.unused_cotangent is not None:
        rule.run_state[RUN_UNUSED_COTANGENT] = options.unused_cotangent
    memory = MemoryLimit(options.memory_limit_mb)
    try:
        # Adversarial inputs make floating-point warnings by the hundred, from the rule and from the checker's
        # own programs on its values: none is a finding, and they would bury the report.
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            # Loading JAX is the process's cost, paid once: it is not the rule's time (a first rule with a small
            # limit timed out in the import, with no check begun) nor its memory.
            _prepare_engine(rule, [info.id for info in infos], options.jax_cache_dir)
        with time_limit(options.rule_timeout_s, stuck=_stop_stuck(rule, options)), np.errstate(all="ignore"), \
                collected(result.python_warnings, options.root), callbacks_quiet(), random_state.kept():
            warnings.simplefilter("ignore", RuntimeWarning)
            with memory:  # its growth counts from here: loading JAX above is not the rule's
                _run_checks(rule, infos, options, result)
                at_safe_point()  # a budget spent in the last call of the rule's code
    except RuleMemoryLimit as exc:
        _over_memory(result, exc)
    except RuleTimeout:
        result.verdict = "error"
        result.error = {"type": "Timeout", "message": _timeout_message(rule, options), "traceback": ""}
    except _SpecCannotGenerate as exc:
        result.verdict = "error"
        result.error = {"type": "SpecError", "message": str(exc), "traceback": ""}
    except UnsupportedOutput as exc:  # this rule gets an error naming the value; the other rules are checked
        result.verdict = "error"
        result.error = {"type": "UnsupportedOutput", "message": str(exc), "traceback": ""}
    except NoNumpyDtype as exc:
        result.verdict = "error"
        result.error = {"type": "UnsupportedOutput", "traceback": "", "message": (
            f"{rule.name} computes a {exc.dtype} tensor, a dtype NumPy has no counterpart for; gradguard's checks "
            "compute with NumPy, so they read tensors of float16, float32, float64 and the complex dtypes only. To "
            "check this rule, declare a Function that returns its result cast to float32 (.float()).")}
    except DeviceMemoryExhausted as exc:  # the shared GPU's memory ran out: no verdict, not a finding
        result.verdict = "error"
        result.error = {"type": "DeviceMemory", "message": str(exc), "traceback": _cause_traceback(exc)}
    except PlatformUnavailable as exc:  # e.g. --device gpu where JAX sees none: this JAX rule errors, others run
        result.verdict = "error"
        result.error = {"type": "PlatformUnavailable", "message": str(exc), "traceback": ""}
    except _InternalError as exc:
        if exc.kind == "MemoryError" and memory.spent is not None:  # memory ran out over the rule's budget
            _over_memory(result, memory.spent)
        else:
            result.verdict = "error"
            result.error = {"type": exc.kind, "message": str(exc), "traceback": exc.tb}
    rule.run_state.pop(RUN_UNUSED_COTANGENT, None)  # the run's default must not outlive the run
    if memory.spent is not None:
        memory.release()  # what the stopped rule held (its frames, through the exception) goes back now
    result.duration_s = round(time.perf_counter() - start, 4)
    if result.verdict != "error":
        result.verdict = "fail" if any(f.severity == "error" for f in result.findings) else "pass"
    return result


def _cause_traceback(exc: BaseException) -> str:
    cause = exc.__cause__
    return "".join(traceback.format_exception(type(cause), cause, cause.__traceback__)) if cause else ""


INHERITED_MAPS = "ProcessMapsExhausted"  # RuleResult.error type: stopped by maps an earlier rule left in the process


def _over_memory(result: RuleResult, exc: RuleMemoryLimit) -> None:
    result.verdict = "error"
    if exc.maps and exc.inherited:
        # Not this rule's doing: an eager JAX rule checked before it in this process left tens of thousands of maps
        # behind (jax_fdm's solvers, 57 to 127 per call), and every rule after it was stopped at once and blamed.
        result.error = {"type": INHERITED_MAPS, "traceback": "", "message": (
            f"not checked: {exc.measured}. This rule mapped too few of them to reach that line from a fresh start: "
            "the rest were there before it, mapped by the calls of rules checked before it in the same process, so the "
            "limit says nothing about this rule; a run checks such a rule again in a process of its own. Alone: "
            "gradguard check FILE::NAME")}
        return
    if exc.maps:
        result.error = {"type": "MemoryLimit", "traceback": "", "message": (
            f"stopped before every check had run: {exc.measured}. A process at that limit can map no more memory "
            "whatever its size, and crashes when it needs some (JAX's compiler first); the rule's calls map memory "
            "they do not unmap (an eager JAX call that compiles afresh on every call keeps its code mapped). Check the "
            "rule with fewer inputs (--max-examples), call it under jax.jit, or raise vm.max_map_count (sysctl)")}
        return
    result.error = {
        "type": "MemoryLimit",
        "message": f"exceeded the {exc.budget_mb:g} MB per-rule memory limit before every check had run: "
        f"{exc.measured}; raise it with --memory-limit MB (check(memory_limit_mb=), memory-limit in "
        "[tool.gradguard]; 0: no limit), or check the rule with smaller inputs",
        "traceback": "",
    }


def _prepare_engine(rule: RuleSpec, ids: list[str], jax_cache_dir: str | None = None) -> None:
    """Load JAX on the requested device (GRADGUARD_DEVICE) before the survey's clock starts.

    A JAX rule needs it (PlatformUnavailable: this rule errors, the others
    run); a NumPy rule only for the JAX checks (GG203), which skip with the
    reason when the device is missing.
    """
    if rule.kind != "jax" and not any(CHECKS[i].extra.get("needs_jax") for i in ids):
        return
    from gradguard.checker.jax_rules import ensure_device

    if jax_cache_dir is not None:
        from gradguard.engines.jax_engine import use_compilation_cache

        use_compilation_cache(jax_cache_dir)
    try:
        ensure_device()
    except PlatformUnavailable:
        if rule.kind == "jax":
            raise


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")

# RuleSpec.run_state key: what the rule's checking was doing (`_Stage`), for a time limit's message to name.
_STAGE = "stage"


@dataclass
class _Stage:
    what: str
    check_id: str | None = None  # the check that was running, where one check alone was


def _timeout_message(rule: RuleSpec, options: Options) -> str:
    """The Timeout error's text: the limit, what the rule's checking was doing when it ran out, and the ways out."""
    stage = rule.run_state.get(_STAGE)
    where = f" in {stage.what}" if stage is not None else ""
    leave_out = (f", or leave {stage.check_id} out for this rule (ignore=[\"{stage.check_id}\"] in its declaration)"
                 if stage is not None and stage.check_id is not None else "")
    return (f"exceeded the {options.rule_timeout_s:g} s per-rule time limit{where}, before every check had run (the "
            "checker's own time: its threads' waits for a CPU held by other processes do not count, up to 3x the "
            "limit in wall time); raise it with --timeout SECONDS (check(rule_timeout_s=); 0: no limit), draw fewer "
            f"inputs with --max-examples{leave_out}")


def _run_checks(rule: RuleSpec, infos: list[CheckInfo], options: Options, result: RuleResult) -> None:
    with irreproducibility_scope():
        _run_checks_in_scope(rule, infos, options, result)


# Times a kept failure of a check that compares separate calls asks afresh whether the pullback reproduces its
# result, where no input of the search showed that it does not (a random pullback can agree with itself by chance).
IRREPRODUCIBLE_TRIES = 3


def _run_checks_in_scope(rule: RuleSpec, infos: list[CheckInfo], options: Options, result: RuleResult) -> None:
    applicable = []
    for info in infos:
        if rule.kind not in info.kinds:
            result.checks_skipped.append({"id": info.id, "reason": f"does not apply to {rule.kind} rules"})
        else:
            applicable.append(info)
    per_input = [i for i in applicable if not i.per_rule]
    # One search runs every check on each drawn input (generation is the expensive part);
    # only the checks that failed get a search of their own, which shrinks the failure.
    survey = _survey(rule, per_input, options)
    result.examples = survey.examples
    result.examples_cut = _examples_cut(survey, options)
    rule.run_state.pop(_STAGE, None)  # each stage below names itself

    gate_failed: tuple[str, str] | None = None  # the first failed gate's id, and what it shows cannot run
    raised_messages: set[str] = set()
    shared: dict[str, Any] = {}
    shrink_left = options.shrink_budget_s  # this rule's shrinking time, shared by its failing checks
    shrunk_args: tuple[Any, ...] | None = None  # the first failing check's shrunk input, tried first by the others
    for info in applicable:
        if _stopped(info, gate_failed):
            result.checks_skipped.append({"id": info.id, "reason": (
                f"skipped because {gate_failed[0]} failed: the other checks need the forward and the pullback to "
                "run and to return what they must; fix that first")})
            continue
        if info.per_rule:
            rule.run_state[_STAGE] = _Stage(f"{info.id} ({info.title})", info.id)
            _run_per_rule(rule, info, options, result, shared)
            continue
        first_failure = survey.failures.get(info.id) or survey.warnings.get(info.id)
        judged = first_failure is not None or survey.ran.get(info.id, 0) > 0
        if judged and info.compares_calls and (why := irreproducible_pullback(info, None)):
            result.checks_skipped.append({"id": info.id, "reason": why})  # passed or failed, it proved nothing
            continue
        if first_failure is None and survey.ran.get(info.id, 0) == 0 and info.id in survey.skip_reasons:
            result.checks_skipped.append({"id": info.id, "reason": survey.skip_reasons[info.id]})
            continue
        result.checks_run.append(info.id)
        if survey.skipped.get(info.id):  # judged on some inputs only: say on how many, and why not the others
            result.checks_partial.append({"id": info.id, "judged": survey.ran.get(info.id, 0),
                                          "skipped": survey.skipped[info.id], "reason": survey.skip_reasons[info.id].here})
        if first_failure is None:
            continue
        # Shrinking re-runs the check many times: worth it for inputs people can read, not for
        # seed-filled large arrays whose evaluations are expensive.
        shrinkable = survey.cap >= options.max_examples
        note = None
        failure = None
        errors_only = severity(info, first_failure[1]) == "error"
        if shrinkable and shrink_left is not None and shrink_left <= 0:
            note = _shrink_note(options, spent_earlier=bool(options.shrink_budget_s))
        elif shrinkable:
            rule.run_state[_STAGE] = _Stage(f"the search for {info.id}'s smallest failing input", info.id)
            # Arrays are what is slow to shrink: when an earlier check's shrunk input fails this check too,
            # only this check's own draws (cotangents, directions) are shrunk.
            searched = (_search(rule, info, options, shrink_left, at=shrunk_args, errors_only=errors_only)
                        if shrunk_args is not None else None)
            if searched is None or searched.failure is None:
                searched = _search(rule, info, options, shrink_left, errors_only=errors_only)
            failure = searched.failure
            if shrink_left is not None:
                shrink_left -= searched.shrink_s
            note = _shrink_note(options, spent_earlier=False) if searched.stopped else "complete"
            if failure is not None and shrunk_args is None:
                shrunk_args = failure[0].args
        if failure is None:
            failure = first_failure
            if shrinkable and note == "complete":
                note = None  # the search did not find it again (a flaky rule): the first failure, as drawn
        case, problems, raised = failure
        if info.compares_calls and raised is None and severity(info, problems) == "error":
            why = irreproducible_pullback(info, case, tries=IRREPRODUCIBLE_TRIES)
            if why:
                result.checks_run.remove(info.id)
                result.checks_skipped.append({"id": info.id, "reason": why})
                continue
        if raised is not None:
            # An object's address in the message (KeyError: <matmul object at 0x7f92...>) differs between the calls
            # of two checks: the same crash all the same.
            key = _ADDRESS.sub("0x?", f"{raised.phase}:{type(raised.exc).__name__}:{raised.exc}")
            if key in raised_messages:
                continue  # the same crash, already reported by an earlier check
            raised_messages.add(key)
        for problem in problems:
            result.findings.append(_finding(rule, info, case, problem, options, shrinking=note))
        if info.gates and gate_failed is None:
            gate_failed = (info.id, _cannot_run(info, raised))


def _stopped(info: CheckInfo, gate: tuple[str, str] | None) -> bool:
    """Whether ``info`` cannot run after ``gate`` (id, what cannot run) failed: gates always run (each reports its
    own cause); where only reverse mode cannot run, the checks of forward mode still do (a custom_jvp whose jvp
    rule JAX cannot transpose has a jvp to judge all the same)."""
    if gate is None or info.gates:
        return False
    return not (info.forward_only and gate[1] == "pullback")


def _cannot_run(gate: CheckInfo, raised: RuleRaised | None) -> str:
    """What a failure of ``gate`` shows cannot run: its own kind, or reverse mode alone where the rule raised a
    :class:`ReverseModeError` (a custom_jvp's forward, as the checker calls it, is ``jax.vjp``, which linearizes
    the jvp rule: GG101 reports that failure, and the function and its jvp still run)."""
    if raised is not None and isinstance(raised.exc, ReverseModeError):
        return "pullback"
    return gate.gates or "forward"


@dataclass
class _Survey:
    examples: int = 0
    cap: int = 0  # examples this rule gets, from the size of its first input
    size: int = 0  # array elements of its first input
    budget_spent: bool = False  # the input budget (Options.input_budget_s) stopped the drawing before the cap
    ran: dict[str, int] = field(default_factory=dict)
    skip_reasons: dict[str, SkipReason] = field(default_factory=dict)  # the first input's (a rule-wide one wins)
    skipped: dict[str, int] = field(default_factory=dict)  # inputs where a check skipped (not rule-wide)
    voided: set[str] = field(default_factory=set)  # checks a rule-wide Skip took off this rule (Skip.rule_wide)
    failures: dict[str, _Failure] = field(default_factory=dict)
    # Problems of warning severity only: kept, while the search goes on for an error from the same check.
    warnings: dict[str, _Failure] = field(default_factory=dict)


def _example_cap(size: int, max_examples: int) -> int:
    """Examples for a rule whose first input has ``size`` array elements: all of them for small inputs, fewer for
    large ones."""
    if size <= FULL_EXAMPLES_UP_TO:
        return max_examples
    return max(1, max_examples * FULL_EXAMPLES_UP_TO // size)


def _input_size(args: Any) -> int:
    from gradguard.checker.trees import leaves

    return int(sum(np.size(x) for x in leaves(tuple(args)) if isinstance(x, np.ndarray)))


def _examples_cut(survey: _Survey, options: Options) -> dict[str, Any] | None:
    """Why the rule was checked on fewer inputs than ``--max-examples`` asks, where it was: the input budget ran
    out (load-independent, but a property of the machine's speed), or its inputs are large (deterministic)."""
    if survey.budget_spent:
        return {"planned": survey.cap, "reason": "input budget", "message": (
            f"checked on {survey.examples} of {survey.cap} inputs: the input budget, {options.input_budget_s:g} s of "
            "checking per rule (the checker's own time), was spent before the next input was drawn; raise it with "
            "--input-budget SECONDS (check(input_budget_s=), input-budget in [tool.gradguard]; 0: no limit)")}
    if survey.examples and survey.cap < options.max_examples and survey.examples == survey.cap:
        return {"planned": options.max_examples, "reason": "input size", "message": (
            f"checked on {survey.cap} of {options.max_examples} inputs: its first input has {survey.size:,} array "
            f"elements, and a rule whose inputs have more than {FULL_EXAMPLES_UP_TO:,} gets proportionally fewer "
            "(--max-examples raises them in proportion)")}
    return None


def _survey(rule: RuleSpec, infos: list[CheckInfo], options: Options) -> _Survey:
    survey = _Survey()
    if not infos:
        return survey

    budget = _Budget()  # the checker's own time, as the rule's time limit counts it (gradguard.checker._deadline)

    def body(args: Any, data: Any) -> None:
        if survey.examples == 0:
            survey.size = _input_size(args)
            survey.cap = _example_cap(survey.size, options.max_examples)
        elif survey.examples >= survey.cap:
            raise _BudgetSpent()
        elif options.input_budget_s is not None and budget.over(time.monotonic(), options.input_budget_s):
            survey.budget_spent = True
            raise _BudgetSpent()
        survey.examples += 1
        rule.run_state[_STAGE] = _Stage(f"the checks of each drawn input, at input {survey.examples} of "
                                        f"{survey.cap}")
        gate_failed: tuple[str, str] | None = None
        draws = HypothesisDraws(data)
        shared = Shared()  # this input's first forward call and first pullback, made once for all checks
        for info in infos:
            if info.id in survey.failures or info.id in survey.voided or _stopped(info, gate_failed):
                continue
            case = Case(rule, tuple(args), draws, shared)
            try:
                outcome = _run_one(info, case)
            except (RuleTimeout, RuleMemoryLimit, KeyboardInterrupt, HypothesisException):
                raise  # Hypothesis' own (a check's draw that does not replay) is the search's to handle, no crash
            except Exception as exc:
                raise internal_error(f"check {info.id}", rule.name, exc) from None
            if isinstance(outcome, str):
                if outcome.rule_wide:  # the inputs where it ran established nothing either
                    survey.voided.add(info.id)
                    survey.ran.pop(info.id, None)
                    survey.skipped.pop(info.id, None)
                    survey.warnings.pop(info.id, None)
                    survey.skip_reasons[info.id] = outcome
                else:
                    survey.skip_reasons.setdefault(info.id, outcome)
                    survey.skipped[info.id] = survey.skipped.get(info.id, 0) + 1
                continue
            survey.ran[info.id] = survey.ran.get(info.id, 0) + 1
            problems, raised = outcome
            if problems and severity(info, problems) == "warning":
                survey.warnings.setdefault(info.id, (case, problems, raised))
            elif problems:
                survey.failures[info.id] = (case, problems, raised)
                if info.gates and gate_failed is None:
                    gate_failed = (info.id, _cannot_run(info, raised))

    _drive(rule, options, body, "the checks")
    return survey


def _run_per_rule(rule: RuleSpec, info: CheckInfo, options: Options, result: RuleResult, shared: dict[str, Any]) -> None:
    at_safe_point()
    ctx = PerRule(rule=rule, options=options, shared=shared)
    try:
        found = list(info.fn(ctx) or ())
    except Skip as skip:
        _keep_matrix(shared, result)
        result.checks_skipped.append({"id": info.id, "reason": str(skip)})
        return
    except (RuleTimeout, RuleMemoryLimit, KeyboardInterrupt):
        raise
    except Exception as exc:
        raise internal_error(f"check {info.id}", rule.name, exc) from None
    _keep_matrix(shared, result)
    result.checks_run.append(info.id)
    for item in found:
        if isinstance(item, Finding):
            result.findings.append(item)
        else:
            result.findings.append(_finding(rule, info, None, item, options))


def _keep_matrix(shared: dict[str, Any], result: RuleResult) -> None:
    """The safety matrix a per-rule check computed (once per rule) goes into the rule's result."""
    if SAFETY_MATRIX in shared and result.safety_matrix is None:
        result.safety_matrix = shared[SAFETY_MATRIX].to_json()


def draws_by_label(record: list[tuple[str, Any]], derived: list[tuple[str, Any]] = ()) -> dict[str, str]:
    """The drawn values a counterexample shows, by label, then the values a check used in place of some of them
    (``Case.derived``); a label drawn again gets its count ("batch input", "batch input (2)"), so that no draw is
    lost from the report (GG602 draws one "batch input" per example)."""
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for label, value in [*record, *derived]:
        seen[label] = seen.get(label, 0) + 1
        out[label if seen[label] == 1 else f"{label} ({seen[label]})"] = show(value, threshold=COUNTEREXAMPLE_THRESHOLD)
    return out


def _finding(rule: RuleSpec, info: CheckInfo, case: Case | None, problem: Problem, options: Options,
             shrinking: str | None = None) -> Finding:
    counterexample = None
    script = None
    if problem.replay is not None:
        script = reproducer.context_script(rule, info.id, problem.replay.context, list(problem.replay.engines),
                                           seed=options.seed, message=problem.message, root=options.root)
    if case is not None:
        counterexample = {
            "call": format_call(rule.primal, case.args, getattr(rule.primal, "__name__", rule.name)),
            "args": [show(a, threshold=COUNTEREXAMPLE_THRESHOLD) for a in case.args],
            "draws": draws_by_label(case.record, case.derived),
        }
        if shrinking is not None:
            counterexample["shrinking"] = shrinking
        script = reproducer.script(rule, info.id, case, problem, root=options.root)
    return Finding(
        check_id=info.id,
        severity=problem.severity or info.severity,
        title=info.title,
        rule=rule.name,
        message=problem.message,
        location=problem.location,
        expected=problem.expected,
        actual=problem.actual,
        fix=problem.fix,
        counterexample=counterexample,
        reproducer=script,
        source_file=_relative(rule.source_file, options.root),
        source_lines=list(range(rule.source_lines[0], rule.source_lines[1] + 1)) if rule.source_lines else None,
    )


def _relative(path: str | None, root: str | None) -> str | None:
    if path is None or root is None:
        return path
    try:
        rel = os.path.relpath(path, root)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def time_limit(seconds: float | None, exception: type[BaseException] = RuleTimeout,
               grace_s: float | None = None, stuck: Callable[[float], None] | None = None) -> ContextManager[None]:
    """Raise ``exception`` in the block after ``seconds`` of wall time: at the checker's next safe point,
    or by a signal after ``grace_s`` more inside one call; ``stuck`` where neither can
    (:mod:`gradguard.checker._deadline`)."""
    return _time_limit(seconds, exception, grace_s, stuck)


STUCK_FOLDER: list[str] = []  # in a worker process: the folder where it leaves why it stopped, for its parent
# What a run in one process says before it stops, given the rule and the reason (the CLI's lines, the sandbox's
# last stderr line, which names the rule).
STUCK_HOOKS: list[Callable[[RuleSpec, str], None]] = []


def stuck_reason(name: str, elapsed: float, limit: float) -> str:
    return (f"rule {name} did not return from native code {elapsed:.0f} s into its check, past its {limit:g} s time "
            "limit: a compiled loop that never ends, or a hung library call, which no signal interrupts (a signal's "
            "handler runs only between Python bytecodes)")


def _stop_stuck(rule: RuleSpec, options: Options) -> Callable[[float], None]:
    """The last resort of the rule's time limit (:mod:`gradguard.checker._deadline`, stage 3): the rule's call
    cannot be stopped in this process, so the process ends, saying why. A worker process leaves the reason for
    its parent (which reports the rule and checks the others); a run in one process says which rules it checked."""

    def stop(elapsed: float) -> None:
        reason = stuck_reason(rule.name, elapsed, options.rule_timeout_s or 0.0)
        try:
            if STUCK_FOLDER:
                Path(STUCK_FOLDER[0], f"{os.getpid()}.txt").write_text(reason)
            elif STUCK_HOOKS:
                for hook in list(STUCK_HOOKS):
                    hook(rule, reason)
            else:
                sys.stderr.write(f"gradguard: {reason}. The process was stopped: rules not yet reported were not "
                                 "checked. Draw inputs where the rule ends, or check with --jobs 2: each rule then "
                                 "runs in a worker process, and a stuck one is reported alone.\n")
                sys.stderr.flush()
        finally:
            os._exit(STUCK_EXIT)

    return stop

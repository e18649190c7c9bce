"""One drawn input for one rule: what every check function receives.

A :class:`Case` hands checks fresh copies of the arguments (rules may mutate
them), runs the rule and its pullback with user exceptions wrapped in
:class:`RuleRaised`, and draws everything random (cotangents, directions,
scales) through Hypothesis, so a failure shrinks to a small cotangent as well
as a small input, and a reproducer can replay the exact draws.
"""

from __future__ import annotations

import functools
import math
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.internal.conjecture.utils import calc_label_from_name, combine_labels
from hypothesis.strategies import SearchStrategy

from gradguard.checker import tolerances
from gradguard.checker._memory import note_memory_error
from gradguard.checker.problems import Problem, Skip
from gradguard.checker.specs import RuleSpec, without_constant_outputs
from gradguard.engines.values import differentiable, is_ml_float
from gradguard.checker.trees import children, copy_tree, describe, is_leaf, leaves, rebuild, same_bits, tree_map

__all__ = ["Case", "RuleRaised", "DeviceMemoryExhausted", "UnsupportedOutput", "Draws", "HypothesisDraws", "ReplayDraws", "ReplayExhausted", "Shared",
           "FirstCall", "FirstPullback", "UNKNOWN", "identical"]

COTANGENT_BOUND = 4.0
# Cotangents and directions are drawn element by element (shrinkable) only up to this size: a check
# draws one per call, so for larger outputs Hypothesis draws just a seed (the arguments, which people
# read first in a counterexample, stay shrinkable up to SHRINKABLE_SIZE).
SHRINKABLE_DRAW_SIZE = 16


class RuleRaised(Exception):
    """The user's rule (forward, pullback or primal) raised; carries the user's traceback."""

    def __init__(self, phase: str, rule: str, exc: BaseException) -> None:
        self.phase, self.rule, self.exc = phase, rule, exc
        self.user_traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        super().__init__(f"the {phase} of {rule} raised {type(exc).__name__}: {exc}")

    @property
    def summary(self) -> str:
        """The exception's (qualified) type and the first line of its message: a finding's ``actual``. The
        traceback's last line says the same for a one-line message; a multi-line one (JAX's errors) ends with
        a link to its documentation instead."""
        lines = "".join(traceback.format_exception_only(type(self.exc), self.exc)).strip().splitlines()
        return lines[0] if lines else type(self.exc).__name__

    def problem(self) -> Problem:
        return Problem(
            message=str(self),
            actual=self.summary,
            fix=f"Make the {self.phase} handle this input, or narrow the argument specs if it is outside the rule's "
                f"domain.{_x64_hint(self.exc)}",
        )


def _x64_hint(exc: BaseException) -> str:
    """A sentence for a JAX error that mixes float32 and float64 values: gradguard runs JAX with 64-bit types on,
    where a constant made without a dtype is float64 (synjax's float32 slogdet through ``jnp.eye(n)``: "primal
    float32[] with tangent float64[]"); '' for any other error."""
    text = str(exc)
    from_jax = type(exc).__module__.startswith("jax") or any(word in text for word in ("custom_jvp", "custom_vjp", "jax"))
    if not from_jax or "float32" not in text or "float64" not in text:
        return ""
    return (" gradguard runs JAX with 64-bit types on (jax_enable_x64), as programs that use float64 do: there an "
            "array made without a dtype (jnp.eye(n), jnp.zeros(n), jnp.asarray(1.0)) is float64 and promotes the "
            "float32 values it meets. Give such arrays the argument's dtype (jnp.eye(n, dtype=x.dtype)).")


class DeviceMemoryExhausted(BaseException):
    """The GPU ran out of memory while the rule ran: an environment's limit, established nothing about the rule.

    The GPU is shared (other jobs' processes, other programs), so its memory running out is no finding: a
    BaseException, like the runner's time limit, so that neither Hypothesis nor a check's ``except Exception``
    takes it for the rule's own failure; the runner makes it the verdict "error" of type ``DeviceMemory``.
    (The host's memory running out stays what it was: see :mod:`gradguard.checker._memory`.)
    """

    def __init__(self, phase: str, rule: str, exc: BaseException) -> None:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        super().__init__(
            f"the GPU ran out of memory in the {phase} of {rule} ({type(exc).__name__}: {first}); nothing was "
            "established about the rule. Other processes on the GPU may hold its memory: check it with fewer "
            "jobs sharing the GPU (--jobs), with smaller inputs, or with more free GPU memory."
        )


def _device_out_of_memory(exc: BaseException) -> bool:
    """XLA's out-of-memory error on a GPU run (``GRADGUARD_DEVICE=gpu``)."""
    if not any(c.__name__ in ("XlaRuntimeError", "JaxRuntimeError") for c in type(exc).__mro__):
        return False
    if not str(exc).lstrip().startswith("RESOURCE_EXHAUSTED"):
        return False
    from gradguard.checker.jax_rules import requested_device

    return requested_device() == "gpu"


class UnsupportedOutput(BaseException):
    """The rule's output holds a value gradguard cannot differentiate through (a dict, a string, an object).

    A BaseException, like the runner's time limit, so that Hypothesis neither shrinks it nor reports it
    as a failing example: the runner turns it into the verdict "error" for this rule, with this message.
    """


SUPPORTED_OUTPUT = "arrays, Python or NumPy numbers, None, and tuples, lists, NamedTuples or dicts of them (nested)"


def _unsupported_leaf(tree: Any) -> Any:
    """The first leaf of ``tree`` that is not an array, a number or None."""
    for leaf in leaves(tree):
        if leaf is None or isinstance(leaf, (np.ndarray, np.generic, bool, int, float, complex)):
            continue
        return leaf
    return None


class Draws(Protocol):
    def draw(self, strategy: SearchStrategy, label: str) -> Any: ...


class HypothesisDraws:
    """Draws from a Hypothesis test case (the ``st.data()`` object the search hands its body).

    Each draw goes to the test case's ConjectureData directly: the same choices and spans as ``data.draw``,
    without what that adds per call for a person reading a failure (a note of each drawn value, a check that
    the strategy left the global random state alone), which the case's own record replaces. A check makes
    hundreds of draws per rule."""

    def __init__(self, data: Any) -> None:
        self._data = data.conjecture_data

    def draw(self, strategy: SearchStrategy, label: str) -> Any:
        # What ConjectureData.draw does for a top-level draw, less its per-call upkeep (validating and unwrapping
        # the strategy, timing the draw for Hypothesis' statistics): one span with the strategy's label around
        # its do_draw, the choices Hypothesis records and shrinks. A strategy is validated once (`_ready`).
        unwrapped = _ready(strategy)
        if unwrapped is None:  # empty, or not one to take apart: Hypothesis' own draw says what happens
            return self._data.draw(strategy)
        data = self._data
        data.start_span(unwrapped.label)
        try:
            return unwrapped.do_draw(data)
        finally:
            data.stop_span()


# Strategies a case draws from, validated and unwrapped once: id -> (strategy, what draws), bounded.
_READY: dict[int, tuple[SearchStrategy, SearchStrategy | None]] = {}
_READY_KEEP = 1024


def _ready(strategy: SearchStrategy) -> SearchStrategy | None:
    """The strategy that does ``strategy``'s drawing (itself, or what a lazy strategy wraps), once it is
    validated; None for an empty strategy (Hypothesis marks the test case invalid)."""
    found = _READY.get(id(strategy))
    if found is not None and found[0] is strategy:
        return found[1]
    from hypothesis.strategies._internal.lazy import unwrap_strategies

    strategy.validate()  # a strategy built wrong raises here, as on Hypothesis' own first draw
    unwrapped = None if strategy.is_empty else unwrap_strategies(strategy)
    if len(_READY) >= _READY_KEEP:
        _READY.clear()
    _READY[id(strategy)] = (strategy, unwrapped)  # holds the strategy: its id is not reused while listed
    return unwrapped


class ReplayExhausted(RuntimeError):
    """A replayed check asked for more draws than were recorded (the rule took another path this time)."""


class ReplayDraws:
    """Returns recorded draws in order: how a reproducer replays a failure exactly."""

    def __init__(self, values: list[Any]) -> None:
        self._values = list(values)

    def draw(self, strategy: SearchStrategy, label: str) -> Any:
        if not self._values:
            raise ReplayExhausted(f"the reproducer has no recorded value left for draw {label!r}; regenerate it")
        return self._values.pop(0)


@dataclass
class FirstCall:
    """The rrule's first forward call on fresh copies of the input, as checks may read it.

    ``args`` and ``y`` are the live objects (whatever later calls of the rule do to them);
    ``args_after`` and ``output`` are copies taken the moment the forward call returned (``args_after`` is
    the case's pristine arguments themselves where the forward call left its copies bit for bit as they were).
    """

    args: tuple[Any, ...]
    args_after: tuple[Any, ...]
    result: Any  # the raw result: GG101 judges whether it is an (output, pullback) pair
    snapshot: Any = None  # copy of the output (pairs only)

    @property
    def is_pair(self) -> bool:
        return _is_pair(self.result)

    @property
    def y(self) -> Any:
        return self.pair[0]

    @property
    def output(self) -> Any:
        """The output as the forward call returned it (a copy): skips unless the rrule returned a pair."""
        return self.snapshot if self.pair else None

    @property
    def pb(self) -> Callable[..., Any]:
        return self.pair[1]

    @property
    def pair(self) -> tuple[Any, Callable[..., Any]]:
        return _as_pair(self.result)


@dataclass
class FirstPullback:
    """One cotangent (the draw labelled "cotangent") pulled back once through the first call's pullback.

    ``ybar`` is the pristine draw, ``given`` the copy the pullback received as it left it (GG303),
    ``returned`` the pullback's result as returned (live: GG403 and GG405 look at its memory), and
    ``tangents`` a copy of it taken the moment the call returned.
    """

    call: FirstCall
    ybar: Any
    given: Any
    returned: Any
    tangents: Any


@dataclass
class Shared:
    """The first forward call and first pullback of one drawn input, made once and shared by the checks.

    Most checks begin the same way: call the rrule on fresh copies of the input, draw a cotangent, pull it
    back, and then only read what came out. The survey runs every check on each drawn input and hands all
    of that input's cases one ``Shared``, so those calls are made once per input instead of once per check
    (on large inputs the calls are the whole cost). A case made alone (a check's own shrinking search, a
    reproducer) gets a ``Shared`` of its own: the same methods then make the same calls and the same draws,
    in the same order, so a failure the survey found replays alone. Exceptions are kept and raised again
    for every check that asks, as each of them would have met the same one.
    """

    call: FirstCall | BaseException | None = None
    pulled: FirstPullback | BaseException | None = None
    cotangent: list[Any] = field(default_factory=list)  # the drawn cotangent, kept also when the pullback raised
    # Whether a call of the primal on fresh copies of the input returned exactly the first call's output (its
    # snapshot, bit for bit, container types and all): then that snapshot stands for the primal's value at the
    # input, and the checks that need it again do not call the primal again (see Case.input_primal).
    primal_is_output: bool = False
    # Why the pullback does not reproduce its own result at this input (see checks._state.unreproducible), ''
    # where it does; None until a check whose verdict rests on that asked.
    unreproducible: str | None = None


def _is_pair(result: Any) -> bool:
    """Whether an rrule's result is an ``(output, pullback)`` pair with a callable pullback."""
    return isinstance(result, tuple) and len(result) == 2 and callable(result[1])


def _as_pair(result: Any) -> tuple[Any, Callable[..., Any]]:
    if not _is_pair(result):
        raise Skip("the rrule does not return an (output, pullback) pair (see GG101)")
    return result


def _snapshot(args: tuple[Any, ...], pristine: tuple[Any, ...]) -> tuple[Any, ...]:
    """A copy of ``args`` as they are now; or ``pristine`` itself where they hold exactly its bits, as they do
    unless the rule wrote into them: then no copy is needed (on large inputs, a copy of every argument
    saved). The pristine arguments are never handed to user code, so they stay as they are."""
    if len(args) == len(pristine) and all(same_bits(a, p) for a, p in zip(args, pristine)):
        return pristine
    return copy_tree(args)


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


_UNKNOWN = UNKNOWN = _Unknown()  # Case.known_primal where the primal's value at the input is not established


def identical(a: Any, b: Any) -> bool:
    """Whether two trees have the same containers (types, lengths, dict keys) and leaves that are arrays with
    the same bits (:func:`same_bits`) or both None. False for any other leaf (a Python or NumPy scalar):
    the bits of those are not compared, so they are never called identical."""
    if is_leaf(a) or is_leaf(b):
        return (a is None and b is None) or (type(a) is type(b) is np.ndarray and same_bits(a, b))
    if type(a) is not type(b) or len(a) != len(b):
        return False
    if isinstance(a, dict) and list(a) != list(b):
        return False
    return all(identical(x, y) for x, y in zip(children(a), children(b)))


def _kept(value: Any) -> Any:
    if isinstance(value, BaseException):
        raise value
    return value


class Case:
    """A rule, one input, and the means to run and probe it.

    ``evidence`` is False while a search re-finds and shrinks a failure: only whether the check fails
    counts there, so a check may leave out what only its message needs (GG201's localisation of the wrong
    element) and yield a problem that states less. It must decide the same and make the same draws either
    way: the search runs it once more, with evidence, on the input and draws it keeps, where the check
    asked (``evidence_asked``).
    """

    def __init__(self, rule: RuleSpec, args: tuple[Any, ...], draws: Draws, shared: Shared | None = None,
                 evidence: bool = True) -> None:
        self.rule = rule
        self._args = tuple(args)
        self._draws = draws
        self._shared = Shared() if shared is None else shared
        self._evidence = evidence
        self.evidence_asked = False  # whether the check read `evidence` (and so may have left some out)
        self.record: list[tuple[str, Any]] = []  # every draw, in order: counterexample and reproducer
        self.derived: list[tuple[str, Any]] = []  # values a check made from its draws and used instead (shown only)

    @property
    def evidence(self) -> bool:
        self.evidence_asked = True
        return self._evidence

    # -- inputs ---------------------------------------------------------------------------------
    @property
    def args(self) -> tuple[Any, ...]:
        """The pristine arguments. Never pass these to user code: use :meth:`fresh`."""
        return self._args

    def fresh(self) -> tuple[Any, ...]:
        return copy_tree(self._args)

    @property
    def nargs(self) -> int:
        return len(self._args)

    @property
    def diff_positions(self) -> list[int]:
        """Argument positions that carry a tangent (float/complex values not declared nondiff)."""
        return [i for i, a in enumerate(self._args) if i not in self.rule.nondiff and differentiable(a)]

    @property
    def dtype(self) -> np.dtype:
        """The lowest-precision float dtype among the differentiable arguments (sets the tolerance)."""
        dts = [np.asarray(self._args[i]).dtype for i in self.diff_positions]
        if not dts:
            return np.dtype("float64")
        return min(dts, key=lambda d: np.finfo(d).eps * -1)

    @property
    def tol(self) -> tolerances.Tolerance:
        return tolerances.for_dtype(self.dtype, rtol=self.rule.rtol, atol=self.rule.atol)

    # -- running user code ----------------------------------------------------------------------
    def call(self, phase: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Skip:
            raise
        except Exception as exc:  # the user's code failed: report it, do not crash the checker
            note_memory_error(exc)  # an allocation over the rule's memory budget stops it at the next safe point
            if _device_out_of_memory(exc):
                raise DeviceMemoryExhausted(phase, self.rule.name, exc) from exc
            raise RuleRaised(phase, self.rule.name, exc) from exc

    def forward(self, args: tuple[Any, ...] | None = None) -> Any:
        """The raw result of the rrule (not yet validated as a pair)."""
        return self.call("forward", self.rule.rrule, *(self.fresh() if args is None else args))

    def pair(self, args: tuple[Any, ...] | None = None) -> tuple[Any, Callable[..., Any]]:
        """``(output, pullback)``; skips the check if the rrule does not return a pair (GG101 reports that)."""
        return _as_pair(self.forward(args))

    def pullback(self, pb: Callable[..., Any], ybar: Any) -> Any:
        return self.call("pullback", pb, ybar)

    # -- the first call, shared by the checks of one drawn input (see Shared) --------------------
    def first_call(self) -> FirstCall:
        """The rrule's forward call on fresh copies of the input: made once per drawn input."""
        shared = self._shared
        if shared.call is None:
            args = self.fresh()
            try:
                result = self.forward(args)
            except (RuleRaised, Skip) as exc:
                shared.call = exc
                raise
            call = FirstCall(args=args, args_after=_snapshot(args, self._args), result=result)
            if call.is_pair and (odd := _unsupported_leaf(result[0])) is not None:
                raise UnsupportedOutput(
                    f"the output of {self.rule.name} holds {describe(odd)} {odd!r:.60}; gradguard checks outputs that "
                    f"are {SUPPORTED_OUTPUT}. Declare a primal that returns the arrays in one of those "
                    "containers and adapt the rule to it."
                )
            if call.is_pair:
                call.snapshot = copy_tree(result[0])
            shared.call = call
        return _kept(shared.call)

    def first_pullback(self) -> FirstPullback:
        """A cotangent drawn like the first call's output ("cotangent"), pulled back once through its
        pullback on a copy: made once per drawn input. Every case that uses it records the draw, so it
        replays alone."""
        shared = self._shared
        call = self.first_call()
        if shared.pulled is None:
            ybar = self.cotangent_like(call.output)
            shared.cotangent.append(ybar)
            given = copy_tree(ybar)
            try:
                returned = self.pullback(call.pb, given)
            except (RuleRaised, Skip) as exc:
                shared.pulled = exc
                raise
            shared.pulled = FirstPullback(call=call, ybar=ybar, given=given, returned=returned, tangents=copy_tree(returned))
            return shared.pulled
        self.record.extend(("cotangent", ybar) for ybar in shared.cotangent)  # as if this case had drawn it
        return _kept(shared.pulled)

    def first_tangents(self) -> tuple[FirstPullback, tuple[Any, ...]]:
        """:meth:`first_pullback` and its tangents as a tuple, one per argument (skips like :meth:`tangents`)."""
        pulled = self.first_pullback()
        return pulled, self.validated(pulled.tangents)

    def reproduction(self, find: Callable[["Case"], str]) -> str:
        """Why the pullback does not reproduce its own result at this input ('' where it does): ``find(self)``
        (checks._state.unreproducible), asked once per drawn input and shared by that input's checks."""
        shared = self._shared
        if shared.unreproducible is None:
            shared.unreproducible = find(self)
        return shared.unreproducible

    def primal(self, args: tuple[Any, ...] | None = None) -> Any:
        return self.call("primal", self.rule.primal, *(self.fresh() if args is None else args))

    def input_primal(self) -> Any:
        """``primal(*fresh())``: the primal's value at the input, called at most once per drawn input where that
        value can be reused.

        The call's result is reused (by :meth:`known_primal`) only where it holds exactly the bits of the first
        forward call's output, an independent call (of the rrule) on other copies of the same input: the two
        agreeing bit for bit is what shows the value is the input's rather than one call's chance (a primal
        that reads hidden state or a random generator and still reproduced the forward's bits at this call
        would have its value reused). A value that differs in any bit is returned and forgotten, and every
        later check calls the primal afresh, as before. Nothing new is kept: the reused value is the output
        snapshot the first call keeps anyway, read only."""
        known = self.known_primal()
        if known is not _UNKNOWN:
            return known
        y = self.primal()
        call = self._shared.call
        if isinstance(call, FirstCall) and call.is_pair and identical(y, call.snapshot):
            self._shared.primal_is_output = True
        return y

    def known_primal(self) -> Any:
        """The primal's value at the input where :meth:`input_primal` established it (the first call's output
        snapshot, not to be written into), else ``UNKNOWN``. Never calls user code."""
        call = self._shared.call
        if self._shared.primal_is_output and isinstance(call, FirstCall):
            return call.snapshot
        return _UNKNOWN

    def tangents(self, pb: Callable[..., Any], ybar: Any) -> tuple[Any, ...]:
        """Pullback result normalised to a tuple; skips if its structure is wrong (GG103/GG104 report that)."""
        return self.validated(self.pullback(pb, ybar))

    def validated(self, t: Any) -> tuple[Any, ...]:
        """A pullback's result as a tuple; skips if its structure is wrong (GG103/GG104 report that)."""
        if not isinstance(t, (tuple, list)) or len(t) != self.nargs:
            raise Skip("the pullback does not return one tangent per argument (see GG103)")
        for i in self.diff_positions:
            if t[i] is not None and np.shape(t[i]) != np.shape(self._args[i]):
                raise Skip("a tangent's shape differs from its argument's (see GG104)")
        return tuple(t)

    # -- random draws ---------------------------------------------------------------------------
    def used_instead(self, label: str, value: Any) -> None:
        """Show ``value`` beside the draws as what the check used in place of a draw (a direction projected onto a
        declared structure): the counterexample says what the check computed with, and the reproducer, which
        replays the draws themselves, is unchanged. A label given again replaces its value (a check that asks twice
        shows it once)."""
        self.derived = [(shown, v) for shown, v in self.derived if shown != label] + [(label, value)]

    def draw(self, strategy: SearchStrategy, label: str) -> Any:
        value = _made(self._draws.draw(strategy, label))
        self.record.append((label, value))
        return value

    def draw_like(self, value: Any, label: str, *, bound: float = COTANGENT_BOUND) -> Any:
        """A random tree with the structure, shapes and dtypes of ``value`` (a cotangent or a direction), never
        all zeros: a zero cotangent or direction makes every comparison trivially true (GG301 tests the zero
        cotangent on purpose). All zeros become all ones instead of being rejected, so the simplest example
        (zero inputs, where singular points live) is still tried first."""
        return self.draw(_like(value, bound), label)

    def cotangent_like(self, y: Any, label: str = "cotangent") -> Any:
        """A random cotangent for the output ``y`` (`draw_like`); zeros for the outputs the rule declares to
        carry no derivative (`without_constant_outputs`), drawn as None (so recorded and shown as None)."""
        return self._for_outputs(y, lambda outputs: self.draw_like(outputs, label))

    def _for_outputs(self, y: Any, make: Callable[[Any], Any]) -> Any:
        """A cotangent for ``y``: ``make``'s for the outputs that carry a derivative, zeros for those the rule
        declares to carry none (`without_constant_outputs`, which ``make`` sees as None)."""
        marked = without_constant_outputs(self.rule, y)
        if marked is y:
            return make(y)
        made = children(make(marked))
        return rebuild(y, (zeros_like_tree(part) if m is None else d
                           for part, m, d in zip(children(y), children(marked), made)))

    def fixed_cotangent(self, y: Any) -> Any:
        """A cotangent for the output ``y`` as `cotangent_like` makes one, drawn from nothing: fixed values between
        1/2 and 2 in size, either sign, from a private generator. For a question a check asks about the rule after
        its own draws (`checks._state.unreproducible`), which must leave the case's draws, its counterexample and
        its replay as they were."""
        rng = np.random.default_rng(0)

        def element(shape: tuple[int, ...]) -> np.ndarray:
            return rng.uniform(0.5, 2.0, shape) * rng.choice((-1.0, 1.0), shape)

        def leaf(v: Any) -> Any:
            if isinstance(v, (np.ndarray, np.generic)):
                dt = np.result_type(v)
                dt = dt if dt.kind in "fc" else np.dtype("float64")
                made = (element(np.shape(v)) + (1j * element(np.shape(v)) if dt.kind == "c" else 0)).astype(dt)
                return made[()] if isinstance(v, np.generic) else made
            if isinstance(v, complex):
                return complex(float(element(())), float(element(())))
            if isinstance(v, (float, int)) and not isinstance(v, bool):
                return float(element(()))
            return None

        return self._for_outputs(y, lambda outputs: tree_map(leaf, outputs))

    def direction(self, label: str = "direction") -> tuple[Any, ...]:
        """A tangent direction: random for differentiable arguments, None for the others."""
        diff = set(self.diff_positions)
        drawn = self.draw_like(tuple(self._args[i] for i in sorted(diff)), label)
        it = iter(drawn)
        return tuple(next(it) if i in diff else None for i in range(self.nargs))

    def draw_float(self, label: str, lo: float, hi: float) -> float:
        return self.draw(_floats(lo, hi), label)

    def describe_args(self) -> str:
        return ", ".join(describe(a) for a in self._args)


# draw_like's strategies per (structure, shapes, dtypes, bound): the same strategy draws the same values,
# and one built and validated once saves Hypothesis that work on every draw of every input.
_LIKE: dict[Any, SearchStrategy] = {}
_LIKE_KEEP = 512


def _like(value: Any, bound: float) -> SearchStrategy:
    key = _like_key(value)
    if key is None:
        return _Like(value, bound, None)
    found = _LIKE.get((key, bound))
    if found is None:
        if len(_LIKE) >= _LIKE_KEEP:
            _LIKE.clear()
        found = _LIKE[(key, bound)] = _Like(value, bound, key)
    return found


def _like_key(value: Any) -> Any:
    """What `_like_plan` reads of ``value``: node types and dict keys (`rebuild`), leaf kinds, shapes and
    dtypes. None where a dict key is unhashable."""
    if not is_leaf(value):
        parts = tuple(_like_key(v) for v in children(value))
        keys = tuple(value) if isinstance(value, dict) else None
        try:
            hash(keys)
        except TypeError:
            return None
        return None if None in parts else (type(value), keys, parts)
    if isinstance(value, (np.ndarray, np.generic)):
        return (type(value) if isinstance(value, np.generic) else np.ndarray, np.shape(value), np.asarray(value).dtype.str)
    return (type(value),)


@functools.lru_cache(maxsize=64)
def _floats(lo: float, hi: float) -> SearchStrategy:
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


# The steps of a `_Like` plan: a container of plans; a small float or complex array, one float choice per real
# number; a Python float; a Python complex (two choices); None (no choice); and a strategy drawn as it is.
_NODE, _ARRAY, _FLOAT, _COMPLEX, _NONE, _STRATEGY = range(6)


class _Like(SearchStrategy):
    """`Case.draw_like`'s strategy for one structure (node types, shapes, dtypes) and bound: the whole tree
    drawn in one span, each small array's elements, each Python float and each complex part one float choice
    (between -bound and bound, magnitudes under 1/bound made 0, as `_element` draws one), then rounded to
    the array's dtype, with `_ones_if_zero` applied last. Arrays of more than SHRINKABLE_DRAW_SIZE elements
    are a seed (`_Seeded`) and NumPy scalars an `hnp.arrays` draw, as strategies of their own.

    The choices are those of the tuples, maps and per-array strategies this replaces, in the same order:
    those drew the same floats through a span, a ``map`` (a ``warnings.catch_warnings`` block and a record
    of the call) and a validity check per node and leaf, about half the cost of a cotangent's draw, and a
    check draws several per input (bench/RESULTS.md, issue 14's twenty-ninth pass). The strategies hold
    nothing of ``value`` but its structure: `_LIKE` keeps them, and a plan that closed over ``value`` would
    keep that array (a whole output, on large rules) alive."""

    def __init__(self, value: Any, bound: float, key: Any) -> None:
        super().__init__()
        self.bound = bound
        self.plan = _like_plan(value, bound)
        self._key = key

    def do_draw(self, data: Any) -> Any:
        return _ones_if_zero(_drawn(self.plan, data, self.bound))

    def calc_label(self) -> int:
        if self._key is None:
            return self.class_label
        return combine_labels(self.class_label, calc_label_from_name(repr((self._key, self.bound))))

    def __repr__(self) -> str:
        return f"_Like({self._key!r}, bound={self.bound})"


def _like_plan(value: Any, bound: float) -> tuple[Any, ...]:
    if not is_leaf(value):
        return (_NODE, tree_map(lambda _: None, value), tuple(_like_plan(v, bound) for v in children(value)))
    if isinstance(value, (np.ndarray, np.generic)):
        shape, scalar = np.shape(value), isinstance(value, np.generic)
        dt = np.result_type(value)
        dt = dt if dt.kind in "fc" else np.dtype("float64")
        if np.size(value) > SHRINKABLE_DRAW_SIZE:
            return (_STRATEGY, st.integers(0, 2**32 - 1).map(lambda s: _Seeded(s, shape, dt, bound)))
        if scalar:  # a NumPy scalar: one element, drawn as before the arrays' own strategy (the same reports)
            real = _element(bound, 32 if dt in (np.float32, np.complex64) else 64)
            elements = st.builds(complex, real, real) if dt.kind == "c" else real
            return (_STRATEGY, hnp.arrays(dt, shape, elements=elements, fill=st.nothing()).map(lambda a: a[()]))
        count = int(np.prod(shape, dtype=np.int64)) * (2 if dt.kind == "c" else 1)
        return (_ARRAY, shape, dt, count)
    if isinstance(value, complex):
        return (_COMPLEX,)
    if isinstance(value, (float, int)) and not isinstance(value, bool):
        return (_FLOAT,)
    return (_NONE,)


def _drawn(plan: tuple[Any, ...], data: Any, bound: float) -> Any:
    kind = plan[0]
    if kind == _ARRAY:
        _, shape, dtype, count = plan
        flat = np.array(_reals(data, count, bound), dtype=np.float64)
        if dtype.kind == "c":
            parts = flat.reshape(-1, 2)
            flat = np.empty(len(parts), np.complex128)
            flat.real, flat.imag = parts[:, 0], parts[:, 1]
        return flat.astype(dtype).reshape(shape)
    if kind == _NODE:
        return rebuild(plan[1], [_drawn(p, data, bound) for p in plan[2]])
    if kind == _FLOAT:
        return _reals(data, 1, bound)[0]
    if kind == _COMPLEX:
        return complex(*_reals(data, 2, bound))
    if kind == _STRATEGY:
        return data.draw(plan[1])
    return None


def _reals(data: Any, count: int, bound: float) -> list[float]:
    """``count`` float choices between -bound and bound, those of magnitude under 1/bound made 0."""
    small, draw = 1 / bound, data.draw_float
    values = [draw(-bound, bound, allow_nan=False) for _ in range(count)]
    return [0.0 if abs(v) < small else v for v in values]


def _ones_if_zero(tree: Any) -> Any:
    numbers = [x for x in leaves(tree) if x is not None and (isinstance(x, _Seeded) or np.size(x))]
    if not numbers or any(isinstance(x, _Seeded) or np.any(np.asarray(x) != 0) for x in numbers):
        return tree
    return tree_map(lambda x: None if x is None else (np.ones_like(x) if isinstance(x, np.ndarray) else type(x)(1)), tree)


def _element(bound: float, width: int = 64) -> SearchStrategy:
    """One element of a cotangent or direction: 0, or a magnitude between 1/bound and bound, either sign.

    Tolerances have an absolute part, so a cotangent of 1e-38 (which plain float strategies like to draw)
    would make every tangent "agree" with every other. Such values become zeros, as sparse cotangents find
    bugs; one float draw per element keeps large cotangents cheap to draw and shrinks toward 0 and 1."""
    small = 1 / bound
    return st.floats(-bound, bound, allow_nan=False, allow_infinity=False, width=width).map(lambda v: 0.0 if abs(v) < small else v)


class _Seeded:
    """A drawn array of more than SHRINKABLE_DRAW_SIZE elements, before it is made: its seed and what to make.

    Hypothesis keeps every value a ``map`` returns until the test case ends (to print the falsifying example),
    so a strategy that returned the array itself would keep each cotangent and direction the checks draw for
    one input alive until the last check of that input is done: on a 5000 x 5000 rule, six arrays of 200 MB
    after the second-order checks. The strategy returns this instead, and `Case.draw` makes the array (the
    same values: the seed is the draw), which lives only as long as the check holds it. Never all zeros (a
    uniform draw), so `_ones_if_zero` leaves it alone."""

    __slots__ = ("seed", "shape", "dtype", "bound")

    def __init__(self, seed: int, shape: tuple[int, ...], dtype: np.dtype, bound: float) -> None:
        self.seed, self.shape, self.dtype, self.bound = seed, shape, dtype, bound

    def __repr__(self) -> str:
        return f"<a {self.dtype} array of shape {self.shape} drawn with seed {self.seed}>"

    def make(self) -> np.ndarray:
        return _seeded(self.seed, self.shape, self.dtype, self.bound)


def _made(tree: Any) -> Any:
    """``tree`` with its `_Seeded` leaves made into arrays (itself when it has none)."""
    if isinstance(tree, _Seeded):
        return tree.make()
    if is_leaf(tree) or not any(isinstance(x, _Seeded) for x in leaves(tree)):
        return tree
    return tree_map(lambda x: x.make() if isinstance(x, _Seeded) else x, tree)


def _seeded(seed: int, shape: tuple[int, ...], dt: np.dtype, bound: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = rng.uniform(-bound, bound, size=shape)
    if dt.kind == "c":
        out = out + 1j * rng.uniform(-bound, bound, size=shape)
    return out.astype(dt)


def zeros_like_tree(tree: Any) -> Any:
    return tree_map(lambda x: np.zeros_like(x) if isinstance(x, np.ndarray) else (0.0 * x if x is not None else None), tree)


def is_finite_tree(tree: Any) -> bool:
    """Whether every number in ``tree`` is finite. Leaves that are not numbers NumPy can test (JAX's float0 tangent of
    an integer output, kind "V", which quadax's jvp returns for its step count) have nothing to be infinite."""
    for x in leaves(tree):
        if x is None:
            continue
        arr = np.asarray(x)
        if arr.dtype.kind not in "biufc" and not is_ml_float(arr.dtype):
            continue
        if not bool(np.all(np.isfinite(arr))):
            return False
    return True


def scale_tree(tree: Any, alpha: float) -> Any:
    return tree_map(lambda x: None if x is None else x * alpha, tree)


def magnitude(*values: float) -> float:
    return math.fsum(abs(v) for v in values)

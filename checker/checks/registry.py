"""The check registry: every check id maps to one small function and its catalogue entry.

A check is registered with :func:`check`::

    @check("GG202", family="numeric", title="pullback is not linear in the cotangent")
    def pullback_linear(case: Case) -> Iterable[Problem]:
        '''One paragraph: what fails, why it matters.'''

It receives a :class:`gradguard.checker.case.Case` (one drawn input) and yields
:class:`Problem` s; it never returns verdicts. Ids are stable. Checks run in
id order; those with ``gates="forward"`` or ``gates="pullback"`` (structural contract checks) stop the
others for that input when they fail, so the first message is the real cause: a failing forward gate stops
every other check, a failing pullback gate every check but those registered ``forward_only=True`` (a
custom_jvp's jvp, which forward mode runs without a pullback).
Those with ``compares_calls=True`` judge the rule by comparing the results of
separate calls (two cotangents, two inputs, before and after a change); an error
they find on an input where the pullback does not reproduce its own result (two
calls, same input, same cotangent, different tangents: GG403 and GG406) is not
theirs to report, and the check is listed as skipped there with that reason.

Checks that run on the whole rule rather than one input (the contexts' safety
matrix) register with ``per_rule=True`` and receive a :class:`gradguard.checker.options.PerRule`.

This module only registers; importing :mod:`gradguard.checker.checks` imports every check module, and
its ``catalogue()`` lists them (so no module here imports the package that imports it).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from gradguard.checker.problems import Problem, Skip

__all__ = ["Problem", "CheckInfo", "Skip", "check", "CHECKS", "FAMILIES"]

FAMILIES = ("contract", "numeric", "cotangent", "state", "context", "compose", "torch")


@dataclass
class CheckInfo:
    id: str
    family: str
    title: str
    severity: str
    explanation: str
    fn: Callable[..., Iterable[Problem]]
    gates: str | None = None  # "forward" or "pullback": what its failure says cannot run (None: not a gate)
    forward_only: bool = False  # judges forward mode alone, so a pullback that cannot run does not stop it
    per_rule: bool = False
    compares_calls: bool = False  # its verdict rests on a reproducible pullback (see the module's docstring)
    kinds: tuple[str, ...] = ("numpy", "jax", "torch")
    given_example: str = ""  # the definitions both examples use (primals, imports beyond numpy/jax/gradguard)
    broken_example: str = ""
    fixed_example: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def module(self) -> str:
        return self.fn.__module__


CHECKS: dict[str, CheckInfo] = {}


def check(
    id: str,
    *,
    family: str,
    title: str,
    severity: str = "error",
    gates: str | None = None,
    forward_only: bool = False,
    per_rule: bool = False,
    compares_calls: bool = False,
    kinds: tuple[str, ...] = ("numpy", "jax", "torch"),
    given: str = "",
    broken: str = "",
    fixed: str = "",
) -> Callable[[Callable[..., Iterable[Problem]]], Callable[..., Iterable[Problem]]]:
    """Register a check under a stable id; its docstring is its catalogue explanation.

    ``broken`` and ``fixed`` are rules users copy: after ``given`` (and ``import numpy as np``,
    ``import jax``, ``import jax.numpy as jnp``, ``from gradguard import ...``) each is a complete module,
    and tests/checker/test_catalogue_examples.py checks that the broken one gets this finding and the
    fixed one passes."""
    if family not in FAMILIES:
        raise ValueError(f"Got family={family!r}; families are {FAMILIES}.")
    if severity not in ("error", "warning"):
        raise ValueError(f"Got severity={severity!r}; use 'error' or 'warning'.")
    if gates not in (None, "forward", "pullback"):
        raise ValueError(f"Got gates={gates!r}; use 'forward', 'pullback' or None.")

    def register(fn: Callable[..., Iterable[Problem]]) -> Callable[..., Iterable[Problem]]:
        if fn.__name__.startswith("_"):
            # a private helper defined between @check(...) and the check it was meant for would become the check
            raise ValueError(f"@check({id!r}) decorates the private function {fn.__qualname__}; define helpers above "
                             "the @check(...) line, not between it and the check's function")
        if id in CHECKS and CHECKS[id].fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"check id {id} registered twice ({CHECKS[id].fn.__qualname__} and {fn.__qualname__})")
        CHECKS[id] = CheckInfo(
            id=id,
            family=family,
            title=title,
            severity=severity,
            explanation=inspect.cleandoc(fn.__doc__ or ""),
            fn=fn,
            gates=gates,
            forward_only=forward_only,
            compares_calls=compares_calls,
            per_rule=per_rule,
            kinds=kinds,
            given_example=inspect.cleandoc(given),
            broken_example=inspect.cleandoc(broken),
            fixed_example=inspect.cleandoc(fixed),
        )
        return fn

    return register


"""The engine registry: every column the safety matrix may have, in order.

Adding an engine is one module that builds an `Engine` (see `_engine` for what it declares; `_tape_engine`
is a short example) and one entry in `REGISTRY` below. The matrix (`_matrix`), the context checks
(GG501-GG503) and the reports iterate this registry; nothing else names an engine.
"""

from __future__ import annotations

from typing import Any, Mapping

from gradguard.checker.contexts import _jax_engine, _tape_engine, _torch_engine
from gradguard.checker.contexts._engine import Engine
from gradguard.checker.specs import RuleSpec

__all__ = ["REGISTRY", "ENGINES", "engine", "engines_for", "check_settings"]

REGISTRY: tuple[Engine, ...] = (
    *_tape_engine.ENGINES,
    _jax_engine.ENGINE,
    _torch_engine.ENGINE,  # a column only where PyTorch is installed
)

ENGINES: tuple[str, ...] = tuple(e.name for e in REGISTRY)  # the column names, in order

_BY_NAME = {e.name: e for e in REGISTRY}


def engine(name: str) -> Engine:
    """The registered engine called ``name``; ValueError naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"Got engine {name!r}; engines are {', '.join(ENGINES)}.") from None


def engines_for(rule: RuleSpec) -> tuple[str, ...]:
    """The engines a rule's matrix runs by default: those that apply to its kind and convention (the tape
    hands an unused output's pullback None, ``tape[none]``, only for rules whose declared convention says
    None can arrive) and can run here."""
    return tuple(e.name for e in REGISTRY if e.applies_to(rule))


def check_settings(settings: Mapping[str, Any] | None) -> None:
    """ValueError naming the setting and its allowed values unless every one is an engine's (None: unset)."""
    known = {name: values for e in REGISTRY for name, values in e.settings.items()}
    for name, value in (settings or {}).items():
        if name not in known:
            raise ValueError(f"Got engine setting {name!r}; the engines' settings are {', '.join(known) or 'none'}.")
        if value is not None and value not in known[name]:
            raise ValueError(f"Got {name}={value!r}, but it must be one of {', '.join(map(repr, known[name]))}.")

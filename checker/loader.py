"""Finding rules: in a RuleSpec, a list of them, a module, a file, or a folder of rule modules.

A module that fails to import is recorded with the user's traceback and the
other modules are still loaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

from gradguard.checker.errors import LoadError, UsageError
from gradguard.checker.report import LoadFailure
from gradguard.checker.specs import RuleSpec

__all__ = ["collect", "load_module", "load_rule", "rules_in"]

SKIP_DIRS = {"__pycache__", ".git", ".hypothesis", ".venv", "venv", "node_modules", ".tox"}


def rules_in(module: ModuleType) -> list[RuleSpec]:
    """The RuleSpecs a module defines at top level, in definition order."""
    found = [v for v in vars(module).values() if isinstance(v, RuleSpec)]
    explicit = getattr(module, "GRADGUARD_RULES", None)
    if explicit is not None:
        found = list(explicit)
    seen: set[int] = set()
    unique = []
    for rule in found:
        if id(rule) not in seen:
            seen.add(id(rule))
            unique.append(rule)
    return unique


def load_module(path: str | Path) -> ModuleType:
    """Import a rule module from its file path; raises :class:`LoadError` with the user's traceback."""
    path = Path(path)
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    mod_name = f"gradguard_rules_{path.stem}_{digest}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise LoadError(str(path), f"{path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    parent = str(path.resolve().parent)
    added = parent not in sys.path
    if added:
        sys.path.insert(0, parent)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - any failure of user code is reported, SystemExit included
        del sys.modules[mod_name]
        # Start the traceback at the user's module: they see their code, not our import machinery.
        tb = start = exc.__traceback__
        while start is not None and Path(start.tb_frame.f_code.co_filename).resolve() != path.resolve():
            start = start.tb_next
        tb = start or tb
        text = "".join(traceback.format_exception(type(exc), exc, tb))
        raise LoadError(str(path), text) from None
    finally:
        if added:
            try:
                sys.path.remove(parent)
            except ValueError:
                pass
    return module


def load_rule(path: str | Path, name: str) -> RuleSpec:
    """One rule by file and name: how reproducers find the rule they replay."""
    for rule in rules_in(load_module(path)):
        if rule.name == name:
            return rule
    raise LoadError(str(path), f"no rule named {name!r} in {path}")


def _files(path: Path) -> Iterable[Path]:
    if path.is_dir():
        for child in sorted(path.rglob("*.py")):
            if not any(part in SKIP_DIRS or part.startswith(".") for part in child.relative_to(path).parts[:-1]):
                if not child.name.startswith("_") and not child.name.startswith("test_"):
                    yield child
    else:
        yield path


def collect(target: Any) -> tuple[list[RuleSpec], list[LoadFailure]]:
    """All rules in ``target`` (RuleSpec, iterable of them, module, path or folder, or a list of paths)."""
    if isinstance(target, RuleSpec):
        return [target], []
    if isinstance(target, ModuleType):
        return rules_in(target), []
    if isinstance(target, (str, Path)):
        targets: list[Any] = [target]
    elif isinstance(target, Iterable):
        targets = list(target)
    else:
        raise UsageError(f"Got {target!r}; pass a rule, a module, a path to a rule module or folder, or a list of those.")
    rules: list[RuleSpec] = []
    failures: list[LoadFailure] = []
    for item in targets:
        if isinstance(item, (RuleSpec, ModuleType)):
            rules.extend(collect(item)[0])
            continue
        path = Path(item)
        if not path.exists():
            raise UsageError(f"Got path {str(path)!r}, which does not exist. Pass a rule module (.py) or a folder of them.")
        for file in _files(path):
            try:
                rules.extend(rules_in(load_module(file)))
            except LoadError as err:
                failures.append(LoadFailure(path=str(file), traceback=err.traceback_text))
    return rules, failures

"""Finding rules: in a RuleSpec, a list of them, a module, a file, or a folder of rule modules.

A module that fails to import is recorded with the user's traceback and the
other modules are still loaded.

What is imported is explicit and safe. A file named on the command line is
imported. A folder's modules are imported except those that are never rule
modules: ``setup.py``, ``conftest.py``, ``noxfile.py``, ``__main__.py``,
tests and private modules (``test_*``, ``_*``), gradguard's own reproducer
scripts, and anything inside a virtualenv, a hidden folder or a build
folder. With no path at all, :func:`discover` looks for files named
``*_rules.py`` or ``rules_*.py`` and modules inside ``rules/`` folders.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

from gradguard.checker.errors import LoadError, UsageError
from gradguard.checker.report import LoadFailure
from gradguard.checker.specs import DECLARED_IN, RuleSpec

__all__ = ["collect", "discover", "is_rule_file", "load_module", "load_rule", "rules_in", "module_files"]

SKIP_DIRS = {"__pycache__", "node_modules", "venv", "virtualenv", "site-packages", "build", "dist",
             "__pypackages__", "htmlcov"}
NEVER_IMPORTED = {"setup.py", "conftest.py", "noxfile.py", "__main__.py"}
REPRODUCER_MARK = '"""Reproducer for '


def _skipped_dir(folder: Path) -> bool:
    name = folder.name
    return (name in SKIP_DIRS or name.startswith(".") or name.endswith(".egg-info")
            or (folder / "pyvenv.cfg").exists())


def _is_reproducer(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.startswith(REPRODUCER_MARK) and "gradguard.checker.reproducer import" in head


def is_rule_file(path: Path, root: Path | None = None) -> bool:
    """Default discovery's pattern: ``*_rules.py``, ``rules_*.py``, or a module inside a ``rules/`` folder."""
    parts = path.relative_to(root).parts[:-1] if root else path.parts[:-1]
    return path.suffix == ".py" and (path.stem.endswith("_rules") or path.stem.startswith("rules_")
                                     or "rules" in parts)


def module_files(folder: Path, *, exclude: Iterable[Path] = (), pattern: bool = False) -> list[Path]:
    """The modules of ``folder`` gradguard may import (see the module docstring); with ``pattern``,
    only those :func:`is_rule_file` accepts."""
    excluded = {p.resolve() for p in exclude}
    out: list[Path] = []

    def walk(here: Path) -> None:
        try:
            entries = sorted(here.iterdir())
        except OSError:
            return
        for entry in entries:
            if entry.resolve() in excluded:
                continue
            if entry.is_dir():
                if not _skipped_dir(entry):
                    walk(entry)
            elif (entry.suffix == ".py" and entry.name not in NEVER_IMPORTED and not entry.name.startswith(("_", "test_"))
                  and (not pattern or is_rule_file(entry, folder)) and not _is_reproducer(entry)):
                out.append(entry)

    walk(folder)
    return out


def discover(root: Path, *, exclude: Iterable[Path] = ()) -> list[Path]:
    """Default discovery when no path is given or configured: rule files by name under ``root``."""
    return module_files(root, exclude=exclude, pattern=True)


def rules_in(module: ModuleType) -> list[RuleSpec]:
    """The RuleSpecs a module defines at top level, in definition order."""
    found = [v for v in vars(module).values() if isinstance(v, RuleSpec)]
    explicit = getattr(module, "GRADGUARD_RULES", None)
    if explicit is not None:
        found = list(explicit)
    seen: set[int] = set()
    unique = []
    where = getattr(module, "__file__", None)
    for rule in found:
        if id(rule) not in seen:
            seen.add(id(rule))
            unique.append(rule)
            if where and DECLARED_IN not in rule.extra:
                rule.extra[DECLARED_IN] = where  # where load_rule finds it again (not where its code lives)
    _distinct_names(module, unique)
    return unique


def _distinct_names(module: ModuleType, rules: list[RuleSpec]) -> None:
    """Give rules that share a name in one module each its own: the name, then the module variable the rule is
    bound to (``AbsNaive[neg_rule]``), or its place among them (``AbsNaive[2]``).

    ``torch_rule(F, ...)`` and ``jax_rule(f, ...)`` are named after ``F`` and ``f``, so two configurations of one
    Function (two domains, two shapes) shared a name and its source lines: workers (``--jobs``), reproducers
    (``load_rule``) and the report could not tell them apart, and a worker checked the first in place of each,
    reporting its failure for the other's rule on an input that rule never draws. Deterministic, so every process
    that loads the module names them alike; a module loaded twice keeps the names it was given."""
    by_name: dict[str, list[RuleSpec]] = {}
    for rule in rules:
        by_name.setdefault(rule.name, []).append(rule)
    bound: dict[int, str] = {}
    for var, value in vars(module).items():
        if isinstance(value, RuleSpec):
            bound.setdefault(id(value), var)
    taken = {rule.name for rule in rules}
    for name, same in by_name.items():
        if len(same) < 2:
            continue
        for k, rule in enumerate(same, start=1):
            var = bound.get(id(rule))
            new = f"{name}[{var}]" if var and var != name else f"{name}[{k}]"
            while new in taken:
                new += "'"
            taken.add(new)
            rule.name = new


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
        text = _relative_paths("".join(traceback.format_exception(type(exc), exc, tb)))
        raise LoadError(_shown(path), text) from None
    finally:
        if added:
            try:
                sys.path.remove(parent)
            except ValueError:
                pass
    return module


def _shown(path: Path) -> str:
    """``path`` as the user wrote it relative to the working directory (the project, or a run's copy of it)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def _relative_paths(text: str) -> str:
    """A traceback with the working directory's prefix dropped from file names: the user's paths, not where a
    server unpacked their files."""
    cwd = str(Path.cwd().resolve())
    return text.replace(f'File "{cwd}{os.sep}', 'File "') if cwd != os.sep else text


def load_rule(path: str | Path, name: str, *, near: str | Path | None = None) -> RuleSpec:
    """One rule by file and name: how reproducers find the rule they replay.

    A relative ``path`` is looked up beside ``near`` (a reproducer passes its own ``__file__``) and in each
    folder above it, then in the working directory, so a reproducer runs from any directory."""
    path = _locate(Path(path), near)
    for rule in rules_in(load_module(path)):
        if rule.name == name:
            return rule
    raise LoadError(str(path), f"no rule named {name!r} in {path}")


def _locate(path: Path, near: str | Path | None) -> Path:
    if path.is_absolute():
        return path
    if near is not None:
        for folder in Path(near).resolve().parents:
            if (folder / path).is_file():
                return folder / path
    if path.is_file():
        return path
    where = f" beside {near} or in a folder above it, nor" if near is not None else ""
    raise LoadError(str(path), f"no rule module {str(path)!r} found{where} in the working directory {Path.cwd()}; "
                               "run the reproducer from inside the project that holds the rules")


def _files(path: Path) -> Iterable[Path]:
    if path.is_dir():
        yield from module_files(path)
    else:
        yield path


RULE_SEPARATOR = "::"  # ``rules.py::softplus_rrule``: one rule of a module, as pytest names one test


def split_rule_target(item: str | Path) -> tuple[Path, str | None]:
    """``(path, rule pattern)`` of a target written ``path::pattern`` (a rule name, or a glob of names); a path
    that exists as written is a path, whatever it contains."""
    text = str(item)
    if RULE_SEPARATOR not in text or Path(text).exists():
        return Path(item), None
    path, _, pattern = text.rpartition(RULE_SEPARATOR)
    if not path or not pattern:
        raise UsageError(f"Got {text!r}; write one rule of a module as PATH{RULE_SEPARATOR}NAME "
                         f"(e.g. rules.py{RULE_SEPARATOR}softplus_rrule; NAME may be a glob such as 'soft*').")
    return Path(path), pattern


def matching(rules: list[RuleSpec], pattern: str) -> list[RuleSpec]:
    """The rules whose name is ``pattern``, or matches it as a glob (``*``, ``?``, ``[...]``)."""
    return [r for r in rules if r.name == pattern or fnmatch.fnmatchcase(r.name, pattern)]


def no_rule_matches(pattern: str, rules: list[RuleSpec], where: str) -> UsageError:
    """The usage error for a rule pattern that selects nothing: what was there, and the closest names."""
    names = [r.name for r in rules]
    close = difflib.get_close_matches(pattern, list(dict.fromkeys(names)), n=3, cutoff=0.8)  # typos, not kin
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    have = f"its {len(names)} rule(s): {shown}" if names else "no rule"
    return UsageError(f"Got rule {pattern!r}, which names none of the rules in {where} ({have}).{hint} "
                      "Give a rule's name, or a glob of names such as 'soft*'.")


def collect(target: Any) -> tuple[list[RuleSpec], list[LoadFailure]]:
    """All rules in ``target`` (RuleSpec, iterable of them, module, path or folder, or a list of paths). A path
    written ``path::pattern`` gives only that module's rules named by the pattern (a name or a glob)."""
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
        path, pattern = split_rule_target(item)
        if not path.exists():
            raise UsageError(f"Got path {str(path)!r}, which does not exist. Pass a rule module (.py) or a folder of them.")
        found: list[RuleSpec] = []
        failed = len(failures)
        for file in _files(path):
            try:
                found.extend(rules_in(load_module(file)))
            except LoadError as err:
                failures.append(LoadFailure(path=_shown(file), traceback=err.traceback_text))
        if pattern is not None:
            chosen = matching(found, pattern)
            if not chosen and len(failures) == failed:  # (a module that failed to import is reported instead)
                raise no_rule_matches(pattern, found, str(path))
            found = chosen
        rules.extend(found)
    return rules, failures

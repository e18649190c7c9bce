"""The verdict cache: a rule that has not changed since its last check is not checked again.

Like pytest's ``.pytest_cache`` and mypy's ``.mypy_cache``, results live in a folder (default
``.gradguard_cache`` in the working directory) that carries a ``CACHEDIR.TAG`` (backup tools skip
it) and a ``.gitignore`` (version control ignores it). A rule's stored result is reused, and marked
``cached`` in the report, only when everything its verdict depends on is unchanged:

- the source of the rule's module and of every module of the user's project it imports, directly or
  through other project modules (found from the ``import`` statements, without importing anything;
  the standard library, installed packages and gradguard itself are not the user's project);
- the rule's specs (argument strategies, ``mutates``, ``nondiff``, ``nondiff_outputs``, tolerances, declared
  conventions, name, lines);
- gradguard itself (its version and the source of its checker and engines), Python and the versions of
  NumPy, Hypothesis, JAX and PyTorch;
- the settings: selected checks, seed, examples, time limit, device, the folder paths are shown
  relative to.

Only ``pass`` and ``fail`` verdicts are stored: an ``error`` (a time limit, a dead worker) may not
happen again. A rule with no source file (defined in a notebook or by ``exec``) is always checked. What
the key cannot see (data files a rule reads, imports made inside functions by computed names) is what
``--no-cache`` is for. A cache that cannot be written (a read-only folder) is skipped silently.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import site
import sys
import sysconfig
from dataclasses import asdict
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from gradguard.checker._version import VERSION
from gradguard.checker.report import RuleResult

__all__ = ["DEFAULT_CACHE_DIR", "VerdictCache", "project_sources", "tool_fingerprint"]

DEFAULT_CACHE_DIR = ".gradguard_cache"
_FORMAT = "v1"
_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by gradguard.\n"
    "# For information about cache directory tags, see:\n"
    "#\thttps://bford.info/cachedir/spec.html\n"
)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # reprs of functions and objects: the same spec, another address


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@lru_cache(maxsize=1)
def _outside_project() -> tuple[str, ...]:
    """Folders whose modules are not the user's project: the standard library and installed packages."""
    paths = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        paths.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover - some virtualenvs
        pass
    paths.add(getattr(site, "USER_SITE", None))
    return tuple(sorted(os.path.realpath(p) + os.sep for p in paths if p))


def _in_project(origin: str) -> bool:
    real = os.path.realpath(origin)
    return real.endswith(".py") and not real.startswith(_outside_project())


def _find(name: str, first: list[str]) -> str | None:
    """The source file of module ``name`` (dotted) as an import would find it, without importing it."""
    search: list[str] | None = first + sys.path
    spec = None
    parts = name.split(".")
    for i in range(len(parts)):
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
    return spec.origin if spec is not None and spec.origin and os.path.isfile(spec.origin) else None


def _imported_names(tree: ast.AST, package: str | None) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                names.update(".".join(parts[: i + 1]) for i in range(len(parts)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                if not package:
                    continue  # a relative import in a file loaded on its own cannot run anyway
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            parts = base.split(".")
            names.update(".".join(parts[: i + 1]) for i in range(len(parts)))
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")  # submodules
    return names


def project_sources(path: str | os.PathLike[str]) -> dict[str, str]:
    """``{file: sha256}`` for ``path`` and every module of the user's project it imports, transitively."""
    root = os.path.dirname(os.path.realpath(path))
    found: dict[str, str] = {}
    todo: list[tuple[str, str | None]] = [(os.path.realpath(path), None)]
    while todo:
        file, name = todo.pop()
        if file in found:
            continue
        data = Path(file).read_bytes()
        found[file] = _digest(data)
        package = None if name is None else (name if file.endswith("__init__.py") else name.rpartition(".")[0] or None)
        try:
            tree = ast.parse(data, filename=file)
        except (SyntaxError, ValueError):
            continue
        here = [os.path.dirname(file), root]
        for module in sorted(_imported_names(tree, package)):
            if module.split(".")[0] in sys.stdlib_module_names or module.split(".")[0] == "gradguard":
                continue
            origin = _find(module, here)
            if origin is not None and _in_project(origin):
                todo.append((os.path.realpath(origin), module))
    return found


@lru_cache(maxsize=1)
def tool_fingerprint() -> str:
    """gradguard's own code and the versions of what it runs on: a change to either re-checks everything."""
    # The two packages' folders, found without importing them (a checkout maps them, a wheel nests them).
    folders = [Path(importlib.util.find_spec(name).origin).parent  # type: ignore[union-attr]
               for name in ("gradguard.checker", "gradguard.engines")]
    h = hashlib.sha256(f"{VERSION}|{sys.version}".encode())
    for dist in ("numpy", "hypothesis", "jax", "jaxlib", "torch"):
        try:
            h.update(f"|{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"|{dist}=-".encode())
    for folder in folders:
        for file in sorted(folder.rglob("*.py")):
            h.update(file.relative_to(folder).as_posix().encode() + b"\0" + file.read_bytes())
    return h.hexdigest()


def _spec_text(rule: Any) -> str:
    fields = {
        "name": rule.name,
        "kind": rule.kind,
        "lines": rule.source_lines,
        "mutates": sorted(rule.mutates),
        "nondiff": sorted(rule.nondiff),
        "rtol": rule.rtol,
        "atol": rule.atol,
        "unused_cotangent": rule.unused_cotangent,
        "complex_convention": rule.complex_convention,
        "ignore": list(rule.ignore),
        "nondiff_outputs": sorted(rule.nondiff_outputs),
        "nargs": rule.nargs,
        "args": repr(rule.args_strategy),
    }
    return _ADDRESS.sub("", json.dumps(fields, default=repr, sort_keys=True))


class VerdictCache:
    """Stored rule results under ``folder``, keyed by everything a verdict depends on."""

    def __init__(self, folder: str | os.PathLike[str], settings: dict[str, Any]) -> None:
        self.folder = Path(folder)
        self.settings = json.dumps(settings, default=repr, sort_keys=True)
        self._sources: dict[str, dict[str, str]] = {}
        self.writable = True

    def key(self, rule: Any) -> str | None:
        """The rule's cache key, or None when it cannot be cached (no source file)."""
        source = rule.source_file
        if not source or not os.path.isfile(source):
            return None
        real = os.path.realpath(source)
        try:
            if real not in self._sources:
                self._sources[real] = project_sources(real)
            spec = _spec_text(rule)
        except Exception:  # noqa: BLE001 - an unreadable source or spec: check the rule, do not guess
            return None
        parts = [_FORMAT, tool_fingerprint(), self.settings, real, spec]
        parts += [f"{f}={d}" for f, d in sorted(self._sources[real].items())]
        return _digest("\n".join(parts).encode())

    def _path(self, key: str) -> Path:
        return self.folder / _FORMAT / "verdicts" / key[:2] / f"{key}.json"

    def get(self, key: str | None) -> RuleResult | None:
        if key is None:
            return None
        try:
            data = json.loads(self._path(key).read_text())
            result = RuleResult.from_dict(data["result"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        result.cached = True
        result.duration_s = 0.0  # nothing was checked in this run
        return result

    def put(self, key: str | None, result: RuleResult) -> None:
        if key is None or result.verdict not in ("pass", "fail") or not self.writable:
            return
        path = self._path(key)
        try:
            self._make_folder()
            path.parent.mkdir(parents=True, exist_ok=True)
            data = asdict(result)
            data["cached"] = False
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"key": key, "result": data}, default=str))
            os.replace(tmp, path)
        except OSError:
            self.writable = False  # a read-only folder: check without storing

    def prepare(self) -> bool:
        """Create the folder (tagged and ignored); False when it cannot be written."""
        try:
            self._make_folder()
        except OSError:
            self.writable = False
        return self.writable

    def _make_folder(self) -> None:
        if (self.folder / "CACHEDIR.TAG").is_file():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / ".gitignore").write_text("# Created by gradguard automatically.\n*\n")
        (self.folder / "CACHEDIR.TAG").write_text(_TAG)

"""Project configuration: the ``[tool.gradguard]`` table of ``pyproject.toml``.

    [tool.gradguard]
    paths = ["src/mylib/rules"]       # where the rules are (default: discovery, see checker.loader)
    select = ["GG1", "GG2"]
    ignore = ["GG203"]
    seed = 0
    max-examples = 50
    timeout = 300                     # per rule, in seconds (0: none)
    memory-limit = 4096               # growth of resident memory per rule, in MB (0: none)
    input-budget = 60                 # checking time per rule after which no new input is drawn, in s (0: none)
    jobs = 0                          # worker processes (0: one per CPU)
    unused-cotangent = "zeros"        # the convention for an unused output's cotangent
    jax-column = "auto"               # the JAX column's context programs: "auto", "jit", "eager" or "traced"
    cache-dir = ".gradguard-cache"
    reproducers = "repro"             # where --reproducers writes; never imported as rules

The command line overrides every key. Each key maps onto one :func:`gradguard.check` keyword through
:data:`KEYS`, so a new setting is one line there; the CLI, the pytest plugin, the Action and
``gradguard submit`` all read the same table. An unknown key is an error naming it, with close matches.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradguard.checker.errors import UsageError
from gradguard.engines.errors import clause

__all__ = ["Key", "KEYS", "Config", "ConfigError", "load_config", "find_pyproject", "check_kwargs", "resolve", "validate"]


class ConfigError(UsageError):
    """The ``[tool.gradguard]`` table has an unknown key or a value of the wrong type."""


@dataclass(frozen=True)
class Key:
    keyword: str | None  # the gradguard.check() keyword it sets; None: read by the CLI itself
    kind: str  # "int", "float", "str", "bool" or "list" (a list of strings; a comma-separated string works too)
    option: str | None  # the CLI parameter that overrides it


# One line per setting: config key -> check() keyword, its type, the CLI parameter that overrides it.
KEYS: dict[str, Key] = {
    "paths": Key(None, "list", "paths"),
    "select": Key("select", "list", "select"),
    "ignore": Key("ignore", "list", "ignore"),
    "seed": Key("seed", "int", "seed"),
    "max-examples": Key("max_examples", "int", "max_examples"),
    "timeout": Key("rule_timeout_s", "float", "rule_timeout"),
    "memory-limit": Key("memory_limit_mb", "float", "memory_limit"),
    "input-budget": Key("input_budget_s", "float", "input_budget"),
    "jobs": Key("jobs", "int", "jobs"),
    "unused-cotangent": Key("unused_cotangent", "str", "unused_cotangent"),
    "jax-column": Key("jax_column", "str", "jax_column"),
    "cache-dir": Key("cache_dir", "str", "cache_dir"),
    "cache": Key("use_cache", "bool", "use_cache"),
    "reproducers": Key(None, "str", "repro_dir"),
    "device": Key(None, "str", "device"),
}


@dataclass
class Config:
    values: dict[str, Any] = field(default_factory=dict)
    root: Path = field(default_factory=Path.cwd)  # paths in the config are relative to this
    source: Path | None = None  # the pyproject.toml it came from

    def paths(self) -> list[Path]:
        return [self.root / p for p in self.values.get("paths", [])]

    def path(self, key: str) -> Path | None:
        value = self.values.get(key)
        return None if value is None else self.root / value


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.gradguard]`` table, from ``start`` (default: cwd) upwards."""
    here = (start or Path.cwd()).resolve()
    for folder in [here, *here.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and "gradguard" in _read(candidate).get("tool", {}):
            return candidate
    return None


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {clause(exc)}. Fix the file or pass --config with another one.") from None


def load_config(start: Path | None = None, file: Path | None = None) -> Config:
    """The project's configuration: ``file`` if given, else the nearest pyproject.toml with ``[tool.gradguard]``;
    an empty one when there is none."""
    source = file or find_pyproject(start)
    if source is None:
        return Config(root=(start or Path.cwd()).resolve())
    if not source.is_file():
        raise ConfigError(f"Got --config {str(source)!r}, which is not a file. Pass a pyproject.toml.")
    table = _read(source).get("tool", {}).get("gradguard", {})
    return Config(values=validate(table, where=f"{source.name} [tool.gradguard]"), root=source.resolve().parent,
                  source=source)


def validate(table: dict[str, Any], *, where: str = "[tool.gradguard]") -> dict[str, Any]:
    """The table with each value checked and normalised; unknown keys are an error with close matches."""
    out: dict[str, Any] = {}
    for name, value in table.items():
        key = KEYS.get(name)
        if key is None:
            close = difflib.get_close_matches(name.replace("_", "-"), list(KEYS), n=3, cutoff=0.5)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise ConfigError(f"{where}: unknown key {name!r}.{hint} Known keys: {', '.join(KEYS)}.")
        out[name] = _convert(name, key.kind, value, where)
    return out


def _convert(name: str, kind: str, value: Any, where: str) -> Any:
    bad = ConfigError(f"{where}: got {name} = {value!r}, but {name} must be {_KIND_WORDS[kind]}.")
    if kind == "list":
        if isinstance(value, str):
            value = [p.strip() for p in value.split(",") if p.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad
        return value
    if kind == "int":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise bad
        return value
    if kind == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise bad
        return float(value)
    if not isinstance(value, str) or not value:
        raise bad
    return value


_KIND_WORDS = {
    "list": "a list of strings (or one comma-separated string)",
    "bool": "true or false",
    "int": "an integer >= 0",
    "float": "a number >= 0",
    "str": "a non-empty string",
}


def check_kwargs(values: dict[str, Any]) -> dict[str, Any]:
    """The :func:`gradguard.check` keywords that configuration ``values`` set."""
    out = {KEYS[name].keyword: value for name, value in values.items() if KEYS[name].keyword}
    for keyword in ("rule_timeout_s", "memory_limit_mb", "input_budget_s"):  # 0: no limit
        if out.get(keyword) == 0:
            out[keyword] = None
    return out


def resolve(config: Config, params: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """check() keywords from the command line's ``params`` over ``config`` over the command line's defaults.

    ``given`` names the parameters the user typed; the others hold the CLI's defaults, which a configured
    value replaces."""
    values: dict[str, Any] = {}
    for name, key in KEYS.items():
        typed = key.option in given
        if typed or (name not in config.values and key.option in params):
            value = params[key.option]
            if key.kind == "list" and value is not None:
                value = [p.strip() for v in value for p in str(v).split(",") if p.strip()] or None
            if value is not None or typed:
                values[name] = value
        elif name in config.values:
            values[name] = config.values[name]
    return values

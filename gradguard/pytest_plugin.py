"""The pytest plugin (entry point ``pytest11``): ``pytest --gradguard`` collects rules as test items.

One item per rule, named after the rule, so ``-k`` selects rules; a failing rule's findings are the
failure text. Which files hold rules is decided as ``gradguard check`` decides it: the ``paths`` of
``[tool.gradguard]``, else files named ``*_rules.py``, ``rules_*.py`` or inside a ``rules/`` folder;
the other settings of that table (select, ignore, seed, ...) apply too.

Without ``--gradguard`` the plugin does nothing, and it imports nothing of gradguard's until then.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

__all__ = ["pytest_addoption", "pytest_configure", "pytest_collect_file", "RulesFile", "RuleItem"]

_STATE = pytest.StashKey[dict[str, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gradguard", "checking custom differentiation rules")
    group.addoption("--gradguard", action="store_true", default=False,
                    help="collect the rules in rule modules ([tool.gradguard] paths, else *_rules.py, rules_*.py "
                         "and rules/ modules) as test items, one per rule")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gradguard: a rule collected by gradguard's pytest plugin")
    if not config.getoption("gradguard"):
        return
    from gradguard.checker.config import load_config
    from gradguard.checker.testing import settings_for

    gg = load_config(start=Path(config.rootpath))
    config.stash[_STATE] = {"config": gg, "kwargs": settings_for(Path(config.rootpath)),
                            "paths": [p.resolve() for p in gg.paths()]}
    # With no path on the command line pytest visits only `testpaths`: add the rules' own places.
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        extra = [str(p) for p in gg.paths()] or [str(config.rootpath)]
        config.args = [*config.args, *(a for a in extra if a not in config.args)]


def _wanted(path: Path, state: dict[str, Any]) -> bool:
    from gradguard.checker.loader import NEVER_IMPORTED, _is_reproducer, is_rule_file

    if path.suffix != ".py" or path.name in NEVER_IMPORTED or path.name.startswith(("_", "test_")):
        return False
    configured, root, resolved = state["paths"], state["config"].root, path.resolve()
    if configured:
        inside = any(resolved == p or p in resolved.parents for p in configured)
    else:
        inside = is_rule_file(resolved, root if root in resolved.parents else None)
    return inside and not _is_reproducer(path)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    state = parent.config.stash.get(_STATE, None)
    if state is None or not _wanted(file_path, state):
        return None
    return RulesFile.from_parent(parent, path=file_path)


class RulesFile(pytest.File):
    """A rule module: one :class:`RuleItem` per rule it defines."""

    def collect(self) -> Any:
        from gradguard.checker.errors import LoadError
        from gradguard.checker.loader import load_module, rules_in

        try:
            module = load_module(self.path)
        except LoadError as err:
            raise self.CollectError(f"gradguard: {self.path} failed to import\n{err.traceback_text}") from None
        for rule in rules_in(module):
            yield RuleItem.from_parent(self, name=rule.name, rule=rule)


class RuleFailed(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class RuleItem(pytest.Item):
    """One rule, checked by :func:`gradguard.check` with the project's settings."""

    def __init__(self, *, rule: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rule = rule
        self.add_marker("gradguard")

    def runtest(self) -> None:
        from gradguard.checker.runner import check
        from gradguard.checker.terminal import render_text
        from gradguard.checker.testing import warn_fewer_inputs, warn_raised

        report = check(self.rule, **self.config.stash[_STATE]["kwargs"])
        self.user_properties.append(("gradguard_verdict", report.rules[0].verdict if report.rules else "none"))
        warn_fewer_inputs(report)
        warn_raised(report)
        if not report.passed:
            result = report.rules[0] if report.rules else None
            if result is not None and result.error:
                headline = f"{result.error['type']}: {result.error['message']}"
            else:
                headline = ", ".join(sorted({f"{f.check_id} {f.title}" for f in report.findings if f.severity != "warning"}))
            raise RuleFailed(f"{self.name}: {headline}\n\n{render_text(report)}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, RuleFailed):
            return excinfo.value.text
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        lines = self.rule.source_lines
        return self.path, (lines[0] - 1 if lines else None), f"gradguard rule {self.name}"

"""The `gradguard` command line.

Exit codes are a contract:
    0  every rule passed
    1  findings (or a rule module that failed to import, or a rule that errored)
    2  usage error (unknown option, check id or command; with close-match suggestions)
    3  internal error in gradguard itself

`gradguard check` lives here. The upper layers plug their commands (`serve`,
`worker`, `submit`, `migrate`) in through the ``gradguard.commands`` entry
point group, so this module never imports them.
"""

from __future__ import annotations

import difflib
import os
import sys
import traceback
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from gradguard.checker._version import VERSION
from gradguard.checker._memory import default_limit_mb
from gradguard.checker.errors import GradguardError, UsageError
from gradguard.checker.options import DEFAULT_INPUT_BUDGET_S

__all__ = ["main", "EXIT_OK", "EXIT_FINDINGS", "EXIT_USAGE", "EXIT_INTERNAL", "EXIT_STUCK", "EXIT_NO_RULES"]

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_STUCK = 6  # a rule stuck in native code past its time limit stopped the run (gradguard.checker._deadline)
EXIT_NO_RULES = 5  # as pytest's "no tests collected": nothing was checked, which is not a pass
DEFAULT_MEMORY_LIMIT_MB = default_limit_mb()  # as check()'s (options.py), without importing the runner here


class _Commands(click.Group):
    """Built-in commands plus those registered by installed layers, with close-match suggestions."""

    def _plugins(self) -> dict[str, Any]:
        return {ep.name: ep for ep in entry_points(group="gradguard.commands")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._plugins()))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        cmd = super().get_command(ctx, name)
        if cmd is not None:
            return cmd
        ep = self._plugins().get(name)
        return ep.load() if ep is not None else None

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, prog_name="gradguard")
def main() -> None:
    """gradguard: verify custom differentiation rules, alone and inside adversarial programs."""


@main.command("check")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("-k", "--rule", "rules", multiple=True, metavar="NAMES",
              help="Only the rules with these names, or names matching these globs (e.g. -k softplus_rrule -k 'log*'; "
                   "comma-separated works too). PATH::NAME in PATHS chooses within one module.")
@click.option("--select", multiple=True, metavar="IDS", help="Only these check ids or prefixes (e.g. GG2,GG301).")
@click.option("--ignore", multiple=True, metavar="IDS", help="Skip these check ids or prefixes.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed for input generation: same seed, same verdict.")
@click.option("--max-examples", type=click.IntRange(min=1), help="Inputs tried per check (default 20).")
@click.option("--timeout", "rule_timeout", type=click.FloatRange(min=0), default=120.0, show_default=True, help="Per-rule time limit in seconds (0: none): the checker's own time, not its threads' waits for a CPU held by other processes (Linux), and at most 3x this in wall time.")
@click.option("--memory-limit", "memory_limit", type=click.FloatRange(min=0), default=DEFAULT_MEMORY_LIMIT_MB,
              show_default="half the physical memory", metavar="MB",
              help="How much each rule may grow the process's resident memory, in MB (0: none).")
@click.option("--input-budget", "input_budget", type=click.FloatRange(min=0), default=DEFAULT_INPUT_BUDGET_S,
              show_default=True, metavar="SECONDS",
              help="Once a rule's checks have taken this long (counted as --timeout counts), no new input is drawn for "
                   "it, and the report says how many it was checked on (0: none, every input --max-examples asks for).")
@click.option("--device", type=click.Choice(["cpu", "gpu"]), default=None, help="Platform for the JAX engine.")
@click.option("--unused-cotangent", type=click.Choice(["zeros", "none"]), default=None,
              help="What an unused output's pullback receives, for rules that declare no unused_cotangent= "
                   "(default zeros: JAX and PyTorch pass zeros; none: ChainRules-style engines pass None, GG302).")
@click.option("--jax-column", type=click.Choice(["auto", "jit", "eager", "traced"]), default=None,
              help="How the safety matrix's JAX column runs each context program: compiled once per rule, context "
                   "and shapes (jit), eagerly, primitive by primitive (eager), traced by JAX and run with NumPy, no "
                   "compilation (traced: NumPy rules; JAX rules run eagerly), or traced for NumPy rules and, for JAX "
                   "rules, compiled while JAX's persistent cache is on and eager otherwise (auto, the default); the "
                   "same verdicts.")
@click.option("-j", "--jobs", type=click.IntRange(min=0), default=None, help="Check rules on this many worker processes (0: one per CPU; default: one per CPU for more than 4 rules, else 1); same report.")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=".gradguard_cache", show_default=True, envvar="GRADGUARD_CACHE_DIR", help="Reuse the verdicts of rules unchanged since they were last checked, stored in this folder.")
@click.option("--no-cache", is_flag=True, envvar="GRADGUARD_NO_CACHE", help="Check every rule, reusing and storing no verdict.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the JSON report here ('-' for stdout).")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), help="Write a JUnit XML report here.")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path), help="Write a Markdown summary here.")
@click.option("--sarif", "sarif_path", type=click.Path(path_type=Path), help="Write a SARIF 2.1.0 log here (GitHub code scanning).")
@click.option("--reproducers", "repro_dir", type=click.Path(path_type=Path), help="Write one reproducer script per finding into this folder.")
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False), help="Read [tool.gradguard] from this pyproject.toml (default: the nearest one).")
@click.option("--progress/--no-progress", default=None, help="Show progress on stderr (default: when stderr is a terminal).")
@click.option("-v", "--verbose", is_flag=True, help="Also show every safety matrix, skipped checks, warnings in full and tracebacks.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the summary line.")
@click.pass_context
def check_command(ctx: click.Context, paths: tuple[Path, ...], **params: Any) -> None:
    """Check the rules in PATHS (rule modules or folders of them).

    Without PATHS: the `paths` of [tool.gradguard] in pyproject.toml, else every *_rules.py, rules_*.py
    and rules/ module under the project. Options given here override the configuration."""
    from gradguard.checker.config import check_kwargs, load_config, resolve

    try:
        config = load_config(file=params["config_path"])
    except UsageError as exc:
        _usage(str(exc))
    # Typed options and environment variables (GRADGUARD_CACHE_DIR, GRADGUARD_NO_CACHE) override the configuration.
    typed = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    given = {name for name in ctx.params if ctx.get_parameter_source(name) in typed}
    params["use_cache"] = not params.pop("no_cache")  # the config key `cache` and check(use_cache=)
    if "no_cache" in given:
        given.add("use_cache")
    values = resolve(config, {**params, "paths": paths}, given)
    params["repro_dir"] = params["repro_dir"] or config.path("reproducers")
    params["device"] = values.get("device")
    files = _targets(paths, config, params["repro_dir"])
    kwargs = check_kwargs(values)
    if params["rules"]:
        kwargs["rules"] = list(params["rules"])
    kwargs.setdefault("jobs", None)  # unset: one worker per CPU above a handful of rules (runner.check)
    _run_check(files, kwargs, **params)


def _targets(paths: tuple[Path, ...], config: Any, repro_dir: Path | None) -> list[Path | str]:
    """The rule modules to import: the paths given, else the configured ones, else discovery (checker.loader). A
    path given as ``PATH::NAME`` stays so: the runner then checks only that module's rules NAME names."""
    from gradguard.checker.loader import RULE_SEPARATOR, discover, module_files, split_rule_target

    chosen = list(paths) or config.paths()
    try:
        split = [split_rule_target(p) for p in chosen]
    except UsageError as exc:
        _usage(str(exc))
    missing = [str(p) for p, _ in split if not p.exists()]
    if missing:
        where = "" if paths else f" (from `paths` in {config.source})"
        _usage(f"Got path {missing[0]!r}{where}, which does not exist. Pass rule modules (.py) or folders of them.")
    exclude = [repro_dir] if repro_dir else []
    if not chosen:
        return discover(config.root, exclude=exclude)
    out: list[Path | str] = []
    for path, pattern in split:
        if pattern is not None:  # a folder's pattern chooses among all its modules' rules at once
            out.append(f"{path}{RULE_SEPARATOR}{pattern}")
        else:
            out.extend(module_files(path, exclude=exclude) if path.is_dir() else [path])
    return out


def _run_check(files: list[Path], kwargs: dict[str, Any], *, device: str | None, repro_dir: Path | None,
               json_path: Path | None, junit_path: Path | None, markdown_path: Path | None,
               sarif_path: Path | None, progress: bool | None, verbose: bool, quiet: bool, **_: Any) -> None:
    from gradguard.checker.per_rule import STUCK_HOOKS
    from gradguard.checker.render import render_junit, render_markdown
    from gradguard.checker.runner import check
    from gradguard.checker.sarif import render_sarif
    from gradguard.checker.terminal import render_text, use_color

    if device:
        os.environ["GRADGUARD_DEVICE"] = device
    show_progress = sys.stderr.isatty() if progress is None else progress

    finished: list[Any] = []

    def on_rule(result: Any, done: int, total: int) -> None:
        finished.append(result)
        if show_progress:
            click.echo(f"[{done}/{total}] {result.name}: {result.verdict} ({result.duration_s:.2f} s)", err=True)

    def on_stuck(rule: Any, reason: str) -> None:
        """A rule stuck in native code past its time limit: the process must end (checker._deadline); say what
        was checked before it, since no report will follow."""
        for result in finished:
            click.echo(f"{result.verdict.upper():5} {result.name}")
        click.echo(f"gradguard: {reason}. The run was stopped here: {len(finished)} rule(s) checked before it (above), "
                   "the others not. Draw inputs where the rule ends, or check with --jobs 2: each rule then runs in a "
                   "worker process, and a stuck one is reported alone while the others are checked.", err=True)

    STUCK_HOOKS.append(on_stuck)
    try:
        report = check(files, progress=on_rule, **kwargs)
    except UsageError as exc:
        _usage(str(exc))
    except GradguardError as exc:
        click.echo(f"gradguard: {exc}", err=True)
        sys.exit(EXIT_INTERNAL)
    except Exception:  # noqa: BLE001 - a crash of gradguard itself: exit 3 with the traceback
        click.echo("gradguard: internal error\n" + traceback.format_exc(), err=True)
        sys.exit(EXIT_INTERNAL)
    finally:
        STUCK_HOOKS.remove(on_stuck)

    to_stdout_json = json_path is not None and str(json_path) == "-"
    if not to_stdout_json:
        click.echo(render_text(report, color=use_color(sys.stdout), verbose=verbose, quiet=quiet), nl=False)
    if json_path is not None:
        _write(json_path, report.to_json())
    if junit_path is not None:
        _write(junit_path, render_junit(report))
    if markdown_path is not None:
        _write(markdown_path, render_markdown(report))
    if sarif_path is not None:
        _write(sarif_path, render_sarif(report))
    if repro_dir is not None:
        _write_reproducers(repro_dir, report)

    internal = any(r.error and r.error.get("type") == "InternalError" for r in report.rules)
    if internal:
        sys.exit(EXIT_INTERNAL)
    sys.exit(EXIT_NO_RULES if report.no_rules else (EXIT_OK if report.passed else EXIT_FINDINGS))


@main.command("explain")
@click.argument("check_id", required=False)
def explain_command(check_id: str | None) -> None:
    """Explain a check id (or list them all)."""
    from gradguard.checker.checks import CHECKS, catalogue
    from gradguard.checker.explain import explain_text, suggest

    checks = catalogue()
    if not check_id:
        for info in checks:
            click.echo(f"{info.id}  {info.family:<9}  {info.severity:<7}  {info.title}")
        return
    info = CHECKS.get(check_id.upper())
    if info is None:
        _usage(suggest(check_id, checks))
    click.echo(explain_text(info), nl=False)


def _write(path: Path, text: str) -> None:
    if str(path) == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _write_reproducers(folder: Path, report: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for rule in report.rules:
        for n, finding in enumerate(rule.findings):
            if finding.reproducer:
                (folder / f"repro_{rule.name}_{finding.check_id}_{n}.py").write_text(finding.reproducer)


def _usage(message: str) -> None:
    click.echo(f"Usage error: {message}", err=True)
    sys.exit(EXIT_USAGE)

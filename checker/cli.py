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

from gradguard.checker.errors import GradguardError, UsageError

__all__ = ["main", "EXIT_OK", "EXIT_FINDINGS", "EXIT_USAGE", "EXIT_INTERNAL", "EXIT_NO_RULES"]

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_NO_RULES = 5  # as pytest's "no tests collected": nothing was checked, which is not a pass


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
@click.version_option("0.1.0", prog_name="gradguard")
def main() -> None:
    """gradguard: verify custom differentiation rules, alone and inside adversarial programs."""


def _split(values: tuple[str, ...]) -> list[str] | None:
    items = [p.strip() for v in values for p in v.split(",") if p.strip()]
    return items or None


@main.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--select", multiple=True, metavar="IDS", help="Only these check ids or prefixes (e.g. GG2,GG301).")
@click.option("--ignore", multiple=True, metavar="IDS", help="Skip these check ids or prefixes.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed for input generation: same seed, same verdict.")
@click.option("--max-examples", type=click.IntRange(min=1), help="Inputs tried per check (default 20).")
@click.option("--timeout", "rule_timeout", type=click.FloatRange(min=0), default=120.0, show_default=True, help="Per-rule time limit in seconds (0: none).")
@click.option("--device", type=click.Choice(["cpu", "gpu"]), default=None, help="Platform for the JAX engine.")
@click.option("--unused-cotangent", type=click.Choice(["zeros", "none"]), default=None,
              help="What an unused output's pullback receives, for rules that declare no unused_cotangent= "
                   "(default zeros: JAX and PyTorch pass zeros; none: ChainRules-style engines pass None, GG302).")
@click.option("-j", "--jobs", type=click.IntRange(min=0), default=1, show_default=True, help="Check rules on this many worker processes (0: one per CPU); same report.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the JSON report here ('-' for stdout).")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), help="Write a JUnit XML report here.")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path), help="Write a Markdown summary here.")
@click.option("--reproducers", "repro_dir", type=click.Path(path_type=Path), help="Write one reproducer script per finding into this folder.")
@click.option("--progress/--no-progress", default=None, help="Show progress on stderr (default: when stderr is a terminal).")
@click.option("-v", "--verbose", is_flag=True, help="Show every safety matrix and full tracebacks.")
def check_command(
    paths: tuple[Path, ...],
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    seed: int,
    max_examples: int | None,
    rule_timeout: float,
    device: str | None,
    unused_cotangent: str | None,
    jobs: int,
    json_path: Path | None,
    junit_path: Path | None,
    markdown_path: Path | None,
    repro_dir: Path | None,
    progress: bool | None,
    verbose: bool,
) -> None:
    """Check the rules in PATHS (rule modules or folders of them)."""
    from gradguard.checker.render import render_junit, render_markdown, render_text
    from gradguard.checker.runner import check

    if device:
        os.environ["GRADGUARD_DEVICE"] = device
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        _usage(f"Got path {missing[0]!r}, which does not exist. Pass rule modules (.py) or folders of them.")
    show_progress = sys.stderr.isatty() if progress is None else progress

    def on_rule(result: Any, done: int, total: int) -> None:
        if show_progress:
            click.echo(f"[{done}/{total}] {result.name}: {result.verdict} ({result.duration_s:.2f} s)", err=True)

    try:
        report = check(
            list(paths),
            select=_split(select),
            ignore=_split(ignore),
            seed=seed,
            max_examples=max_examples,
            rule_timeout_s=rule_timeout or None,
            progress=on_rule,
            jobs=jobs,
            unused_cotangent=unused_cotangent,
        )
    except UsageError as exc:
        _usage(str(exc))
    except GradguardError as exc:
        click.echo(f"gradguard: {exc}", err=True)
        sys.exit(EXIT_INTERNAL)
    except Exception:  # noqa: BLE001 - a crash of gradguard itself: exit 3 with the traceback
        click.echo("gradguard: internal error\n" + traceback.format_exc(), err=True)
        sys.exit(EXIT_INTERNAL)

    to_stdout_json = json_path is not None and str(json_path) == "-"
    if not to_stdout_json:
        click.echo(render_text(report, color=sys.stdout.isatty(), verbose=verbose), nl=False)
    if json_path is not None:
        _write(json_path, report.to_json())
    if junit_path is not None:
        _write(junit_path, render_junit(report))
    if markdown_path is not None:
        _write(markdown_path, render_markdown(report))
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

    checks = catalogue()
    if not check_id:
        for info in checks:
            click.echo(f"{info.id}  {info.family:<9}  {info.severity:<7}  {info.title}")
        return
    info = CHECKS.get(check_id.upper())
    if info is None:
        close = difflib.get_close_matches(check_id.upper(), [c.id for c in checks], n=3)
        _usage(f"Got {check_id!r}, which is not a check id." + (f" Did you mean {', '.join(close)}?" if close else ""))
    click.echo(f"{info.id} ({info.family}, {info.severity}): {info.title}\n\n{info.explanation}")
    if info.given_example:
        click.echo(f"\nGiven:\n{_indent(info.given_example)}")
    if info.broken_example:
        click.echo(f"\nBroken:\n{_indent(info.broken_example)}\nFixed:\n{_indent(info.fixed_example)}")


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


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

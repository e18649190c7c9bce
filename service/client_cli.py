"""`gradguard submit`: upload rule files to a gradguard server, wait for the verdict, report it to CI.

    gradguard submit rules/ --server https://gradguard.example.org --token "$GRADGUARD_TOKEN" --wait

Commit, branch and pull request come from the GitHub Actions environment when not given
(``GITHUB_SHA``, ``GITHUB_HEAD_REF``/``GITHUB_REF_NAME``, the event file). On GitHub Actions
it also writes the Markdown job summary (``$GITHUB_STEP_SUMMARY``), ``::error`` annotations at
the rule's source lines, and the outputs ``verdict``, ``report-url``, ``badge-url`` and
``run-id`` (``$GITHUB_OUTPUT``).

Exit codes, as for ``gradguard check``: 0 passed (or not waited for), 1 findings at or above
``--fail-on`` (or the run ended in error), 2 usage error or a request the server refused,
3 internal error, server error or unreachable server.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from gradguard.service.client import Client, ClientError, Rejected, RunRequest, bundle_paths, make_bundle

__all__ = ["submit", "github_context", "annotations", "exit_code", "write_outputs", "publish_local"]

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
MAX_ANNOTATIONS = 50


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63] or "project"


def github_context(env: dict[str, str] | None = None) -> dict[str, Any]:
    """Commit, branch, pull request and project name from a GitHub Actions environment ({} elsewhere)."""
    env = dict(os.environ if env is None else env)
    if env.get("GITHUB_ACTIONS") != "true":
        return {}
    event: dict[str, Any] = {}
    if env.get("GITHUB_EVENT_PATH"):
        try:
            event = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text())
        except (OSError, ValueError):
            event = {}
    pr = event.get("pull_request") or {}
    context: dict[str, Any] = {
        # On a pull request GITHUB_SHA is a merge commit nobody pushed; the head commit is what authors know.
        "commit": (pr.get("head") or {}).get("sha") or env.get("GITHUB_SHA"),
        "branch": env.get("GITHUB_HEAD_REF") or env.get("GITHUB_REF_NAME"),
        "pull_request": pr.get("number"),
    }
    if context["pull_request"] is None:
        match = re.fullmatch(r"refs/pull/(\d+)/(merge|head)", env.get("GITHUB_REF", ""))
        context["pull_request"] = int(match.group(1)) if match else None
    if env.get("GITHUB_REPOSITORY"):
        context["project"] = _slug(env["GITHUB_REPOSITORY"].split("/")[-1])
    return {k: v for k, v in context.items() if v}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _repo_path(path: str, files: Iterable[str] | None) -> str:
    """A report path as the repository names it: the submitted file it ends with, when it is absolute."""
    names = list(files or [])
    if path in names or not names:
        return path
    inside = [n for n in names if path.endswith("/" + n)]
    return max(inside, key=len) if inside else path


def annotations(report: dict[str, Any], *, run_url: str | None = None, files: Iterable[str] | None = None) -> list[str]:
    """``::error file=...,line=...::`` workflow commands, one per finding, at the rule's source lines.

    ``files`` are the submitted paths; report paths from the server's sandbox are mapped back onto them."""
    lines: list[str] = []
    for rule in report.get("rules", []):
        for finding in rule.get("findings", []):
            level = "warning" if finding.get("severity") == "warning" else "error"
            props = []
            path = finding.get("source_file") or rule.get("source_file")
            path = _repo_path(path, files) if path else path
            span = finding.get("source_lines") or rule.get("source_lines") or []
            if path:
                props.append(f"file={_escape_property(path)}")
                if span:
                    props.append(f"line={int(span[0])}")
                    props.append(f"endLine={int(span[-1])}")
            title = f"{finding.get('check_id')} {finding.get('title') or ''}".strip()
            props.append(f"title={_escape_property(title)}")
            text = f"{rule.get('name')}: {finding.get('message')}"
            if finding.get("fix"):
                text += f"\nFix: {finding['fix']}"
            if run_url:
                text += f"\nReport: {run_url}"
            lines.append(f"::{level} {','.join(props)}::{_escape_data(text)}")
        if rule.get("verdict") == "error" and rule.get("error"):
            props = [f"file={_escape_property(_repo_path(rule['source_file'], files))}"] if rule.get("source_file") else []
            if rule.get("source_file") and rule.get("source_lines"):
                props.append(f"line={int(rule['source_lines'][0])}")
            props.append("title=gradguard could not check this rule")
            lines.append(f"::error {','.join(props)}::{_escape_data(str(rule['error'].get('message')))}")
    for failure in report.get("load_errors", []):
        last = (failure.get("traceback") or "").strip().splitlines()[-1:] or ["failed to import"]
        lines.append(f"::error file={_escape_property(_repo_path(failure.get('path', ''), files))},"
                     "title=rule module failed to import::"
                     f"{_escape_data(last[0])}")
    if len(lines) > MAX_ANNOTATIONS:
        lines = lines[:MAX_ANNOTATIONS] + [f"::warning::{len(lines) - MAX_ANNOTATIONS} more findings; see {run_url}"]
    return lines


def exit_code(status: str, report: dict[str, Any] | None, fail_on: str) -> int:
    """0 or 1 for a finished run, by ``--fail-on``: ``error`` findings, any finding (``warning``), or ``never``."""
    if fail_on == "never":
        return EXIT_OK
    if status == "error":
        return EXIT_FINDINGS
    report = report or {}
    findings = [f for r in report.get("rules", []) for f in r.get("findings", [])]
    if report.get("load_errors") or any(r.get("verdict") == "error" for r in report.get("rules", [])):
        return EXIT_FINDINGS
    if fail_on == "warning" and findings:
        return EXIT_FINDINGS
    if any(f.get("severity", "error") == "error" for f in findings):
        return EXIT_FINDINGS
    return EXIT_FINDINGS if status == "failed" and not findings else EXIT_OK


def write_outputs(path: str | None, outputs: dict[str, str]) -> None:
    """Append ``name=value`` lines to the ``$GITHUB_OUTPUT`` file."""
    if not path:
        return
    with open(path, "a", encoding="utf-8") as out:
        for name, value in outputs.items():
            out.write(f"{name}={str(value).replace(chr(10), ' ')}\n")


def _summary_markdown(report: dict[str, Any] | None, run: dict[str, Any], run_url: str, server: str) -> str:
    if report is None:
        return (f"## ⚠️ gradguard: the run ended in error\n\n{run.get('error') or 'no report'}\n\n"
                f"[Run page]({run_url})\n")
    from gradguard.checker.render import render_markdown
    from gradguard.checker.report import Report

    return render_markdown(Report.from_dict(report), run_url=run_url, server_url=server)


def _split(values: tuple[str, ...]) -> list[str] | None:
    items = [p.strip() for v in values for p in v.split(",") if p.strip()]
    return items or None


def _fail(code: int, message: str) -> None:
    click.echo(f"gradguard submit: {message}", err=True)
    sys.exit(code)


@click.command("submit")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--server", envvar="GRADGUARD_SERVER", required=True, help="Server URL (or $GRADGUARD_SERVER).")
@click.option("--token", envvar="GRADGUARD_TOKEN", help="The project's submit token (or $GRADGUARD_TOKEN).")
@click.option("--project", envvar="GRADGUARD_PROJECT", help="Project slug (default: the GitHub repository's name).")
@click.option("--commit", help="Commit SHA (default: from the GitHub Actions environment).")
@click.option("--branch", help="Branch (default: from the GitHub Actions environment, else 'main').")
@click.option("--pr", "pull_request", type=click.IntRange(min=1), help="Pull request number (default: from the event).")
@click.option("--device", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True)
@click.option("--select", multiple=True, metavar="IDS", help="Only these check ids or prefixes.")
@click.option("--ignore", multiple=True, metavar="IDS", help="Skip these check ids or prefixes.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--max-examples", type=click.IntRange(min=1), default=None)
@click.option("--rule-timeout", "rule_timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds each rule may take on the server (below its run wall limit; default: the server's).")
@click.option("--wait/--no-wait", default=False, help="Wait for the verdict and exit by it.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=1800.0, show_default=True,
              help="Seconds to wait for the verdict.")
@click.option("--fail-on", type=click.Choice(["error", "warning", "never"]), default="error", show_default=True,
              help="Exit 1 on error findings, on any finding, or never.")
@click.option("--retries", type=click.IntRange(min=0), default=5, show_default=True,
              help="Retries of each request on network errors and 5xx.")
@click.option("--sarif", "sarif_path", type=click.Path(path_type=Path, dir_okay=False),
              help="With --wait: write the verdict as a SARIF 2.1.0 log here (GitHub code scanning).")
def submit(paths: tuple[Path, ...], server: str, token: str | None, project: str | None, commit: str | None,
           branch: str | None, pull_request: int | None, device: str, select: tuple[str, ...],
           ignore: tuple[str, ...], seed: int, max_examples: int | None, wait: bool, timeout_s: float,
           fail_on: str, retries: int, sarif_path: Path | None, rule_timeout_s: float | None) -> None:
    """Upload the rules in PATHS to a gradguard server and (with --wait) report the verdict.

    Without PATHS, and for the options not given, [tool.gradguard] in pyproject.toml decides, as for
    `gradguard check`."""
    paths, select, ignore, seed, max_examples = _configured(paths, select, ignore, seed, max_examples)
    try:
        code = _submit(paths, server, token, project, commit, branch, pull_request, device, select, ignore, seed,
                       max_examples, wait, timeout_s, fail_on, retries, sarif_path=sarif_path,
                       rule_timeout_s=rule_timeout_s)
    except Rejected as exc:
        _fail(EXIT_USAGE, str(exc))
    except ClientError as exc:
        _fail(EXIT_INTERNAL, str(exc))
    except Exception:  # noqa: BLE001 - a crash of the client itself: exit 3 with the traceback
        _fail(EXIT_INTERNAL, "internal error\n" + traceback.format_exc())
    sys.exit(code)


def _configured(paths: tuple[Path, ...], select: tuple[str, ...], ignore: tuple[str, ...], seed: int,
                max_examples: int | None) -> tuple[tuple[Path, ...], Any, Any, int, int | None]:
    """The options with [tool.gradguard] filled in where the command line left them at their defaults."""
    from click.core import ParameterSource

    from gradguard.checker.config import load_config, resolve
    from gradguard.checker.errors import UsageError
    from gradguard.checker.loader import discover

    ctx = click.get_current_context()
    try:
        config = load_config()
    except UsageError as exc:
        _fail(EXIT_USAGE, str(exc))
    given = {n for n in ctx.params if ctx.get_parameter_source(n) is ParameterSource.COMMANDLINE}
    params = {"paths": paths, "select": select, "ignore": ignore, "seed": seed, "max_examples": max_examples}
    values = resolve(config, params, given)
    chosen = tuple(paths) or tuple(config.paths()) or tuple(discover(config.root, exclude=[
        p for p in [config.path("reproducers")] if p]))
    if not chosen:
        _fail(EXIT_USAGE, "no rule files: pass PATHS, set `paths` in [tool.gradguard], or name rule files "
                          "*_rules.py, rules_*.py or put them in a rules/ folder.")
    return (chosen, tuple(values.get("select") or ()), tuple(values.get("ignore") or ()), values.get("seed", seed),
            values.get("max-examples", max_examples))


def _submit(paths: tuple[Path, ...], server: str, token: str | None, project: str | None, commit: str | None,
            branch: str | None, pull_request: int | None, device: str, select: tuple[str, ...],
            ignore: tuple[str, ...], seed: int, max_examples: int | None, wait: bool, timeout_s: float,
            fail_on: str, retries: int, *, sarif_path: Path | None = None,
            rule_timeout_s: float | None = None) -> int:
    env = os.environ
    gh = github_context()
    project = project or gh.get("project")
    if not project:
        _fail(EXIT_USAGE, "no project: pass --project SLUG (on GitHub Actions it defaults to the repository's name).")
    request = RunRequest(
        commit=commit or gh.get("commit"),
        branch=branch or gh.get("branch") or "main",
        pull_request=pull_request or gh.get("pull_request"),
        device=device,
        select=_split(select),
        ignore=_split(ignore),
        seed=seed,
        max_examples=max_examples,
        rule_timeout_s=rule_timeout_s,
    )
    try:
        names = list(bundle_paths(paths))
        bundle = make_bundle(paths)
    except FileNotFoundError as exc:
        _fail(EXIT_USAGE, str(exc))
    except ValueError as exc:
        _fail(EXIT_USAGE, str(exc))
    try:
        client = Client(server, token, retries=retries, log=lambda m: click.echo(m, err=True))
    except ValueError as exc:
        _fail(EXIT_USAGE, str(exc))

    with client:
        accepted = client.submit(project, bundle, request)
        run_id = int(accepted["id"])
        run_url, badge_url = client.run_page(run_id), client.badge(project, request.branch)
        click.echo(f"gradguard: run {run_id} queued for {project}@{request.branch}: {run_url}")
        outputs = {"run-id": str(run_id), "report-url": run_url, "badge-url": badge_url, "verdict": "pending"}
        if not wait:
            write_outputs(env.get("GITHUB_OUTPUT"), outputs)
            return EXIT_OK
        run = client.wait(run_id, timeout_s=timeout_s,
                          on_status=lambda r: click.echo(f"gradguard: run {run_id} is {r.get('status')}", err=True))
        status = run["status"]
        report = client.report(run_id) if status in ("passed", "failed") else None
        verdict = {"passed": "pass", "failed": "fail"}.get(status, "error")
        outputs["verdict"] = verdict
        _print_verdict(run, report, run_url)
        if sarif_path is not None and report is not None:
            from gradguard.checker.report import Report
            from gradguard.checker.sarif import render_sarif

            sarif_path.parent.mkdir(parents=True, exist_ok=True)
            sarif_path.write_text(render_sarif(Report.from_dict(report)))
        if env.get("GITHUB_ACTIONS") == "true":
            for line in annotations(report or {}, run_url=run_url, files=names):
                click.echo(line)
            if run.get("status") == "error":
                click.echo(f"::error title=gradguard run {run_id} ended in error::{_escape(run.get('error'))}")
        if env.get("GITHUB_STEP_SUMMARY"):
            with open(env["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as out:
                out.write(_summary_markdown(report, run, run_url, client.server))
        write_outputs(env.get("GITHUB_OUTPUT"), outputs)
        return exit_code(status, report, fail_on)


def _escape(text: Any) -> str:
    return str(text or "").replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _print_verdict(run: dict[str, Any], report: dict[str, Any] | None, run_url: str) -> None:
    if report is None:
        click.echo(f"gradguard: run {run['id']} ended in error: {run.get('error') or 'no report'}")
        click.echo(f"  {run_url}")
        return
    s = report.get("summary", {})
    if s.get("load_errors"):
        n = s["load_errors"]
        checked = f"{s.get('passed', 0)}/{s.get('rules', 0)} rules checked pass" if s.get("rules") else "no rule checked"
        click.echo(f"gradguard: {n} module{'s' if n != 1 else ''} failed to import; {checked} ({s.get('verdict')})")
    else:
        click.echo(f"gradguard: {s.get('passed', 0)}/{s.get('rules', 0)} rules pass, {s.get('findings', 0)} finding(s)"
                   f" ({s.get('verdict')})")
    for failure in report.get("load_errors", []):
        lines = str(failure.get("traceback") or "").strip().splitlines()
        click.echo(f"  {failure.get('path')} failed to import: {lines[-1] if lines else 'no traceback'}")
    for rule in report.get("rules", []):
        if rule.get("verdict") == "error" and rule.get("error"):
            err = rule["error"]
            click.echo(f"  {rule.get('name')} errored: {err.get('type')}: {err.get('message')}")
    for rule in report.get("rules", []):
        for f in rule.get("findings", []):
            where = f.get("source_file") or ""
            if where and f.get("source_lines"):
                where += f":{f['source_lines'][0]}"
            click.echo(f"  {f.get('check_id')} {rule.get('name')} {where}: {f.get('message')}")
    click.echo(f"  full report: {run_url}")


def publish_local(report_path: str, fail_on: str, env: dict[str, str] | None = None) -> int:
    """For the Action's ``mode: local``: annotate, summarize and set outputs from a ``gradguard check --json``
    report, as ``submit --wait`` does for a server run; returns the exit code by ``fail_on``."""
    env = dict(os.environ if env is None else env)
    try:
        report = json.loads(Path(report_path).read_text())
    except (OSError, ValueError) as exc:
        click.echo(f"gradguard: no readable report at {report_path} ({exc})", err=True)
        write_outputs(env.get("GITHUB_OUTPUT"), {"verdict": "error", "report-url": "", "badge-url": ""})
        return EXIT_INTERNAL
    verdict = report.get("summary", {}).get("verdict", "error")
    if env.get("GITHUB_ACTIONS") == "true":
        for line in annotations(report):
            click.echo(line)
    if env.get("GITHUB_STEP_SUMMARY"):
        from gradguard.checker.render import render_markdown
        from gradguard.checker.report import Report

        with open(env["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as out:
            out.write(render_markdown(Report.from_dict(report)))
    write_outputs(env.get("GITHUB_OUTPUT"), {"verdict": verdict, "report-url": "", "badge-url": ""})
    status = {"pass": "passed", "fail": "failed"}.get(verdict, "error")
    return exit_code(status, report, fail_on)


if __name__ == "__main__":  # python -m gradguard.service.client_cli publish-local REPORT.json --fail-on error
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gradguard.service.client_cli")
    parser.add_argument("command", choices=["publish-local"])
    parser.add_argument("report")
    parser.add_argument("--fail-on", choices=["error", "warning", "never"], default="error")
    args = parser.parse_args()
    sys.exit(publish_local(args.report, args.fail_on))

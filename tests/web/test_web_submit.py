"""`gradguard submit` against the live server, in a simulated GitHub Actions job, with its exit codes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from gradguard.service.client import Client, RunRequest, ServerFailure, make_bundle
from gradguard.service.client_cli import annotations, exit_code, github_context

CLI = [sys.executable, "-c", "from gradguard.checker.cli import main; main()"]


def _gradguard(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("GITHUB_", "GRADGUARD_"))}
    return subprocess.run(CLI + args, cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def repo(tmp_path: Path, rule_sources: dict[str, str]) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "ops.py").write_text(rule_sources["bad"])
    (tmp_path / "rules" / "__pycache__").mkdir()
    (tmp_path / "rules" / "__pycache__" / "junk.py").write_text("raise SystemExit")
    return tmp_path


def _actions_env(tmp_path: Path, repository: str, event: dict[str, Any], **extra: str) -> dict[str, str]:
    event_path = tmp_path / "event.json"
    event_path.write_text(json.dumps(event))
    (tmp_path / "summary.md").write_text("")
    (tmp_path / "output.txt").write_text("")
    return {
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": repository,
        "GITHUB_EVENT_PATH": str(event_path),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_OUTPUT": str(tmp_path / "output.txt"),
        **extra,
    }


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_pull_request_job_with_findings(live: Any, repo: Path, tmp_path: Path, rule_sources: dict[str, str]) -> None:
    token = live.create_project("gh-project")
    head = "1234567890abcdef1234567890abcdef12345678"
    env = _actions_env(tmp_path, "octo/GH-Project", {"pull_request": {"number": 7, "head": {"sha": head}}},
                       GITHUB_SHA="f" * 40, GITHUB_REF="refs/pull/7/merge", GITHUB_HEAD_REF="feature/y",
                       GITHUB_REF_NAME="7/merge", GRADGUARD_TOKEN=token)
    done = _gradguard(["submit", "rules", "--server", live.base, "--wait", "--select", "GG1"], cwd=repo, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    run_id = int(_outputs(tmp_path / "output.txt")["run-id"])
    assert f"{live.base}/runs/{run_id}" in done.stdout

    first = rule_sources["bad"].splitlines().index("@rrule(scale, arrays(shape=(4,)))") + 1
    errors = [line for line in done.stdout.splitlines() if line.startswith("::error ")]
    assert len(errors) == 1, done.stdout
    assert errors[0].startswith(f"::error file=rules/ops.py,line={first},endLine=")
    assert "title=GG103 pullback raises or returns the wrong number of tangents::scale_rrule: the pullback of scale_rrule" in errors[0]

    summary = (tmp_path / "summary.md").read_text()
    assert "gradguard: 1/2 rules pass" in summary and f"({live.base}/runs/{run_id})" in summary
    assert f"]({live.base}/checks/GG103)" in summary
    outputs = _outputs(tmp_path / "output.txt")
    assert outputs["verdict"] == "fail"
    assert outputs["report-url"] == f"{live.base}/runs/{run_id}"
    assert outputs["badge-url"] == f"{live.base}/badge/gh-project.svg?branch=feature%2Fy"

    run = live.wait(run_id)
    assert (run["commit"], run["branch"], run["pull_request"]) == (head, "feature/y", 7)
    assert run["select"] == ["GG1"]
    files = live.http.get(f"/runs/{run_id}").text
    assert "rules/ops.py" in files and "junk.py" not in files


def test_passing_rules_exit_0_and_no_wait_exits_at_once(live: Any, tmp_path: Path, rule_sources: dict[str, str]) -> None:
    token = live.create_project("cli-pass")
    (tmp_path / "ops.py").write_text(rule_sources["good"])
    done = _gradguard(["submit", "ops.py", "--server", live.base, "--token", token, "--project", "cli-pass",
                       "--branch", "main", "--commit", "aaaa1111", "--wait", "--select", "GG1,GG2"], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2/2 rules pass" in done.stdout and "::error" not in done.stdout
    queued = _gradguard(["submit", "ops.py", "--server", live.base, "--token", token, "--project", "cli-pass",
                         "--fail-on", "never"], cwd=tmp_path, env={"GITHUB_OUTPUT": str(tmp_path / "out.txt")})
    assert queued.returncode == 0 and "queued" in queued.stdout
    assert _outputs(tmp_path / "out.txt")["verdict"] == "pending"


def test_refused_requests_exit_2_with_the_servers_reason(live: Any, tmp_path: Path, rule_sources: dict[str, str]) -> None:
    (tmp_path / "ops.py").write_text(rule_sources["good"])
    live.create_project("cli-refused")
    wrong = _gradguard(["submit", "ops.py", "--server", live.base, "--token", "ggp_nope", "--project", "cli-refused"],
                       cwd=tmp_path)
    assert wrong.returncode == 2 and "HTTP 403" in wrong.stderr and "fix:" in wrong.stderr
    missing = _gradguard(["submit", "nope.py", "--server", live.base, "--project", "cli-refused"], cwd=tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    no_project = _gradguard(["submit", "ops.py", "--server", live.base], cwd=tmp_path)
    assert no_project.returncode == 2 and "--project" in no_project.stderr


def test_unreachable_server_is_retried_then_exit_3(tmp_path: Path, rule_sources: dict[str, str]) -> None:
    (tmp_path / "ops.py").write_text(rule_sources["good"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = _gradguard(["submit", "ops.py", "--server", f"http://127.0.0.1:{port}", "--project", "x", "--token", "t",
                       "--retries", "1"], cwd=tmp_path, timeout=60)
    assert done.returncode == 3
    assert "retrying in" in done.stderr and "could not reach" in done.stderr and "after 2 attempt(s)" in done.stderr


def test_transient_errors_are_retried_with_backoff(tmp_path: Path, rule_sources: dict[str, str]) -> None:
    (tmp_path / "ops.py").write_text(rule_sources["good"])
    answers = [httpx.ConnectError("refused"), httpx.Response(503, headers={"Retry-After": "2"}),
               httpx.Response(202, json={"id": 5, "status": "queued", "urls": {}})]
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    slept: list[float] = []
    client = Client("http://gradguard.invalid", "t", sleep=slept.append, transport=httpx.MockTransport(handler))
    accepted = client.submit("p", make_bundle([tmp_path / "ops.py"], root=tmp_path), RunRequest())
    assert accepted["id"] == 5 and seen == ["POST"] * 3
    assert 0.5 <= slept[0] <= 1.5 and slept[1] == 2.0  # exponential backoff, then the server's Retry-After
    always = Client("http://gradguard.invalid", retries=2, sleep=slept.append,
                    transport=httpx.MockTransport(lambda r: httpx.Response(502, text="bad gateway")))
    with pytest.raises(ServerFailure, match="after 3 attempt"):
        always.run(1)


def test_exit_codes_by_fail_on() -> None:
    warning = {"rules": [{"verdict": "fail", "findings": [{"severity": "warning", "check_id": "GG405"}]}]}
    error = {"rules": [{"verdict": "fail", "findings": [{"severity": "error", "check_id": "GG103"}]}]}
    assert exit_code("passed", {"rules": [{"verdict": "pass", "findings": []}]}, "error") == 0
    assert exit_code("failed", warning, "error") == 0
    assert exit_code("failed", warning, "warning") == 1
    assert exit_code("failed", error, "error") == 1
    assert exit_code("failed", error, "never") == 0
    assert exit_code("error", None, "error") == 1


def test_github_context_outside_and_inside_actions(tmp_path: Path) -> None:
    assert github_context({}) == {}
    env = {"GITHUB_ACTIONS": "true", "GITHUB_SHA": "abc", "GITHUB_REF_NAME": "main", "GITHUB_REPOSITORY": "o/My_Repo"}
    assert github_context(env) == {"commit": "abc", "branch": "main", "project": "my-repo"}


def test_annotations_escape_workflow_command_syntax() -> None:
    report = {"rules": [{"name": "r", "findings": [{
        "check_id": "GG201", "title": "t", "severity": "error", "message": "50% off\nnext line",
        "source_file": "a,b:c.py", "source_lines": [3, 4, 5]}]}]}
    (line,) = annotations(report)
    assert line == "::error file=a%2Cb%3Ac.py,line=3,endLine=5,title=GG201 t::r: 50%25 off%0Anext line"


def test_sandbox_paths_map_back_to_the_repository() -> None:
    report = {"rules": [], "load_errors": [{"path": "/bundle/rules/broken.py", "traceback": "x\nSyntaxError: bad"}]}
    (line,) = annotations(report, files=["rules/broken.py", "broken.py"])
    assert line == "::error file=rules/broken.py,title=rule module failed to import::SyntaxError: bad"

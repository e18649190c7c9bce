"""`gradguard submit`: reads [tool.gradguard] like `check`, and names the modules that failed to import."""

import pytest
from click.testing import CliRunner

from gradguard.service import client_cli


@pytest.fixture
def captured(monkeypatch):
    seen = {}

    def fake_submit(paths, server, token, project, commit, branch, pull_request, device, select, ignore, seed,
                    max_examples, wait, timeout_s, fail_on, retries, **_):
        seen.update(paths=[str(p) for p in paths], select=select, ignore=ignore, seed=seed, max_examples=max_examples)
        return 0

    monkeypatch.setattr(client_cli, "_submit", fake_submit)
    return seen


def test_submit_reads_the_project_config_and_the_command_line_overrides_it(tmp_path, monkeypatch, captured):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.gradguard]\npaths = ["src"]\nselect = ["GG1"]\nseed = 7\nmax-examples = 4\n')
    result = CliRunner().invoke(client_cli.submit, ["--server", "http://localhost:1"])
    assert result.exit_code == 0, result.output
    assert captured["paths"] == [str((tmp_path / "src").resolve())]
    assert (list(captured["select"]), captured["seed"], captured["max_examples"]) == (["GG1"], 7, 4)
    result = CliRunner().invoke(client_cli.submit, ["--server", "http://localhost:1", "--seed", "2", "--select", "GG2"])
    assert (list(captured["select"]), captured["seed"]) == (["GG2"], 2)


def test_submit_without_rule_files_is_a_usage_error_that_says_what_to_do(tmp_path, monkeypatch, captured):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "setup.py").write_text("raise SystemExit\n")
    result = CliRunner().invoke(client_cli.submit, ["--server", "http://localhost:1"])
    assert result.exit_code == 2
    assert "no rule files: pass PATHS, set `paths` in [tool.gradguard]" in result.output


def test_the_verdict_names_the_modules_that_failed_to_import(capsys):
    report = {"summary": {"rules": 1, "passed": 1, "load_errors": 1, "findings": 0, "verdict": "error"},
              "load_errors": [{"path": "rules/broken.py", "traceback": "Traceback\n  ...\nModuleNotFoundError: No module "
                                                                     "named 'scipy'\n"}],
              "rules": [{"name": "ok_rrule", "verdict": "pass", "findings": []}]}
    client_cli._print_verdict({"id": 3}, report, "http://x/runs/3")
    out = capsys.readouterr().out
    assert "1/1 rules pass" not in out
    assert "gradguard: 1 module failed to import; 1/1 rules checked pass (error)" in out
    assert "rules/broken.py failed to import: ModuleNotFoundError: No module named 'scipy'" in out


def test_a_refused_token_is_fixed_with_the_token_option_not_an_http_header():
    import httpx

    from gradguard.service.client import Client

    request = httpx.Request("POST", "http://gg.test/api/v1/projects/alpha/runs")
    response = httpx.Response(401, request=request, json={"detail": {
        "message": "a project token is needed", "fix": "Send 'Authorization: Bearer <token>'."}})
    error = Client("http://gg.test", None)._error(response, 1)
    assert "--token or $GRADGUARD_TOKEN" in str(error)
    assert "Authorization" not in str(error)


def test_github_annotations_of_warnings_are_warnings_at_most():
    def finding(check_id, severity):
        return {"check_id": check_id, "severity": severity, "title": "t", "message": "m", "rule": "r",
                "source_file": "rules/a_rules.py", "source_lines": [3, 9]}

    report = {"rules": [{"name": "r", "verdict": "fail", "source_file": "rules/a_rules.py", "source_lines": [3, 9],
                         "findings": [finding("GG302", "warning"), finding("GG104", "error")]}],
              "load_errors": []}
    lines = client_cli.annotations(report)
    (warning,) = [ln for ln in lines if "GG302" in ln]
    (error,) = [ln for ln in lines if "GG104" in ln]
    assert warning.startswith("::warning ") and error.startswith("::error ")
    assert "file=rules/a_rules.py" in warning and "line=3" in warning

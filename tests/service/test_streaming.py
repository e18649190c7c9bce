"""Results stream per rule: a run stopped by a limit keeps every rule it finished, the rest are errors
naming the reason; each rule has its own time limit, well below the run's; a limit met inside a rule
is an error naming the limit, never a finding."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

import gradguard.service.sandbox as sandbox
from gradguard.service.config import Settings
from gradguard.service.sandbox import Limits, _judge, _run, _stream

from service_support import ADMIN, HANGS, STUCK_RULES as RULES, verdicts  # type: ignore[import-not-found]

run_check = functools.partial(sandbox.run_check, select=["GG1"], max_examples=3)

HOARDS = "hoard = np.ones(50 * 2**30 // 8)"


def bundle(tmp_path: Path, stuck: str, prelude: str = "") -> Path:
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "rules.py").write_text(prelude + RULES.format(stuck=stuck))
    return folder


@pytest.mark.slow
def test_a_run_stopped_at_its_wall_limit_keeps_every_finished_rule_and_names_the_rest(tmp_path) -> None:
    outcome = run_check(bundle(tmp_path, HANGS), limits=Limits(wall_s=10, cpu_s=30), rule_timeout_s=300)
    assert not outcome.ok and outcome.reason == "exceeded 10 s wall time"
    assert verdicts(outcome.report) == {
        "a_double_rrule": ("pass", None),
        "b_stuck_rrule": ("error", "not finished: the run exceeded 10 s wall time while this rule was being checked"),
        "c_after_rrule": ("error", "not checked: the run exceeded 10 s wall time before this rule's turn"),
    }
    assert outcome.report["summary"]["passed"] == 1 and outcome.report["environment"]["sandbox"] == outcome.level


@pytest.mark.slow
def test_a_hanging_rule_ends_at_its_own_time_limit_and_the_others_get_verdicts(tmp_path) -> None:
    outcome = run_check(bundle(tmp_path, HANGS), limits=Limits(wall_s=60, cpu_s=60), rule_timeout_s=2)
    assert outcome.ok, (outcome.reason, outcome.stderr_tail)
    found = verdicts(outcome.report)
    assert found["a_double_rrule"] == found["c_after_rrule"] == ("pass", None)
    assert found["b_stuck_rrule"][0] == "error" and "2 s per-rule time limit" in found["b_stuck_rrule"][1]
    assert outcome.duration_s < 30


# A compiled loop that never ends (a float counter stops growing at 2**24 and stays >= 0): no signal stops it.
# It is compiled when the module loads, so the rule enters native code at once: compiled inside the rule, a
# loaded machine could spend the rule's 1 s on importing and compiling, and the limit would stop it in Python.
SPIN_PRELUDE = ("import jax\n_spin = jax.jit(lambda c: jax.lax.while_loop(lambda c: c >= 0, lambda c: c + 1.0, c))"
                ".lower(0.0).compile()\n")
SPINS = "_spin(0.0)"


@pytest.mark.slow
def test_a_rule_stuck_in_native_code_is_its_own_timeout_and_stops_the_run_honestly(tmp_path) -> None:
    """The checker ends its process when a rule's time limit cannot stop it (exit 6): the run's reason names the
    rule (no "sandbox setup failed", exit 4's), the rules before keep their verdicts, and the rest say why not."""
    outcome = run_check(bundle(tmp_path, SPINS, SPIN_PRELUDE), limits=Limits(wall_s=60, cpu_s=120), rule_timeout_s=1)
    assert not outcome.ok and outcome.reason == ("was stopped by rule b_stuck_rrule, stuck in native code past its "
                                                 "time limit"), (outcome.reason, outcome.stderr_tail)
    found = verdicts(outcome.report)
    assert found["a_double_rrule"] == ("pass", None)
    assert found["b_stuck_rrule"] == ("error", "not finished: the run was stopped by rule b_stuck_rrule, stuck in "
                                               "native code past its time limit while this rule was being checked")
    assert found["c_after_rrule"] == ("error", "not checked: the run was stopped by rule b_stuck_rrule, stuck in "
                                               "native code past its time limit before this rule's turn")
    assert "rule b_stuck_rrule did not return from native code" in outcome.stderr_tail
    assert outcome.duration_s < 40


@pytest.mark.slow
def test_memory_exhausted_inside_a_rule_is_a_limit_error_not_a_finding(tmp_path) -> None:
    """With no per-rule budget, the run's own memory limit bites: an error naming it, never a finding."""
    outcome = run_check(bundle(tmp_path, HOARDS), limits=Limits(wall_s=60, cpu_s=60, memory_mb=1024), rule_timeout_s=30,
                        rule_memory_mb=0)
    assert not outcome.ok and outcome.reason == "exceeded 1024 MB memory"
    stuck = next(r for r in outcome.report["rules"] if r["name"] == "b_stuck_rrule")
    assert stuck["verdict"] == "error" and stuck["findings"] == []
    assert stuck["error"]["type"] == "LimitExceeded" and stuck["error"]["message"].startswith("exceeded 1024 MB memory")
    assert verdicts(outcome.report)["c_after_rrule"] == ("pass", None)


def _raw(*records: object, tail: bytes = b"", returncode: int = 0, limit_hit: str | None = None) -> _run.Raw:
    report = b"".join(json.dumps(r).encode() + b"\n" for r in records) + tail
    return _run.Raw(limit_hit, returncode, None, 0.1, b"", report, 0.1)


def _rule(name: str, **fields: object) -> dict:
    return {"name": name, "verdict": "pass", "findings": [], **fields}


def test_a_finding_made_of_a_limit_becomes_an_error_naming_the_limit() -> None:
    """What a check made of a MemoryError (GG101 "forward raised MemoryError") is no finding."""
    gg101 = {"check_id": "GG101", "rule": "hoard", "severity": "error", "title": "contract",
             "message": "forward raised MemoryError: "}
    other = {"check_id": "GG202", "rule": "linear", "severity": "error", "title": "linear",
             "message": "not linear in the cotangent"}
    rules = [_rule("hoard", verdict="fail", findings=[gg101]), _rule("linear", verdict="fail", findings=[other])]
    report = {"schema": "gradguard.report/1"}
    judged, reason = _judge.judge(_raw({"rules": ["hoard", "linear"]}, *[{"rule": r} for r in rules], {"report": report}),
                                  Limits(memory_mb=512), "bubblewrap")
    assert reason == "exceeded 512 MB memory"
    hoard, linear = judged["rules"]
    assert hoard["verdict"] == "error" and hoard["findings"] == [] and hoard["error"]["type"] == "LimitExceeded"
    assert linear["verdict"] == "fail" and linear["findings"][0]["check_id"] == "GG202"  # a real finding stays
    assert judged["summary"]["by_check"] == {"GG202": 1}


def _judged(rules: list[dict], limits: Limits) -> tuple[dict | None, str | None]:
    """A finished run that streamed ``rules`` and its final report, judged under ``limits``."""
    return _judge.judge(_raw({"rules": [r["name"] for r in rules]}, *[{"rule": r} for r in rules],
                             {"report": {"schema": "gradguard.report/1"}}), limits, "bubblewrap")


def test_memory_running_out_inside_a_check_is_the_memory_limit() -> None:
    """The checker's own word for memory running out in a check (in Hypothesis' input drawing, say)."""
    err = {"type": "MemoryError", "traceback": "  + Exception Group Traceback (most recent call last):\n  | MemoryError\n",
           "message": "MemoryError: memory ran out in check GG501 on rule matmul_rrule; check it with smaller inputs "
                      "or give it more memory"}
    judged, reason = _judged([_rule("matmul_rrule", verdict="error", error=err), _rule("other")], Limits(memory_mb=2048))
    assert reason == "exceeded 2048 MB memory"
    assert judged["rules"][0]["error"]["type"] == "LimitExceeded"
    assert judged["rules"][1]["verdict"] == "pass"


def test_the_gpu_running_out_of_memory_is_not_the_runs_memory_limit() -> None:
    """The checker's DeviceMemory error quotes XLA's "RESOURCE_EXHAUSTED: Out of memory": the GPU's memory, not
    the host memory limit of the run, which must not be blamed for it."""
    err = {"type": "DeviceMemory", "traceback": "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory\n",
           "message": "the GPU ran out of memory in the forward of big (JaxRuntimeError: RESOURCE_EXHAUSTED: Out of "
                      "memory while trying to allocate 8589934592 bytes.); nothing was established about the rule."}
    judged, reason = _judged([_rule("big", verdict="error", error=err), _rule("other")], Limits(memory_mb=2048))
    assert reason is None
    assert judged["rules"][0]["verdict"] == "error" and judged["rules"][0]["error"] == err
    assert judged["rules"][1]["verdict"] == "pass"


def test_the_stream_is_untrusted_input() -> None:
    limits = Limits()
    assert _judge.judge(_raw(tail=b'{"rule": 5}\n'), limits, "bubblewrap") == (
        None, "checker wrote an invalid report: line 1 of the report has a malformed 'rule' record")
    assert _judge.judge(_raw({"rules": ["a"]}, {"x": 1, "y": 2}), limits, "bubblewrap")[1] == (
        "checker wrote an invalid report: line 2 of the report is not one of the records 'rules', 'rule', 'report'")
    garbage = _judge.judge(_raw(tail=b"not json\n{}\n"), limits, "bubblewrap")[1]
    assert garbage.startswith("checker wrote an invalid report: line 1 of the report is not JSON")
    # a run that stopped mid-line keeps what came before the cut
    report, reason = _judge.judge(_raw({"rules": ["a", "b"]}, {"rule": _rule("a")}, tail=b'{"rule": {"na',
                                       limit_hit="wall"), Limits(wall_s=7), "namespaces")
    assert reason == "exceeded 7 s wall time" and verdicts(report)["a"] == ("pass", None)
    assert verdicts(report)["b"][0] == "error"
    # a finished rule with a bad shape: the partial report is refused, the reason stays
    assert _judge.judge(_raw({"rules": ["a"]}, {"rule": {"name": 5}}, limit_hit="wall"), limits, "namespaces")[0] is None
    # exited 0 without the final record
    kept, why = _judge.judge(_raw({"rules": ["a"]}, {"rule": _rule("a")}), limits, "namespaces")
    assert why == "checker ended without its final report" and verdicts(kept) == {"a": ("pass", None)}


def test_the_per_rule_time_limit_is_well_below_the_wall_limit_and_bounded_by_it(make_settings) -> None:
    settings = Settings(admin_token=ADMIN)
    assert settings.default_rule_timeout_s <= settings.run_wall_s / 4
    with pytest.raises(ValueError, match="GRADGUARD_RULE_TIMEOUT_S=120, but it must be below GRADGUARD_RUN_WALL_S=120"):
        Settings(rule_timeout_s=120)
    assert make_settings(run_wall_s=3).default_rule_timeout_s == 0.75


def test_a_submission_sets_its_per_rule_time_limit_below_the_wall(client, project) -> None:
    files = {"files": {"r.py": "x = 1\n"}}
    run = client.post("/api/v1/projects/proj/runs", json={**files, "rule_timeout_s": 7.5}, headers=project["headers"])
    assert run.status_code == 202, run.text
    assert client.get(f"/api/v1/runs/{run.json()['id']}").json()["rule_timeout_s"] == 7.5
    over = client.post("/api/v1/projects/proj/runs", json={**files, "rule_timeout_s": 120}, headers=project["headers"])
    assert over.status_code == 422 and over.json()["detail"]["field"] == "rule_timeout_s"
    assert "not below this server's run wall limit (120 s)" in over.json()["detail"]["message"]
    for bad in (0, -1, "soon"):
        answer = client.post("/api/v1/projects/proj/runs", json={**files, "rule_timeout_s": bad},
                             headers=project["headers"])
        assert answer.status_code == 422, bad
    form = client.post("/api/v1/projects/proj/runs", data={"rule_timeout_s": "500"},
                       files={"bundle": ("b.tar.gz", b"x", "application/gzip")}, headers=project["headers"])
    assert form.status_code == 422 and form.json()["detail"]["field"] == "rule_timeout_s"


def test_the_worker_uses_the_runs_limit_only_when_it_is_usable(make_settings) -> None:
    from gradguard.service.models import Run
    from gradguard.service.worker import rule_timeout_of

    settings = make_settings(run_wall_s=100)
    for asked, used in ((10.0, 10.0), (None, 25.0), (float("nan"), 25.0), (500.0, 25.0), (-1.0, 25.0)):
        assert rule_timeout_of(Run(rule_timeout_s=asked), settings) == used, asked


def _three_rule_run(client, admin_headers, stuck: str) -> dict:
    """Submit the three-rule bundle with ``stuck`` as its middle rule through the API, wait for the run to end
    as an error naming that rule alone, and return each rule's verdict."""
    from service_support import wait_for  # type: ignore[import-not-found]

    token = client.post("/api/v1/projects", json={"slug": "p"}, headers=admin_headers).json()["token"]
    answer = client.post("/api/v1/projects/p/runs", json={"files": {"rules.py": RULES.format(stuck=stuck)},
                                                           "select": ["GG1"]},
                         headers={"Authorization": f"Bearer {token}"})
    run_id = answer.json()["id"]
    run = wait_for(lambda: (r := client.get(f"/api/v1/runs/{run_id}").json())["status"] in ("passed", "failed",
                                                                                            "error") and r, 120,
                   "the run to end")
    assert run["status"] == "error" and run["error"].startswith("1 rule could not be checked: b_stuck_rrule"), run
    return verdicts(client.get(f"/api/v1/runs/{run_id}/report").json())


@pytest.mark.slow
def test_by_default_one_hanging_rule_costs_the_service_no_other_verdict(make_settings, admin_headers) -> None:
    from fastapi.testclient import TestClient

    from gradguard.service.app import create_app
    app = create_app(make_settings(local_workers=1, run_wall_s=24, default_max_examples=3))
    with TestClient(app) as client:
        found = _three_rule_run(client, admin_headers, HANGS)
        assert found["a_double_rrule"] == found["c_after_rrule"] == ("pass", None)
        assert "6 s per-rule time limit" in found["b_stuck_rrule"][1]  # a quarter of the 24 s wall limit


def test_a_stopped_runs_finished_rules_are_stored_and_served(client, project, migrated) -> None:
    from gradguard.service import lifecycle
    from gradguard.service.db import make_sessionmaker

    run_id = client.post("/api/v1/projects/proj/runs", json={"files": {"r.py": "x = 1\n"}},
                         headers=project["headers"]).json()["id"]
    report, reason = _judge.judge(_raw({"rules": ["a", "b"]}, {"rule": _rule("a")}, limit_hit="wall"),
                                  Limits(wall_s=9), "bubblewrap")
    with make_sessionmaker(migrated)() as session:
        assert lifecycle.claim_run(session, run_id=run_id, worker="w:1", max_retries=2, lease_s=60) is not None
        status = lifecycle.finish_run(session, run_id=run_id, worker="w:1", ok=False, report=report,
                                      level="bubblewrap", reason=reason, duration_s=9.0)
    assert status == "error"
    run = client.get(f"/api/v1/runs/{run_id}").json()
    assert run["error"] == "exceeded 9 s wall time"
    assert verdicts(client.get(f"/api/v1/runs/{run_id}/report").json()) == {
        "a": ("pass", None), "b": ("error", "not finished: the run exceeded 9 s wall time while this rule was being checked")}


def test_gradguard_submit_sets_the_per_rule_time_limit(make_settings, migrated, admin_headers, tmp_path,
                                                       monkeypatch) -> None:
    import httpx
    from click.testing import CliRunner

    from gradguard.service.app import create_app
    from gradguard.service.client_cli import submit
    from service_support import LIVE_TIMEOUT_S, LiveServer  # type: ignore[import-not-found]

    (tmp_path / "rules.py").write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)
    for name in ("GITHUB_ACTIONS", "GITHUB_REPOSITORY", "GITHUB_SHA", "GITHUB_REF_NAME", "GITHUB_EVENT_PATH"):
        monkeypatch.delenv(name, raising=False)
    with LiveServer(create_app(make_settings(database_url=migrated))) as server:
        token = httpx.post(f"{server.url}/api/v1/projects", json={"slug": "cli"}, headers=admin_headers,
                           timeout=LIVE_TIMEOUT_S).json()["token"]
        args = ["rules.py", "--server", server.url, "--token", token, "--project", "cli", "--no-wait"]
        done = CliRunner().invoke(submit, [*args, "--rule-timeout", "12.5"])
        assert done.exit_code == 0, done.output
        runs = httpx.get(f"{server.url}/api/v1/projects/cli/runs", timeout=LIVE_TIMEOUT_S).json()["items"]
        assert [r["rule_timeout_s"] for r in runs] == [12.5]
        refused = CliRunner().invoke(submit, [*args, "--rule-timeout", "500"])
        assert refused.exit_code == 2 and "rule_timeout_s" in refused.output, refused.output


def test_the_stream_carries_each_rule_once_and_the_last_records_own_rules_are_not_read() -> None:
    final = {"schema": "gradguard.report/1", "rules": [_rule("forged")]}
    report, reason = _judge.judge(_raw({"rules": ["a"]}, {"rule": _rule("a")}, {"report": final}), Limits(), "namespaces")
    assert reason is None and [r["name"] for r in report["rules"]] == ["a"]


EATS = "hoard = [np.ones(2**20 // 8) for _ in range(800)]  # 800 MB, 1 MB at a time"
PER_RULE_FIX = ("; raise it with --memory-limit MB (check(memory_limit_mb=), memory-limit in [tool.gradguard]; 0: no "
                "limit), or check the rule with smaller inputs")


@pytest.mark.slow
def test_a_rule_that_eats_memory_ends_at_its_own_memory_budget_and_the_others_get_verdicts(tmp_path) -> None:
    """The per-rule budget (a quarter of the run's 1024 MB) stops the rule before the run's limit does."""
    outcome = run_check(bundle(tmp_path, EATS), limits=Limits(wall_s=60, cpu_s=60, memory_mb=1024), rule_timeout_s=30)
    assert outcome.ok, (outcome.reason, outcome.stderr_tail)
    found = verdicts(outcome.report)
    assert found["a_double_rrule"] == found["c_after_rrule"] == ("pass", None)
    eats = next(r for r in outcome.report["rules"] if r["name"] == "b_stuck_rrule")
    assert eats["verdict"] == "error" and eats["findings"] == [] and eats["error"]["type"] == "MemoryLimit"
    assert re.fullmatch(r"exceeded the 256 MB per-rule memory limit before every check had run: its resident memory "
                        r"grew by \d+\.\d MB since the rule started" + re.escape(PER_RULE_FIX),
                        eats["error"]["message"]), eats["error"]["message"]


@pytest.mark.slow
def test_one_allocation_beyond_the_rules_budget_is_the_rules_own_error(tmp_path) -> None:
    outcome = run_check(bundle(tmp_path, HOARDS), limits=Limits(wall_s=60, cpu_s=60, memory_mb=1024), rule_timeout_s=30,
                        rule_memory_mb=100)
    assert outcome.ok, (outcome.reason, outcome.stderr_tail)
    assert verdicts(outcome.report)["c_after_rrule"] == ("pass", None)
    message = verdicts(outcome.report)["b_stuck_rrule"][1]
    assert re.fullmatch(r"exceeded the 100 MB per-rule memory limit before every check had run: it asked for one "
                        r"allocation of 50\.0 GB with \d+\.\d MB of its budget in use" + re.escape(PER_RULE_FIX),
                        message), message


def test_the_per_rule_memory_budget_is_well_below_the_runs_memory_limit(make_settings, tmp_path) -> None:
    assert make_settings().default_rule_memory_mb == 2048 // 4
    assert make_settings(run_memory_mb=1000, rule_memory_mb=0).default_rule_memory_mb == 0
    with pytest.raises(ValueError, match="GRADGUARD_RULE_MEMORY_MB=1500, but it must be at most half of "
                                         "GRADGUARD_RUN_MEMORY_MB=2048"):
        make_settings(rule_memory_mb=1500)
    for bad in (600, -1, 1.5, True):
        with pytest.raises(ValueError, match=r"rule_memory_mb=.*must be an int from 0 \(none\) to half the run's "
                                             r"memory limit \(512 MB\)"):
            sandbox.run_check(tmp_path, limits=Limits(memory_mb=1024), rule_memory_mb=bad, min_level="rlimits")


def test_the_per_rule_memory_budget_is_part_of_what_a_reused_verdict_depends_on(make_settings) -> None:
    from types import SimpleNamespace

    from gradguard.service.reuse import bundle_key

    options = SimpleNamespace(device="cpu", select=None, ignore=None, seed=0, max_examples=None, rule_timeout_s=None)
    files = {"rules.py": b"x = 1\n"}
    assert (bundle_key(files, options, make_settings(rule_memory_mb=100))
            != bundle_key(files, options, make_settings(rule_memory_mb=200)))


@pytest.mark.slow
def test_by_default_one_rule_that_eats_memory_costs_the_service_no_other_verdict(make_settings, pg_url,
                                                                                  admin_headers) -> None:
    from fastapi.testclient import TestClient

    from gradguard.service.app import create_app
    from gradguard.service.migrate import upgrade
    upgrade(pg_url)
    app = create_app(make_settings(database_url=pg_url, local_workers=1, run_memory_mb=1024, default_max_examples=3))
    with TestClient(app) as client:
        found = _three_rule_run(client, admin_headers, EATS)
        assert found["a_double_rrule"] == found["c_after_rrule"] == ("pass", None)
        assert found["b_stuck_rrule"][1].startswith("exceeded the 256 MB per-rule memory limit")  # a quarter of 1024

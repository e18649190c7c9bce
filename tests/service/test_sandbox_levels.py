"""Sandbox levels are explicit: a floor under which nothing runs, rlimits only when insecure is said
out loud, and /readyz reporting every worker's own level (their heartbeat rows, on the real databases)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

import gradguard.service.sandbox as sandbox
from gradguard.service.app import create_app
from gradguard.service.config import Settings
from gradguard.service.db import make_sessionmaker
from gradguard.service.models import WorkerRow, utcnow
from gradguard.service.sandbox import Limits, run_check

from service_support import wait_for  # type: ignore[import-not-found]

QUICK = Limits(wall_s=30, cpu_s=30, memory_mb=1536)
WRITES_MARKER = "import pathlib\npathlib.Path({path!r}).write_text('ran')\n"


def _bundle(tmp_path, marker):  # type: ignore[no-untyped-def]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "rules.py").write_text(WRITES_MARKER.format(path=str(marker)))
    return bundle


def test_levels_are_ordered_strongest_first() -> None:
    assert [sandbox.meets(level, "namespaces") for level in sandbox.LEVELS] == [True, True, False]
    assert [sandbox.meets(level, "bubblewrap") for level in sandbox.LEVELS] == [True, False, False]
    assert all(sandbox.meets(level, "rlimits") for level in sandbox.LEVELS)
    assert sandbox.MIN_LEVEL == "namespaces"
    with pytest.raises(ValueError, match="Got minimum='chroot', but it must be one of bubblewrap, namespaces, rlimits"):
        sandbox.meets("rlimits", "chroot")


def test_below_the_minimum_nothing_runs_and_the_reason_names_both_levels(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sandbox, "sandbox_level", lambda: "rlimits")
    marker = tmp_path / "marker"  # rlimits leaves the host's files reachable: the rule would write it
    outcome = run_check(_bundle(tmp_path, marker), limits=QUICK)
    assert (outcome.ok, outcome.report, outcome.level) == (False, None, "rlimits")
    assert outcome.reason.startswith(
        "refused to run: this worker's sandbox level is 'rlimits', below the configured minimum 'namespaces' "
        "(GRADGUARD_SANDBOX_MIN_LEVEL).")
    assert not marker.exists()


def test_the_twin_at_an_allowed_floor_runs(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sandbox, "sandbox_level", lambda: "rlimits")
    marker = tmp_path / "marker"
    outcome = run_check(_bundle(tmp_path, marker), limits=QUICK, min_level="rlimits", select=["GG101"])
    assert marker.read_text() == "ran", (outcome.reason, outcome.stderr_tail)


def test_rlimits_as_the_floor_needs_the_insecure_switch() -> None:
    with pytest.raises(ValidationError, match="Got GRADGUARD_SANDBOX_MIN_LEVEL=rlimits, but the rlimits level does "
                                              "not isolate a submission from the host") as info:
        Settings(sandbox_min_level="rlimits")
    assert "also set GRADGUARD_SANDBOX_INSECURE=true" in str(info.value)
    assert Settings(sandbox_min_level="rlimits", sandbox_insecure=True).sandbox_min_level == "rlimits"
    assert Settings().sandbox_min_level == "namespaces" and Settings().sandbox_insecure is False


def _beat(url: str, worker: str, level: str, *, age_s: float = 0.0) -> None:
    with make_sessionmaker(url)() as session:
        seen = utcnow() - timedelta(seconds=age_s)
        session.merge(WorkerRow(id=worker, executor="celery", devices=["cpu"], sandbox_level=level,
                                min_level="namespaces", started_at=seen, last_seen=seen))
        session.commit()


def test_readyz_lists_every_live_worker_and_fails_on_one_below_the_minimum(client, migrated) -> None:  # type: ignore[no-untyped-def]
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["sandbox"] == {"minimum": "namespaces", "insecure": False, "workers": []}
    _beat(migrated, "box-a:10", "bubblewrap")
    _beat(migrated, "box-b:11", "rlimits", age_s=3600)  # gone an hour ago: not counted
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.json()
    assert [(w["worker"], w["level"], w["ok"]) for w in ready.json()["sandbox"]["workers"]] == [
        ("box-a:10", "bubblewrap", True)]
    _beat(migrated, "box-c:12", "rlimits")
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["status"] == "unready"
    sandbox_body = ready.json()["sandbox"]
    assert [(w["worker"], w["level"], w["ok"]) for w in sandbox_body["workers"]] == [
        ("box-a:10", "bubblewrap", True), ("box-c:12", "rlimits", False)]
    assert sandbox_body["problem"] == ("worker(s) box-c:12 below the minimum sandbox level 'namespaces': "
                                       "they refuse every run")


def _project(client, admin_headers) -> dict[str, str]:  # type: ignore[no-untyped-def]
    token = client.post("/api/v1/projects", json={"slug": "p"}, headers=admin_headers).json()["token"]
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.slow
def test_a_worker_below_the_minimum_claims_nothing_and_readyz_names_it(make_settings, admin_headers,
                                                                       monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GRADGUARD_SANDBOX_LEVEL", "rlimits")  # the spawned worker detects rlimits
    app = create_app(make_settings(local_workers=1, worker_heartbeat_s=0.5))
    with TestClient(app) as client:
        headers = _project(client, admin_headers)
        run_id = client.post("/api/v1/projects/p/runs", json={"files": {"rules.py": "x = 1\n"}},
                             headers=headers).json()["id"]
        ready = wait_for(lambda: (r := client.get("/readyz")).status_code == 503 and r.json(), 60,
                         "the worker to record its level")
        (worker,) = ready["sandbox"]["workers"]
        assert (worker["level"], worker["ok"], worker["executor"]) == ("rlimits", False, "local")
        assert "below the minimum sandbox level 'namespaces'" in ready["sandbox"]["problem"]
        assert client.get(f"/api/v1/runs/{run_id}").json()["status"] == "queued"  # never claimed


@pytest.mark.slow
def test_with_the_insecure_switch_rlimits_runs_and_every_run_page_says_so(make_settings, admin_headers,
                                                                          monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GRADGUARD_SANDBOX_LEVEL", "rlimits")
    from gradguard.web.app import create_app as create_site

    with caplog.at_level("WARNING", logger="gradguard.service"):
        app = create_site(make_settings(local_workers=1, worker_heartbeat_s=0.5, sandbox_min_level="rlimits",
                                        sandbox_insecure=True))
    assert "!!! INSECURE: GRADGUARD_SANDBOX_INSECURE=true" in caplog.text
    with TestClient(app) as client:
        headers = _project(client, admin_headers)
        run_id = client.post("/api/v1/projects/p/runs", json={"files": {"rules.py": "x = 1\n"}},
                             headers=headers).json()["id"]
        run = wait_for(lambda: (r := client.get(f"/api/v1/runs/{run_id}").json())["status"] not in ("queued", "running")
                       and r, 120, "the run to finish")
        assert run["sandbox_level"] == "rlimits"
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["sandbox"]["insecure"] is True
        assert [w["level"] for w in ready.json()["sandbox"]["workers"]] == ["rlimits"]
        page = client.get(f"/runs/{run_id}")
        assert page.status_code == 200 and 'id="insecure-sandbox"' in page.text
        assert "checked at the <code>rlimits</code> level" in page.text

"""The local executor end to end: real worker processes, the real sandbox and checker."""

from __future__ import annotations

import os
import signal
import socket
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from gradguard.service import crud, lifecycle
from gradguard.service.app import create_app
from gradguard.service.db import make_sessionmaker
from gradguard.service.migrate import upgrade
from gradguard.service.models import Run, utcnow
from gradguard.service.schemas import ProjectCreate, RunOptions

from service_support import SLEEPY_RULES, SMALL_RULES, wait_for  # type: ignore[import-not-found]

FINAL = ("passed", "failed", "error")


def _project(client, admin_headers) -> dict[str, str]:  # type: ignore[no-untyped-def]
    token = client.post("/api/v1/projects", json={"slug": "p"}, headers=admin_headers).json()["token"]
    return {"Authorization": f"Bearer {token}"}


def _submit(client, headers, source: str, **options) -> int:  # type: ignore[no-untyped-def]
    response = client.post("/api/v1/projects/p/runs", json={"files": {"rules.py": source}, **options}, headers=headers)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def _status(client, run_id: int, *wanted: str):  # type: ignore[no-untyped-def]
    run = client.get(f"/api/v1/runs/{run_id}").json()
    return run if run["status"] in wanted else None


@pytest.mark.slow
def test_submission_to_verdict_with_reports_in_every_format(make_settings, admin_headers) -> None:  # type: ignore[no-untyped-def]
    app = create_app(make_settings(local_workers=1))
    with TestClient(app) as client:
        headers = _project(client, admin_headers)
        run_id = _submit(client, headers, SMALL_RULES, branch="main", commit="c0ffee", max_examples=5)
        run = wait_for(lambda: _status(client, run_id, *FINAL), 120, "the run to finish")
        assert run["status"] == "failed", run  # triple_rrule ignores its cotangent
        assert run["attempts"] == 1 and run["sandbox_level"] in ("bubblewrap", "namespaces", "rlimits")
        assert run["summary"]["failed"] >= 1 and run["duration_s"] > 0
        report = client.get(f"/api/v1/runs/{run_id}/report").json()
        assert report["schema"] == "gradguard.report/1"
        assert report["environment"]["sandbox"] == run["sandbox_level"]
        assert {r["name"] for r in report["rules"]} >= {"double_rrule", "triple_rrule"}
        junit = client.get(f"/api/v1/runs/{run_id}/junit.xml")
        assert junit.status_code == 200 and junit.headers["content-type"].startswith("application/xml")
        assert "<testsuite" in junit.text and "triple_rrule" in junit.text
        markdown = client.get(f"/api/v1/runs/{run_id}/summary.md")
        assert markdown.status_code == 200 and "triple_rrule" in markdown.text
        latest = client.get("/api/v1/projects/p/latest").json()
        assert (latest["run_id"], latest["status"], latest["commit"]) == (run_id, "failed", "c0ffee")
        assert client.get("/api/v1/projects/p/branches").json()["items"][0]["branch"] == "main"
        metrics = client.get("/metrics").text
        assert 'gradguard_check_duration_seconds_count{device="cpu"} 1.0' in metrics
        assert 'gradguard_runs{device="cpu",status="failed"} 1.0' in metrics


@pytest.mark.slow
def test_a_run_over_its_wall_time_ends_error_and_the_worker_takes_the_next(make_settings, admin_headers) -> None:  # type: ignore[no-untyped-def]
    app = create_app(make_settings(local_workers=1, run_wall_s=3))
    with TestClient(app) as client:
        headers = _project(client, admin_headers)
        slow = _submit(client, headers, SLEEPY_RULES)
        quick = _submit(client, headers, "x = 1\n")
        run = wait_for(lambda: _status(client, slow, *FINAL), 60, "the sleeping run to be stopped")
        assert run["status"] == "error" and "wall time" in run["error"], run
        assert wait_for(lambda: _status(client, quick, *FINAL), 60, "the next run")


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_the_run_retried_then_error(make_settings, admin_headers) -> None:  # type: ignore[no-untyped-def]
    app = create_app(make_settings(local_workers=1, max_retries=1, run_wall_s=60))
    with TestClient(app) as client:
        headers = _project(client, admin_headers)
        run_id = _submit(client, headers, SLEEPY_RULES)
        factory = app.state.sessionmaker
        for attempt in (1, 2):
            run = wait_for(lambda: _status(client, run_id, "running"), 60, f"attempt {attempt} to start")
            assert run["attempts"] == attempt
            with factory() as session:
                holder = session.get(Run, run_id).worker
            os.kill(int(holder.rpartition(":")[2]), signal.SIGKILL)
            wait_for(lambda: _status(client, run_id, "queued", "error"), 30, "the run to be released")
        run = wait_for(lambda: _status(client, run_id, "error"), 30, "the run to end as error")
        assert run["attempts"] == 2 and "gave up after 1 retries" in run["error"]
        assert len(app.state.executor.pids()) == 1  # the pool replaced the killed worker
        assert client.get("/readyz").status_code == 200


@pytest.mark.slow
def test_shutdown_puts_running_runs_back_without_spending_an_attempt(make_settings, admin_headers) -> None:  # type: ignore[no-untyped-def]
    app = create_app(make_settings(local_workers=1))
    app.state.executor.grace_s = 0.5
    with TestClient(app) as client:
        run_id = _submit(client, _project(client, admin_headers), SLEEPY_RULES)
        wait_for(lambda: _status(client, run_id, "running"), 60, "the run to start")
    with app.state.sessionmaker() as session:
        run = session.get(Run, run_id)
        assert (run.status, run.attempts, run.worker) == ("queued", 0, None)


@pytest.mark.parametrize("db_url", ["sqlite", "postgresql"], indirect=True)
def test_startup_requeues_runs_left_running_by_a_dead_process(make_settings, db_url) -> None:  # type: ignore[no-untyped-def]
    upgrade(db_url)
    factory = make_sessionmaker(db_url)
    with factory() as session:
        project, _ = crud.create_project(session, data=ProjectCreate(slug="p"))
        ids = [crud.create_run(session, project=project, options=RunOptions(), files={"a.py": b""}).id for _ in range(2)]
        session.commit()
        lifecycle.claim_run(session, run_id=ids[0], worker=f"{socket.gethostname()}:999999999", max_retries=2,
                            lease_s=600)
        lifecycle.claim_run(session, run_id=ids[1], worker="other-machine:12", max_retries=2, lease_s=600)
        session.get(Run, ids[1]).lease_until = utcnow() + timedelta(seconds=600)
        session.commit()
    app = create_app(make_settings(database_url=db_url, local_workers=0))
    with TestClient(app):
        with factory() as session:
            first, second = (session.get(Run, i) for i in ids)
            assert (first.status, first.attempts, first.worker) == ("queued", 1, None)
            assert second.status == "running"  # another machine's live lease is left alone


HOSTILE = '''\
import os
secrets = dict(os.environ)
try:
    secrets["db"] = open({db!r}, "rb").read(200).hex()
except OSError as exc:
    secrets["db"] = f"unreadable: {{exc}}"
raise RuntimeError(repr(secrets))
'''


@pytest.mark.slow
def test_a_submission_cannot_see_the_services_secrets_or_database(make_settings, admin_headers, tmp_path,
                                                                   monkeypatch) -> None:  # type: ignore[no-untyped-def]
    db_file = tmp_path / "gradguard.sqlite3"
    monkeypatch.setenv("GRADGUARD_SECRET_CANARY", "canary-4a1f9e")  # inherited by the worker processes
    app = create_app(make_settings(local_workers=1))
    with TestClient(app) as client:
        headers = _project(client, admin_headers)
        run_id = _submit(client, headers, HOSTILE.format(db=str(db_file)))
        run = wait_for(lambda: _status(client, run_id, *FINAL), 120, "the hostile run to finish")
        report = client.get(f"/api/v1/runs/{run_id}/report").text
        assert run["status"] == "error" and "RuntimeError" in report, run  # reported, nothing lost
        for secret in ("canary-4a1f9e", admin_headers["Authorization"].split()[1], "GRADGUARD_DATABASE_URL"):
            assert secret not in report
        if run["sandbox_level"] != "rlimits":  # file-system isolation: the service's files are not there
            assert "unreadable" in report and "53514c69746520666f726d6174" not in report  # "SQLite format"
        assert client.get("/readyz").status_code == 200


@pytest.mark.slow
@pytest.mark.parametrize("source, reason", [
    ("x = bytearray(50 * 2**30)\n", "MB memory"),                      # allocates 50 GB
    ("import sys\nwhile True:\n    sys.stdout.write('x' * 2**20)\n", "MB output"),  # prints without end
])
def test_runs_over_a_sandbox_limit_end_error_with_the_reason(make_settings, admin_headers, source, reason) -> None:  # type: ignore[no-untyped-def]
    app = create_app(make_settings(local_workers=1, run_memory_mb=512))
    with TestClient(app) as client:
        headers = _project(client, admin_headers)
        run_id = _submit(client, headers, source)
        run = wait_for(lambda: _status(client, run_id, *FINAL), 120, "the hostile run to end")
        assert run["status"] == "error" and reason in run["error"] and run["attempts"] == 1, run
        after = _submit(client, headers, "x = 1\n")
        assert wait_for(lambda: _status(client, after, *FINAL), 60, "the worker to take the next run")

"""An identical bundle with identical settings reuses a finished verdict instead of being checked again."""

from __future__ import annotations

import pytest

from gradguard.service import lifecycle
from gradguard.service.db import make_sessionmaker
from gradguard.service.models import Run
from service_support import SMALL_RULES

REPORT = {
    "schema": "gradguard.report/1",
    "environment": {},
    "rules": [
        {"name": "double_rrule", "module": "rules", "source_file": "rules.py", "verdict": "pass", "duration_s": 0.5,
         "findings": []},
        {"name": "triple_rrule", "module": "rules", "source_file": "rules.py", "verdict": "fail", "duration_s": 0.7,
         "findings": [{"check_id": "GG202", "severity": "error", "title": "not linear", "rule": "triple_rrule",
                       "message": "ones bug", "location": "argument 0"}]},
    ],
}


def _submit(client, project, **options):  # type: ignore[no-untyped-def]
    body = {"files": {"rules.py": SMALL_RULES}, "select": ["GG2"], "seed": 3, **options}
    accepted = client.post("/api/v1/projects/proj/runs", json=body, headers=project["headers"])
    assert accepted.status_code == 202, accepted.text
    return accepted.json()


def _finish(migrated: str, run_id: int, ok: bool = True) -> None:
    factory = make_sessionmaker(migrated)
    me = lifecycle.worker_id()
    with factory() as session:
        assert lifecycle.claim_run(session, run_id=run_id, worker=me, max_retries=2, lease_s=60) is not None
        lifecycle.finish_run(session, run_id=run_id, worker=me, ok=ok, report=dict(REPORT) if ok else None,
                             level="bubblewrap", reason=None if ok else "killed", duration_s=1.0)


def test_an_identical_bundle_reuses_the_finished_verdict_and_says_so(client, project, migrated) -> None:  # type: ignore[no-untyped-def]
    first = _submit(client, project)
    assert first["status"] == "queued"
    _finish(migrated, first["id"])
    again = _submit(client, project, branch="feature/y", commit="abc")
    assert again["status"] == "failed"  # at once: nothing is queued
    run = client.get(f"/api/v1/runs/{again['id']}").json()
    assert (run["status"], run["reused_from"], run["branch"], run["commit"]) == ("failed", first["id"], "feature/y", "abc")
    assert client.get(f"/api/v1/runs/{first['id']}").json()["reused_from"] is None
    report = client.get(f"/api/v1/runs/{again['id']}/report").json()
    original = client.get(f"/api/v1/runs/{first['id']}/report").json()
    assert [r["cached"] for r in report["rules"]] == [True, True]
    assert [r["cached"] for r in original["rules"]] == [False, False]
    assert report["summary"] == original["summary"]
    latest = client.get("/api/v1/projects/proj/latest", params={"branch": "feature/y"}).json()
    assert latest["status"] == "failed"
    with make_sessionmaker(migrated)() as session:
        assert session.get(Run, again["id"]).status == "failed"


@pytest.mark.parametrize("change", [{"seed": 4}, {"select": ["GG1"]}, {"max_examples": 3},
                                    {"files": {"rules.py": SMALL_RULES + "\n# edited\n"}}])
def test_a_changed_bundle_or_setting_is_checked_again(client, project, migrated, change) -> None:  # type: ignore[no-untyped-def]
    first = _submit(client, project)
    _finish(migrated, first["id"])
    again = _submit(client, project, **change)
    assert again["status"] == "queued"
    assert client.get(f"/api/v1/runs/{again['id']}").json()["reused_from"] is None


def test_a_run_that_ended_in_error_is_not_reused(client, project, migrated) -> None:  # type: ignore[no-untyped-def]
    first = _submit(client, project)
    _finish(migrated, first["id"], ok=False)
    assert client.get(f"/api/v1/runs/{first['id']}").json()["status"] == "error"
    assert _submit(client, project)["status"] == "queued"

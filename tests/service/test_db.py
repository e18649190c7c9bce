"""The database layer on SQLite and the real PostgreSQL: migrations, claims, attempts, results."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import func, inspect, select

from gradguard.service import crud, lifecycle
from gradguard.service.db import get_engine, make_sessionmaker
from gradguard.service.migrate import downgrade, upgrade
from gradguard.service.models import Base, BranchHead, FindingRow, ReportRow, RuleResultRow, Run, utcnow
from gradguard.service.schemas import ProjectCreate, RunOptions

REPORT = {
    "schema": "gradguard.report/1",
    "summary": {"rules": 2, "passed": 1, "failed": 1, "errored": 0, "findings": 1, "by_check": {"GG202": 1},
                "verdict": "fail"},
    "environment": {},
    "rules": [
        {"name": "double_rrule", "module": "rules", "source_file": "rules.py", "verdict": "pass", "duration_s": 0.5,
         "findings": []},
        {"name": "triple_rrule", "module": "rules", "source_file": "rules.py", "verdict": "fail", "duration_s": 0.7,
         "findings": [{"check_id": "GG202", "severity": "error", "title": "not linear", "rule": "triple_rrule", "message": "ones bug",
                       "location": "argument 0"}]},
    ],
}


@pytest.fixture
def factory(migrated: str):  # type: ignore[no-untyped-def]
    return make_sessionmaker(migrated)


def new_run(factory, *, branch: str = "main", device: str = "cpu") -> int:  # type: ignore[no-untyped-def]
    with factory() as session:
        project = session.scalar(select(crud.Project).where(crud.Project.slug == "p"))
        if project is None:
            project, _ = crud.create_project(session, data=ProjectCreate(slug="p"))
        run = crud.create_run(session, project=project, options=RunOptions(branch=branch, device=device),
                              files={"rules.py": b"x = 1\n"})
        session.commit()
        return run.id


def test_migrations_match_the_models_and_go_both_ways(migrated: str) -> None:
    engine = get_engine(migrated)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == [], f"models and migrations differ; add a migration: {diff}"
    downgrade(migrated, "base")
    assert set(inspect(get_engine(migrated)).get_table_names()) <= {"alembic_version"}
    upgrade(migrated)
    assert {"projects", "runs", "run_files", "rule_results", "findings", "reports", "branch_heads"} <= set(
        inspect(get_engine(migrated)).get_table_names())


def test_project_token_is_stored_hashed(factory) -> None:  # type: ignore[no-untyped-def]
    with factory() as session:
        project, token = crud.create_project(session, data=ProjectCreate(slug="p", public=False))
        session.commit()
        assert token.startswith("ggp_") and len(token) > 40
        assert token not in (project.token_hash, project.token_prefix) and len(project.token_hash) == 64


def test_only_one_worker_wins_a_claim(factory) -> None:  # type: ignore[no-untyped-def]
    run_id = new_run(factory)
    with factory() as a, factory() as b:
        first = lifecycle.claim_run(a, run_id=run_id, worker=lifecycle.worker_id(), max_retries=2, lease_s=60)
        second = lifecycle.claim_run(b, run_id=run_id, worker="other-host:1", max_retries=2, lease_s=60)
    assert first is not None and first.status == "running" and first.attempts == 1
    assert second is None


def test_claim_next_respects_devices_and_order(factory) -> None:  # type: ignore[no-untyped-def]
    gpu = new_run(factory, device="gpu")
    cpu1, cpu2 = new_run(factory), new_run(factory)
    with factory() as session:
        kw = dict(worker=lifecycle.worker_id(), max_retries=2, lease_s=60)
        assert lifecycle.claim_next(session, devices=("cpu",), **kw).id == cpu1
        assert lifecycle.claim_next(session, devices=("cpu",), **kw).id == cpu2
        assert lifecycle.claim_next(session, devices=("cpu",), **kw) is None
        assert session.get(Run, gpu).status == "queued"


def test_finish_stores_results_findings_report_and_branch_head(factory) -> None:  # type: ignore[no-untyped-def]
    me = lifecycle.worker_id()
    run_id = new_run(factory, branch="feature/x")
    with factory() as session:
        lifecycle.claim_run(session, run_id=run_id, worker=me, max_retries=2, lease_s=60)
        status = lifecycle.finish_run(session, run_id=run_id, worker=me, ok=True, report=dict(REPORT),
                                      level="bubblewrap", reason=None, duration_s=1.25)
    assert status == "failed"
    with factory() as session:
        run = session.get(Run, run_id)
        assert (run.status, run.sandbox_level, run.summary["verdict"]) == ("failed", "bubblewrap", "fail")
        assert session.get(ReportRow, run_id).report["environment"]["sandbox"] == "bubblewrap"
        failing = session.scalars(select(RuleResultRow.name).where(RuleResultRow.verdict == "fail")).all()
        assert failing == ["triple_rrule"]
        assert session.scalar(select(func.count()).select_from(FindingRow).where(FindingRow.check_id == "GG202")) == 1
        head = session.get(BranchHead, (run.project_id, "feature/x"))
        assert (head.run_id, head.status) == (run_id, "failed")


def test_an_older_run_finishing_late_does_not_replace_the_branch_head(factory) -> None:  # type: ignore[no-untyped-def]
    me = lifecycle.worker_id()
    old, new = new_run(factory), new_run(factory)
    with factory() as session:
        for run_id, ok in ((new, True), (old, False)):
            lifecycle.claim_run(session, run_id=run_id, worker=me, max_retries=2, lease_s=60)
            lifecycle.finish_run(session, run_id=run_id, worker=me, ok=ok, report=dict(REPORT) if ok else None,
                                 level="rlimits", reason="exceeded 60 s wall time", duration_s=60)
        project = session.get(Run, new).project
        assert crud.get_branch_head(session, project=project, branch=None).run_id == new
        assert session.get(Run, old).error == "exceeded 60 s wall time"


def test_a_worker_that_lost_its_run_cannot_overwrite_it(factory) -> None:  # type: ignore[no-untyped-def]
    run_id = new_run(factory)
    with factory() as session:
        lifecycle.claim_run(session, run_id=run_id, worker="host:1", max_retries=2, lease_s=60)
        assert lifecycle.finish_run(session, run_id=run_id, worker="host:2", ok=True, report=dict(REPORT),
                                    level="rlimits", reason=None, duration_s=1) is None
        assert session.get(Run, run_id, populate_existing=True).status == "running"


def test_dead_workers_runs_are_requeued_and_attempts_are_bounded(factory) -> None:  # type: ignore[no-untyped-def]
    host = socket.gethostname()
    dead, remote_live, remote_expired = new_run(factory), new_run(factory), new_run(factory)
    with factory() as session:
        for run_id, worker in ((dead, f"{host}:999999999"), (remote_live, "elsewhere:1"), (remote_expired, "elsewhere:2")):
            lifecycle.claim_run(session, run_id=run_id, worker=worker, max_retries=1, lease_s=300)
        session.get(Run, remote_expired).lease_until = utcnow() - timedelta(seconds=1)
        session.commit()
        assert sorted(lifecycle.requeue_stale(session)) == [dead, remote_expired]
        assert session.get(Run, remote_live, populate_existing=True).status == "running"
        # The second attempt dies too: with max_retries=1 the run is not started a third time.
        lifecycle.claim_run(session, run_id=dead, worker=f"{host}:999999998", max_retries=1, lease_s=300)
        assert lifecycle.requeue_stale(session) == [dead]
        assert lifecycle.claim_run(session, run_id=dead, worker=lifecycle.worker_id(), max_retries=1, lease_s=300) is None
        run = session.get(Run, dead, populate_existing=True)
        assert run.status == "error" and run.attempts == 2 and "gave up after 1 retries" in run.error
        assert session.get(BranchHead, (run.project_id, "main")).status == "error"


def test_cursor_pagination_walks_every_run_once(factory) -> None:  # type: ignore[no-untyped-def]
    ids = [new_run(factory, branch="main") for _ in range(5)] + [new_run(factory, branch="dev")]
    with factory() as session:
        project = session.get(Run, ids[0]).project
        seen, cursor = [], None
        while True:
            page, cursor = crud.list_runs(session, project=project, branch="main", limit=2, cursor=cursor)
            seen += [r.id for r in page]
            if cursor is None:
                break
    assert seen == sorted(ids[:5], reverse=True)


def test_reports_with_nan_infinity_and_nul_are_stored_on_every_database(factory) -> None:  # type: ignore[no-untyped-def]
    me = lifecycle.worker_id()
    run_id = new_run(factory)
    report = {**REPORT, "environment": {"error": float("nan"), "bound": float("inf")},
              "rules": [{**REPORT["rules"][1], "duration_s": 0.1, "name": "evil\x00rule"}]}
    with factory() as session:
        lifecycle.claim_run(session, run_id=run_id, worker=me, max_retries=2, lease_s=60)
        assert lifecycle.finish_run(session, run_id=run_id, worker=me, ok=True, report=report, level="rlimits",
                                    reason=None, duration_s=1) == "failed"
        stored = session.get(ReportRow, run_id).report
    assert (stored["environment"]["error"], stored["environment"]["bound"]) == ("NaN", "Infinity")
    assert stored["rules"][0]["name"] == "evil\ufffdrule"

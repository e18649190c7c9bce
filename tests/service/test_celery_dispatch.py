"""Celery dispatch without workers, on the real Redis: orphaned runs are sent again at start-up, and a
broker outage at submission ends the run as error with a 503 instead of leaving it queued forever.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from gradguard.service import crud
from gradguard.service.app import create_app
from gradguard.service.db import make_sessionmaker
from gradguard.service.migrate import upgrade
from gradguard.service.models import Run, utcnow
from gradguard.service.schemas import ProjectCreate, RunOptions

from service_support import ADMIN  # type: ignore[import-not-found]


@pytest.fixture
def prefix(redis_url: str):  # type: ignore[no-untyped-def]
    import redis

    name = f"ggtest-{uuid.uuid4().hex[:10]}-"
    yield name
    client = redis.Redis.from_url(redis_url)
    for key in list(client.scan_iter(match=f"*{name}*")):
        client.delete(key)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_start_up_sends_again_runs_queued_without_a_message(make_settings, migrated, redis_url, prefix) -> None:  # type: ignore[no-untyped-def]
    factory = make_sessionmaker(migrated)
    with factory() as session:
        project, _ = crud.create_project(session, data=ProjectCreate(slug="p"))
        old = crud.create_run(session, project=project, options=RunOptions(device="gpu"), files={"a.py": b""})
        crud.create_run(session, project=project, options=RunOptions(), files={"a.py": b""})  # fresh: in flight
        old.created_at = utcnow() - timedelta(hours=1)
        session.commit()
    app = create_app(make_settings(database_url=migrated, executor="celery", broker_url=redis_url,
                                   queue_prefix=prefix))
    with TestClient(app):
        assert app.state.executor.queue_lengths() == {"cpu": 0, "gpu": 1}


def test_broker_outage_at_submission_is_a_503_and_the_run_ends_error(make_settings, migrated) -> None:  # type: ignore[no-untyped-def]
    upgrade(migrated)
    app = create_app(make_settings(database_url=migrated, executor="celery", broker_url="redis://127.0.0.1:1/0"))
    with TestClient(app) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["queue"]["broker"].startswith("unreachable")
        token = client.post("/api/v1/projects", json={"slug": "p"},
                            headers={"Authorization": f"Bearer {ADMIN}"}).json()["token"]
        response = client.post("/api/v1/projects/p/runs", json={"files": {"a.py": "x = 1"}},
                               headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 503 and response.json()["detail"]["field"] == "queue"
        with app.state.sessionmaker() as session:
            run = session.query(Run).one()
            assert run.status == "error" and run.error.startswith("could not be queued")

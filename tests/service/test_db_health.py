"""Database health: /readyz fails when the database is missing, read-only or not the one the service
started with; the service refuses to start on an empty database it expected to exist; a worker whose
result cannot be stored retries with new connections and stores it once the database takes writes."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from gradguard.service import crud, lifecycle
from gradguard.service.app import create_app
from gradguard.service.db import dispose_all, make_sessionmaker
from gradguard.service.dbhealth import EmptyDatabase
from gradguard.service.migrate import upgrade
from gradguard.service.models import Run
from gradguard.service.schemas import ProjectCreate, RunOptions

from conftest import PG_ADMIN_URL  # type: ignore[import-not-found]
from service_support import ADMIN, wait_for  # type: ignore[import-not-found]


def _database(client: TestClient) -> tuple[int, str]:
    answer = client.get("/readyz")
    return answer.status_code, answer.json()["database"]


def test_readyz_fails_when_the_sqlite_file_is_deleted_then_replaced(make_settings, tmp_path: Path) -> None:
    path = tmp_path / "gradguard.sqlite3"
    url = f"sqlite:///{path}"
    with TestClient(create_app(make_settings(database_url=url))) as client:
        assert _database(client) == (200, "ok")
        for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            leftover.unlink(missing_ok=True)
        assert client.get("/api/v1/projects").status_code == 200  # the open connections still read the old file
        code, why = _database(client)
        assert code == 503 and why.startswith("missing: the SQLite database file is gone") and str(tmp_path) not in why
        upgrade(url)  # someone makes a new, empty database at the same path
        code, why = _database(client)
        assert code == 503 and why.startswith("replaced: the SQLite database file is not the one")


def _pg_admin(sql: str) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


def test_readyz_fails_when_postgresql_is_read_only_or_another_database(make_settings, pg_url: str) -> None:
    upgrade(pg_url)
    name = pg_url.rsplit("/", 1)[1]
    with TestClient(create_app(make_settings(database_url=pg_url, mode="production"))) as client:
        assert _database(client) == (200, "ok")
        reconnect = client.app.state.sessionmaker.kw["bind"].dispose  # type: ignore[attr-defined]
        _pg_admin(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        reconnect()  # the connections of a failed-over (read-only) server are new ones
        code, why = _database(client)
        assert code == 503 and why.startswith("read-only: a write was refused"), why
        _pg_admin(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
        reconnect()
        assert _database(client) == (200, "ok")
        # the database is dropped and created again, schema and all: another database under the same name
        _pg_admin(f'DROP DATABASE "{name}" WITH (FORCE)')
        _pg_admin(f'CREATE DATABASE "{name}"')
        upgrade(pg_url)
        code, why = _database(client)
        assert code == 503 and why.startswith("replaced: this is not the database the service started with"), why


def test_production_refuses_to_start_on_an_empty_database_unless_told_to_create_it(make_settings, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'prod.sqlite3'}"
    with pytest.raises(EmptyDatabase, match="expected an existing one .production mode"):
        with TestClient(create_app(make_settings(database_url=url, mode="production"))):
            pass
    assert not (tmp_path / "prod.sqlite3").exists()
    with TestClient(create_app(make_settings(database_url=url, mode="production", create_database=True))) as client:
        assert _database(client) == (200, "ok")


def test_embedded_mode_does_not_silently_replace_a_lost_database(make_settings, tmp_path) -> None:
    path = tmp_path / "gradguard.sqlite3"
    settings = make_settings(database_url=f"sqlite:///{path}")
    with TestClient(create_app(settings)) as client:  # the first start creates it
        assert client.post("/api/v1/projects", json={"slug": "kept"},
                           headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 201
    dispose_all()
    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        leftover.unlink(missing_ok=True)
    with pytest.raises(EmptyDatabase, match="this service created a database file here before, and it is gone"):
        with TestClient(create_app(settings)):
            pass
    assert not path.exists()
    serve = CliRunner().invoke(_serve(), [], env={"GRADGUARD_DATABASE_URL": f"sqlite:///{path}",
                                                  "GRADGUARD_ADMIN_TOKEN": ADMIN})
    assert serve.exit_code == 2 and "GRADGUARD_CREATE_DATABASE=true" in serve.output, serve.output
    with TestClient(create_app(make_settings(database_url=f"sqlite:///{path}", create_database=True))) as client:
        assert client.get("/api/v1/projects").json()["items"] == []


def _serve():  # type: ignore[no-untyped-def]
    from gradguard.web.cli import serve

    return serve


def test_a_result_is_stored_once_the_database_takes_writes_again(make_settings, pg_url, caplog) -> None:
    from gradguard.service.worker import execute_claimed

    upgrade(pg_url)
    name = pg_url.rsplit("/", 1)[1]
    factory = make_sessionmaker(pg_url)
    with factory() as session:
        project, _ = crud.create_project(session, data=ProjectCreate(slug="p"))
        run = crud.create_run(session, project=project, options=RunOptions(), files={"r.py": b"x = 1\n"})
        session.commit()
        claimed = lifecycle.claim_run(session, run_id=run.id, worker="w:1", max_retries=2, lease_s=60)
    assert claimed is not None
    settings = make_settings(database_url=pg_url, lease_s=60)
    _pg_admin(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    factory.kw["bind"].dispose()
    caplog.set_level(logging.WARNING, logger="gradguard.worker")
    done: dict[str, object] = {}
    thread = threading.Thread(target=lambda: done.update(status=execute_claimed(factory, claimed, worker="w:1",
                                                                                settings=settings)))
    started = time.monotonic()
    try:
        thread.start()
        wait_for(lambda: any("took no write" in r.getMessage() for r in caplog.records), 60, "a refused write")
    finally:
        _pg_admin(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
    thread.join(60)
    assert done.get("status") == "error"  # the bundle has no rules: its real verdict, stored
    assert time.monotonic() - started < 30  # well before the 60 s lease would have lapsed
    with factory() as session:
        stored = session.get(Run, run.id)
        assert stored is not None and stored.status == "error" and stored.error.startswith("no rules found")

"""Fixtures for the service tests: real databases (SQLite file and the PostgreSQL server), apps,
clients, projects, and small rule modules. Each test gets its own database, so tests run in any order.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gradguard.service.config import Settings
from service_support import ADMIN, SMALL_RULES, wait_for  # noqa: F401  (re-exported for fixtures)

PG_ADMIN_URL = os.environ.get("GRADGUARD_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("GRADGUARD_TEST_REDIS", "redis://127.0.0.1:6379/0")
def _pg_reachable() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            return None
    except Exception as exc:  # noqa: BLE001 - the reason is shown in the skip
        return f"PostgreSQL at {PG_ADMIN_URL.split('@')[-1]} unreachable ({type(exc).__name__}); CI provides it"


def _redis_reachable() -> str | None:
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
        return None
    except Exception as exc:  # noqa: BLE001
        return f"Redis at {REDIS_URL} unreachable ({type(exc).__name__}); CI provides it"


@pytest.fixture(scope="session")
def redis_url() -> str:
    reason = _redis_reachable()
    if reason:
        pytest.skip(reason)
    return REDIS_URL


def _postgres_database() -> Iterator[str]:
    import psycopg

    reason = _pg_reachable()
    if reason:
        pytest.skip(reason)
    name = f"gg_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        from gradguard.service.db import dispose_all

        dispose_all()
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """An empty database of each kind, private to the test."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gradguard.sqlite3'}"
    else:
        yield from _postgres_database()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """An empty PostgreSQL database private to the test."""
    yield from _postgres_database()


@pytest.fixture
def migrated(db_url: str) -> str:
    from gradguard.service.migrate import upgrade

    upgrade(db_url)
    return db_url


@pytest.fixture
def make_settings(tmp_path) -> Callable[..., Settings]:  # type: ignore[no-untyped-def]
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {"database_url": f"sqlite:///{tmp_path / 'gradguard.sqlite3'}",
                                  "admin_token": ADMIN, "local_workers": 0, "poll_interval_s": 0.1,
                                  "read_rate_limit_per_minute": 0}
        values.update(overrides)
        return Settings(**values)

    return make


@pytest.fixture
def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def client(make_settings, migrated):  # type: ignore[no-untyped-def]
    """An API client on a migrated database (SQLite and PostgreSQL), no executor processes."""
    from fastapi.testclient import TestClient

    from gradguard.service.app import create_app

    app = create_app(make_settings(database_url=migrated, rate_limit_per_minute=1000))
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def project(client, admin_headers) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """A public project; its ``token`` and ready ``headers`` for submitting."""
    response = client.post("/api/v1/projects", json={"slug": "proj", "name": "Project"}, headers=admin_headers)
    assert response.status_code == 201, response.text
    body = response.json()
    body["headers"] = {"Authorization": f"Bearer {body['token']}"}
    return body

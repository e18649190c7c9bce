"""The live app fuzzed from its own OpenAPI schema (schemathesis): whatever a client sends, no answer
is a 500 and every documented answer matches the schema."""

from __future__ import annotations

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance

from service_support import ADMIN  # type: ignore[import-not-found]

AS_ADMIN = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture(scope="module")
def live_app(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The whole app (API, pages, badges) on a migrated SQLite database with a public and a private
    project, one queued run each; no executor, no rate limits (the fuzzer sends thousands of requests)."""
    from gradguard.service.config import Settings
    from gradguard.web.app import create_app

    folder = tmp_path_factory.mktemp("fuzz")
    app = create_app(Settings(database_url=f"sqlite:///{folder / 'gradguard.sqlite3'}", admin_token=ADMIN,
                              local_workers=0, rate_limit_per_minute=0, read_rate_limit_per_minute=0))
    with TestClient(app) as client:
        for slug, public in (("open", True), ("bravo", False)):
            token = client.post("/api/v1/projects", json={"slug": slug, "public": public}, headers=AS_ADMIN).json()["token"]
            answer = client.post(f"/api/v1/projects/{slug}/runs", json={"files": {"r.py": "x = 1\n"}},
                                 headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 202, answer.text
        yield app


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture(scope="module")
def api_schema(live_app):  # type: ignore[no-untyped-def]
    return schemathesis.openapi.from_asgi("/openapi.json", live_app)


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_input_makes_a_500_or_an_answer_outside_the_schema(case) -> None:  # type: ignore[no-untyped-def]
    for headers in (None, AS_ADMIN):
        case.call_and_validate(headers=headers, checks=[not_a_server_error, response_schema_conformance])

"""The REST API through TestClient, on SQLite and PostgreSQL: projects, submissions, reads, errors."""

from __future__ import annotations

import io
import tarfile

import pytest
from pydantic import ValidationError

from gradguard.service.config import Settings
from gradguard.service.ratelimit import RateLimiter

from service_support import SMALL_RULES  # type: ignore[import-not-found]


def error(response) -> dict:  # type: ignore[no-untyped-def]
    detail = response.json()["detail"]
    assert set(detail) >= {"field", "message", "fix"}, detail
    return detail


def tar_gz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as archive:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_health_ready_and_docs(client) -> None:  # type: ignore[no-untyped-def]
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["database"] == "ok"
    assert ready.json()["sandbox"] == {"minimum": "namespaces", "insecure": False, "workers": []}  # no executor here
    paths = client.get("/openapi.json").json()["paths"]
    assert "/api/v1/projects/{project}/runs" in paths and "/api/v1/runs/{run_id}/junit.xml" in paths
    bodies = paths["/api/v1/projects/{project}/runs"]["post"]["requestBody"]["content"]
    assert {"application/json", "multipart/form-data"} <= set(bodies)
    assert client.get("/docs").status_code == 200


def test_creating_projects_needs_the_admin_token(client, admin_headers) -> None:  # type: ignore[no-untyped-def]
    assert error(client.post("/api/v1/projects", json={"slug": "x"}))["field"] == "authorization"
    wrong = client.post("/api/v1/projects", json={"slug": "x"}, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403
    bad_slug = client.post("/api/v1/projects", json={"slug": "Bad Slug"}, headers=admin_headers)
    assert bad_slug.status_code == 422 and error(bad_slug)["field"] == "slug"
    assert client.post("/api/v1/projects", json={"slug": "x"}, headers=admin_headers).status_code == 201
    again = client.post("/api/v1/projects", json={"slug": "x"}, headers=admin_headers)
    assert again.status_code == 409 and "already exists" in error(again)["message"]


def test_private_projects_are_hidden_without_a_token(client, admin_headers) -> None:  # type: ignore[no-untyped-def]
    created = client.post("/api/v1/projects", json={"slug": "secret", "public": False}, headers=admin_headers).json()
    client.post("/api/v1/projects", json={"slug": "open"}, headers=admin_headers)
    assert [p["slug"] for p in client.get("/api/v1/projects").json()["items"]] == ["open"]
    assert client.get("/api/v1/projects/secret").status_code == 404
    own = {"Authorization": f"Bearer {created['token']}"}
    assert client.get("/api/v1/projects/secret", headers=own).status_code == 200
    assert "token" not in client.get("/api/v1/projects/secret", headers=own).json()
    assert [p["slug"] for p in client.get("/api/v1/projects", headers=admin_headers).json()["items"]] == ["open", "secret"]
    run = client.post("/api/v1/projects/secret/runs", json={"files": {"a.py": "x = 1"}}, headers=own).json()
    assert client.get(f"/api/v1/runs/{run['id']}").status_code == 404
    assert client.get("/api/v1/projects/secret/runs").status_code == 404
    assert client.get(f"/api/v1/runs/{run['id']}", headers=own).json()["project"] == "secret"


def test_submit_json_then_read_run_list_and_latest(client, project) -> None:  # type: ignore[no-untyped-def]
    body = {"files": {"rules.py": SMALL_RULES}, "commit": "abc123", "branch": "feature/x", "pull_request": 7,
            "select": ["GG2"], "seed": 3}
    accepted = client.post("/api/v1/projects/proj/runs", json=body, headers=project["headers"])
    assert accepted.status_code == 202, accepted.text
    run_id = accepted.json()["id"]
    assert accepted.json()["status"] == "queued"
    assert accepted.json()["urls"]["report"].endswith(f"/api/v1/runs/{run_id}/report")
    run = client.get(f"/api/v1/runs/{run_id}").json()
    assert (run["commit"], run["branch"], run["pull_request"], run["select"], run["seed"], run["device"]) == (
        "abc123", "feature/x", 7, ["GG2"], 3, "cpu")
    assert run["created_at"].endswith("Z") or run["created_at"].endswith("+00:00")
    page = client.get("/api/v1/projects/proj/runs", params={"branch": "feature/x"}).json()
    assert [r["id"] for r in page["items"]] == [run_id] and page["next_cursor"] is None
    assert client.get("/api/v1/projects/proj/runs", params={"branch": "main"}).json()["items"] == []
    no_report = client.get(f"/api/v1/runs/{run_id}/report")
    assert no_report.status_code == 404 and "queued" in error(no_report)["message"]
    latest = client.get("/api/v1/projects/proj/latest", params={"branch": "feature/x"})
    assert latest.status_code == 404 and error(latest)["field"] == "branch"


def test_submit_multipart_bundle(client, project) -> None:  # type: ignore[no-untyped-def]
    bundle = tar_gz({"rules/small.py": SMALL_RULES.encode()})
    accepted = client.post("/api/v1/projects/proj/runs", headers=project["headers"],
                           files={"bundle": ("rules.tar.gz", bundle, "application/gzip")},
                           data={"branch": "main", "device": "cpu", "select": "GG201,GG202", "max_examples": "5"})
    assert accepted.status_code == 202, accepted.text
    run = client.get(f"/api/v1/runs/{accepted.json()['id']}").json()
    assert run["select"] == ["GG201", "GG202"]


def test_submission_errors_name_the_field_and_the_fix(client, project) -> None:  # type: ignore[no-untyped-def]
    post = lambda **kw: client.post("/api/v1/projects/proj/runs", **kw)  # noqa: E731
    headers = project["headers"]
    assert post(json={"files": {"a.py": "x"}}).status_code == 401
    assert post(json={"files": {"a.py": "x"}}, headers={"Authorization": "Bearer ggp_wrong"}).status_code == 403
    assert error(post(json={"files": {"/etc/passwd": "x"}}, headers=headers))["field"] == "files"
    assert error(post(json={"files": {"a.py": "x"}, "device": "tpu"}, headers=headers))["field"] == "device"
    assert error(post(json={"files": {"a.py": "x"}, "select": ["nope"]}, headers=headers))["field"] == "select"
    assert error(post(json={"files": {"a.py": "x"}, "colour": "red"}, headers=headers))["field"] == "colour"
    assert error(post(json={"files": {"a.py": "x"}, "branch": "a\x00b"}, headers=headers))["field"] == "branch"
    gpu = post(json={"files": {"a.py": "x"}, "device": "gpu"}, headers=headers)
    assert gpu.status_code == 422 and "gpu" in error(gpu)["message"] and "GRADGUARD_" in error(gpu)["fix"]
    evil = tar_gz({"a.py": b"x", "../../escape.py": b"x"})
    response = post(files={"bundle": ("b.tgz", evil)}, headers=headers)
    assert response.status_code == 422 and "'..'" in error(response)["message"]
    assert error(post(files={"other": ("b.tgz", evil)}, headers=headers))["field"] == "bundle"
    assert post(content=b"x", headers={**headers, "content-type": "text/plain"}).status_code == 400
    assert error(client.get("/api/v1/runs/999999"))["field"] == "run"
    assert error(client.get("/api/v1/projects/nope/runs"))["field"] == "project"
    assert error(client.get("/api/v1/projects/proj/runs", params={"cursor": "garbage!"}))["field"] == "cursor"
    assert client.get("/no/such/route").json()["detail"]["fix"]


def test_rate_limit_answers_429_with_retry_after(client, project) -> None:  # type: ignore[no-untyped-def]
    client.app.state.rate_limiter = RateLimiter(5)
    body = {"files": {"rules.py": SMALL_RULES}}
    codes = [client.post("/api/v1/projects/proj/runs", json=body, headers=project["headers"]).status_code
             for _ in range(6)]
    assert codes == [202] * 5 + [429]
    limited = client.post("/api/v1/projects/proj/runs", json=body, headers=project["headers"])
    assert 1 <= int(limited.headers["Retry-After"]) <= 60 and error(limited)["field"] == "authorization"


def test_metrics_count_runs_by_status(client, project) -> None:  # type: ignore[no-untyped-def]
    client.post("/api/v1/projects/proj/runs", json={"files": {"rules.py": SMALL_RULES}}, headers=project["headers"])
    text = client.get("/metrics").text
    assert 'gradguard_runs{device="cpu",status="queued"} 1.0' in text
    assert 'gradguard_queue_depth{device="cpu"} 1.0' in text
    assert "# TYPE gradguard_check_duration_seconds histogram" in text


@pytest.mark.parametrize("token", [None, "changeme", "short"])
def test_production_mode_refuses_placeholder_admin_tokens(token) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError, match="GRADGUARD_ADMIN_TOKEN"):
        Settings(mode="production", admin_token=token)
    assert Settings(mode="production", admin_token="a-real-random-token-1234").mode == "production"


def test_embedded_mode_generates_an_admin_token(make_settings) -> None:  # type: ignore[no-untyped-def]
    settings, generated = make_settings(admin_token=None).with_admin_token()
    assert generated and settings.admin_token.get_secret_value() == generated and len(generated) >= 32
    assert "admin_token" not in repr(make_settings().admin_token)  # SecretStr hides it


def test_an_unreachable_database_is_a_503_and_readyz_says_so(make_settings) -> None:  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from gradguard.service.app import create_app

    app = create_app(make_settings(database_url="postgresql+psycopg://nobody@127.0.0.1:1/none", mode="production"))
    with TestClient(app) as client:
        down = client.get("/api/v1/projects")
        assert down.status_code == 503 and error(down)["field"] == "database" and down.headers["Retry-After"]
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["database"].startswith("unreachable")
        assert client.get("/healthz").status_code == 200

"""One access policy for the API, the pages and the badges (service/access.py, service/api/deps.py):
"missing" and "not yours" get one answer everywhere, and routes repeat no check and run no SQL."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from service_support import ADMIN, LIVE_TIMEOUT_S, LiveServer

ROOT = Path(__file__).resolve().parents[2]
ROUTE_MODULES = ["service/api/projects.py", "service/api/runs.py", "web/routes.py", "web/badge_routes.py"]


@pytest.fixture
def site(make_settings, migrated, admin_headers):  # type: ignore[no-untyped-def]
    """The whole app (API and pages) with a public and a private project, each with one run."""
    from fastapi.testclient import TestClient

    from gradguard.service.db import make_sessionmaker
    from gradguard.service.models import Run
    from gradguard.web.app import create_app

    with TestClient(create_app(make_settings(database_url=migrated, rate_limit_per_minute=0))) as client:
        tokens = {}
        for slug, public in (("open", True), ("bravo", False)):
            answer = client.post("/api/v1/projects", json={"slug": slug, "public": public}, headers=admin_headers)
            assert answer.status_code == 201, answer.text
            tokens[slug] = answer.json()["token"]
            tokens[f"{slug}_read"] = answer.json()["read_token"]
            run = client.post(f"/api/v1/projects/{slug}/runs", json={"files": {"r.py": "x = 1\n"}},
                              headers={"Authorization": f"Bearer {tokens[slug]}"})
            assert run.status_code == 202, run.text
            tokens[f"{slug}_run"] = run.json()["id"]
        with make_sessionmaker(migrated)() as session:  # one run of each project exists, ids 1 and 2
            assert {r.id for r in session.query(Run).all()} == {tokens["open_run"], tokens["bravo_run"]}
        yield client, tokens


def _same(a: Any, b: Any, *pairs: tuple[str, str]) -> None:
    text_a, text_b = a.text, b.text
    for x, y in pairs:
        text_a = text_a.replace(x, "N")
        text_b = text_b.replace(y, "N")
    assert (a.status_code, text_a) == (b.status_code, text_b)


def test_a_private_project_answers_exactly_like_a_missing_one_on_every_route(site) -> None:
    client, tokens = site
    private, missing = tokens["bravo_run"], 999_999
    for route in ("/api/v1/runs/{}", "/api/v1/runs/{}/report", "/api/v1/runs/{}/junit.xml", "/runs/{}",
                  "/runs/{}/status"):
        _same(client.get(route.format(private)), client.get(route.format(missing)),
              *[(pattern.format(private), pattern.format(missing)) for pattern in ("#{}", "/runs/{}", "id {} ")])
    for route in ("/api/v1/projects/{}", "/api/v1/projects/{}/runs", "/api/v1/projects/{}/latest", "/p/{}",
                  "/p/{}/rules/r", "/badge/{}.svg", "/badge/{}.json"):
        _same(client.get(route.format("bravo")), client.get(route.format("nope")), ("bravo", "nope"))
    # submitting to a private project with a wrong token: the same 404 as a missing project
    wrong = {"Authorization": "Bearer ggp_not-a-token"}
    body = {"files": {"r.py": "x = 1\n"}}
    _same(client.post("/api/v1/projects/bravo/runs", json=body, headers=wrong),
          client.post("/api/v1/projects/nope/runs", json=body, headers=wrong), ("bravo", "nope"))
    for headers in (wrong, {}, {"Authorization": f"Bearer {tokens['open']}"}):  # a new read-only token: the same
        _same(client.post("/api/v1/projects/bravo/read-token", headers=headers),
              client.post("/api/v1/projects/nope/read-token", headers=headers), ("bravo", "nope"))
    answer = client.get(f"/api/v1/runs/{private}")
    assert answer.status_code == 404 and "bravo" not in answer.text


def test_the_projects_token_opens_it_for_the_api_and_the_pages_alike(site) -> None:
    client, tokens = site
    bearer = {"Authorization": f"Bearer {tokens['bravo']}"}
    for path in (f"/api/v1/runs/{tokens['bravo_run']}", "/api/v1/projects/bravo", f"/runs/{tokens['bravo_run']}",
                 "/p/bravo"):
        assert client.get(path, headers=bearer).status_code == 200, path
    assert [p["slug"] for p in client.get("/api/v1/projects", headers=bearer).json()["items"]] == ["bravo", "open"]
    assert [p["slug"] for p in client.get("/api/v1/projects").json()["items"]] == ["open"]
    # another project's token opens nothing here
    other = {"Authorization": f"Bearer {tokens['open']}"}
    assert client.get("/api/v1/projects/bravo", headers=other).status_code == 404
    assert client.post("/api/v1/projects/bravo/runs", json={"files": {"r.py": "x = 1\n"}},
                       headers=other).status_code == 404


def test_a_readable_project_with_the_wrong_token_is_403_naming_no_token_characters(site) -> None:
    client, tokens = site
    answer = client.post("/api/v1/projects/open/runs", json={"files": {"r.py": "x = 1\n"}},
                         headers={"Authorization": "Bearer ggp_wrong"})
    assert answer.status_code == 403
    assert answer.json()["detail"]["message"] == "authorization: the token is not project 'open''s submit token."
    assert tokens["open"][:6] not in answer.text and tokens["open"][-6:] not in answer.text
    assert client.post("/api/v1/projects/open/runs", json={"files": {"r.py": "x = 1\n"}}).status_code == 401


@pytest.mark.parametrize("module", ROUTE_MODULES)
def test_routes_run_no_sql_and_repeat_no_access_check(module: str) -> None:
    tree = ast.parse((ROOT / module).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert not imported & {"select", "text", "func", "update", "delete", "insert"}, module
    called = {node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
              for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert not called & {"get_project", "get_run", "check_can_read", "token_matches", "execute", "scalar"}, module


def test_the_sessionmaker_has_one_name_and_the_web_layer_looks_up_no_other(make_settings) -> None:
    from sqlalchemy.orm import sessionmaker

    from gradguard.web.app import create_app

    app = create_app(make_settings(local_workers=0), start_executor=False)
    factories = [name for name, value in vars(app.state)["_state"].items() if isinstance(value, sessionmaker)]
    assert factories == ["sessionmaker"]
    assert not (ROOT / "web" / "deps.py").exists()
    for module in ROUTE_MODULES:
        assert "state.sessionmaker" not in (ROOT / module).read_text()


def _finish(database_url: str, run_id: int) -> None:
    """End a queued run as ``error`` so its branch has a head: its badge turns red, no longer grey."""
    from gradguard.service import lifecycle
    from gradguard.service.db import make_sessionmaker

    with make_sessionmaker(database_url)() as session:
        assert lifecycle.fail_run(session, run_id=run_id, worker=None, reason="ended by the test")


def test_a_read_only_token_reads_everything_and_submits_nothing(site, migrated) -> None:
    client, tokens = site
    _finish(migrated, tokens["bravo_run"])
    read = {"Authorization": f"Bearer {tokens['bravo_read']}"}
    assert tokens["bravo_read"].startswith("ggr_") and tokens["bravo"].startswith("ggp_")
    for path in (f"/api/v1/runs/{tokens['bravo_run']}", "/api/v1/projects/bravo", "/api/v1/projects/bravo/runs",
                 f"/runs/{tokens['bravo_run']}", "/p/bravo"):
        assert client.get(path, headers=read).status_code == 200, path
    refused = client.post("/api/v1/projects/bravo/runs", json={"files": {"r.py": "x = 1\n"}}, headers=read)
    assert refused.status_code == 403
    assert refused.json()["detail"]["message"] == ("authorization: the token is project 'bravo''s read-only token, "
                                                   "which cannot submit.")
    # a badge URL opens a private badge with the read-only token only: never the submit or the admin token
    assert "error" in client.get("/badge/bravo.json", params={"token": tokens["bravo_read"]}).json()["message"]
    for token in (tokens["bravo"], ADMIN, tokens["open_read"]):
        assert client.get("/badge/bravo.json", params={"token": token}).json()["message"] == "unknown"
    # a fresh read-only token (made with the submit token) replaces the old one
    rotated = client.post("/api/v1/projects/bravo/read-token", headers={"Authorization": f"Bearer {tokens['bravo']}"})
    assert rotated.status_code == 201 and rotated.json()["read_token"].startswith("ggr_")
    assert client.get("/api/v1/projects/bravo", headers=read).status_code == 404
    assert client.get("/api/v1/projects/bravo",
                      headers={"Authorization": f"Bearer {rotated.json()['read_token']}"}).status_code == 200
    assert client.post("/api/v1/projects/bravo/read-token",
                       headers={"Authorization": f"Bearer {rotated.json()['read_token']}"}).status_code == 403


def test_no_answer_holds_any_token_characters(site) -> None:
    client, tokens = site
    secrets = [tokens[k] for k in ("open", "bravo", "open_read", "bravo_read")] + [ADMIN]
    near = [t[:-1] + ("A" if t[-1] != "A" else "B") for t in secrets]  # one character off the real ones
    answers = [client.get("/api/v1/projects/open"), client.get("/api/v1/projects"),
               client.get("/api/v1/projects", headers={"Authorization": f"Bearer {tokens['bravo']}"})]
    for token in secrets + near:
        bearer = {"Authorization": f"Bearer {token}"}
        answers += [client.post(f"/api/v1/projects/{slug}/runs", json={"files": {"r.py": "x = 1\n"}}, headers=bearer)
                    for slug in ("open", "bravo", "nope")]
        answers += [client.get(f"/api/v1/runs/{tokens['bravo_run']}", headers=bearer),
                    client.get("/p/bravo", headers=bearer), client.get("/badge/bravo.svg", params={"token": token}),
                    client.post("/api/v1/projects/open/read-token", headers=bearer),
                    client.post("/token", data={"token": token, "next": "/p/bravo"},
                                headers={"Origin": "http://testserver"}, follow_redirects=False)]
    assert all(a.status_code < 500 for a in answers)
    assert not any("token_prefix" in a.text for a in answers)
    for answer in answers:
        for token in secrets:
            body = answer.text.replace("ggp_", "").replace("ggr_", "")  # the kind of token may be named
            windows = {token[i:i + 10] for i in range(4, len(token) - 9)}
            leaked = [w for w in windows if w in body]
            assert not leaked, (answer.request.url, leaked)


def test_the_token_form_refuses_submit_tokens_and_cross_site_posts(site) -> None:
    client, tokens = site
    ours = {"Origin": "http://testserver"}
    kept = client.post("/token", data={"token": tokens["bravo_read"], "next": "/p/bravo"}, headers=ours,
                       follow_redirects=False)
    assert kept.status_code == 303 and kept.headers["set-cookie"].startswith("gg_token_bravo=")
    client.cookies.clear()
    submit = client.post("/token", data={"token": tokens["bravo"], "next": "/p/bravo"}, headers=ours,
                         follow_redirects=False)
    assert submit.status_code == 403 and "read-only token" in submit.text and "set-cookie" not in submit.headers
    # CSRF: a form POST from another site, or naming no origin at all, is refused before anything is read
    for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"}, {},
                    {"Referer": "https://evil.example/page"}, {"Origin": "http://testserver.evil.example"}):
        answer = client.post("/token", data={"token": tokens["bravo_read"], "next": "/"}, headers=headers,
                             follow_redirects=False)
        assert answer.status_code == 403 and answer.json()["detail"]["field"] == "origin", headers
        assert "set-cookie" not in answer.headers
    assert client.post("/token", data={"token": tokens["bravo_read"], "next": "/"}, follow_redirects=False,
                       headers={"Referer": "http://testserver/p/bravo"}).status_code == 303
    # the API takes bearer tokens, which a cross-site form cannot send; a foreign Origin is still refused
    body = {"files": {"r.py": "x = 1\n"}}
    bearer = {"Authorization": f"Bearer {tokens['open']}"}
    assert client.post("/api/v1/projects/open/runs", json=body, headers=bearer).status_code == 202
    assert client.post("/api/v1/projects/open/runs", json=body,
                       headers={**bearer, "Origin": "https://evil.example"}).status_code == 403


def test_reads_are_rate_limited_per_client(make_settings, migrated) -> None:
    from fastapi.testclient import TestClient

    from gradguard.web.app import create_app

    with TestClient(create_app(make_settings(database_url=migrated, read_rate_limit_per_minute=5))) as client:
        assert [client.get("/api/v1/projects").status_code for _ in range(5)] == [200] * 5
        limited = client.get("/p/none")
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert "5 reads per minute" in limited.json()["detail"]["message"]
        assert client.get("/healthz").status_code == 200  # probes are not counted
        # a made-up token does not open a fresh window: the limit is per client address
        assert client.get("/api/v1/projects", headers={"Authorization": "Bearer ggr_made-up"}).status_code == 429


def test_access_logs_never_hold_a_url_token(make_settings, migrated) -> None:
    import logging

    import httpx

    from gradguard.web.app import create_app

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep()
    app = create_app(make_settings(database_url=migrated))
    with LiveServer(app, log_level="info") as server:
        logging.getLogger("uvicorn.access").addHandler(handler)
        try:
            secret = "ggr_this-must-not-be-logged"
            for query in ({"token": secret}, {"branch": "main", "Token": secret}):
                httpx.get(f"{server.url}/badge/open.svg", params=query, timeout=LIVE_TIMEOUT_S)
            httpx.get(f"{server.url}/badge/open.svg?tok%65n={secret}", timeout=LIVE_TIMEOUT_S)  # read as 'token' by the app: redacted too
            httpx.get(f"{server.url}/badge/open.svg?branch=main", timeout=LIVE_TIMEOUT_S)
        finally:
            logging.getLogger("uvicorn.access").removeHandler(handler)
    badge_lines = [line for line in lines if "/badge/open.svg" in line]
    assert len(badge_lines) == 4, lines
    assert not [line for line in lines if "must-not-be-logged" in line], lines
    assert sum("[redacted]" in line for line in badge_lines) == 3 and "branch=main" in badge_lines[-1]

"""One access policy for the API, the pages and the badges (service/access.py, service/api/deps.py):
"missing" and "not yours" get one answer everywhere, and routes repeat no check and run no SQL."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

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

"""Odd inputs get a 4xx naming the problem, never a 500 (docs/security.md). One test per input, against
the whole app (API and pages) on SQLite and the real PostgreSQL.

A deeply nested *report* is covered where reports are: tests/service/test_untrusted_reports.py
(``test_a_deeply_nested_report_is_refused_not_a_crash``, and ``test_no_stored_report_makes_any_answer_a_500``
with a report nested 5,000 deep written straight into the database).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

SUBMIT = "/api/v1/projects/proj/runs"
BIG = [2**31, 2**63, 2**64, 10**30, -1, -(2**70), 0]


@pytest.fixture
def app_client(make_settings, migrated):  # type: ignore[no-untyped-def]
    """The API and the pages, with server errors answered (not raised) so a 500 shows as a 500."""
    from fastapi.testclient import TestClient

    from gradguard.web.app import create_app

    with TestClient(create_app(make_settings(database_url=migrated, rate_limit_per_minute=0)),
                    raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def submit(app_client, admin_headers):  # type: ignore[no-untyped-def]
    answer = app_client.post("/api/v1/projects", json={"slug": "proj"}, headers=admin_headers)
    assert answer.status_code == 201, answer.text
    headers = {"Authorization": f"Bearer {answer.json()['token']}", "Content-Type": "application/json"}

    def post(raw: bytes) -> Any:
        return app_client.post(SUBMIT, content=raw, headers=headers)

    post.token = headers["Authorization"]  # type: ignore[attr-defined]
    return post


def _refused(answer: Any, status: int, *words: str) -> dict[str, Any]:
    assert answer.status_code == status, (answer.status_code, answer.text[:500])
    detail = answer.json()["detail"]
    for word in words:
        assert word in detail["message"], detail
    return detail


def test_a_lone_surrogate_in_a_files_content_is_refused(submit) -> None:
    # json.loads accepts "\ud800" and makes a str that cannot be encoded; it must not reach the database
    answer = submit(b'{"files": {"rules.py": "x = 1  # \\ud800"}}')
    detail = _refused(answer, 422, "'rules.py'", "lone surrogate")
    assert detail["field"] == "files"


def test_a_lone_surrogate_in_a_path_is_refused(submit) -> None:
    answer = submit(b'{"files": {"rules\\udc80.py": "x = 1"}}')
    _refused(answer, 422, "lone surrogate")


def test_json_nested_100000_deep_is_refused(submit, app_client, admin_headers) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    _refused(submit(deep), 422, "nests deeper")
    _refused(submit(b'{"files": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001), 422, "nests deeper")
    # the routes whose body FastAPI reads itself answer 400, not 500
    assert app_client.post("/api/v1/projects", content=deep, headers={**admin_headers, "Content-Type":
                                                                      "application/json"}).status_code == 400


@pytest.mark.parametrize("run_id", BIG)
def test_run_ids_past_64_bits_and_negative_ones_are_404(app_client, run_id: int) -> None:
    for route in ("/api/v1/runs/{}", "/api/v1/runs/{}/report", "/api/v1/runs/{}/junit.xml",
                  "/api/v1/runs/{}/summary.md", "/runs/{}/status", "/runs/{}"):
        answer = app_client.get(route.format(run_id))
        assert answer.status_code == 404, (route, run_id, answer.text[:300])


def _cursor(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


@pytest.mark.parametrize("raw", [f"r{n}" for n in BIG] + ["r 5", "r1_0", "r\u0665", "x5"])
def test_cursors_past_64_bits_negative_or_forged_are_422(app_client, submit, raw: str) -> None:
    cursor = _cursor(raw)
    answer = app_client.get(f"{SUBMIT}?cursor={cursor}")
    _refused(answer, 422, "is not a cursor this API issued")
    # the project page ignores a cursor it did not issue and shows the newest runs
    assert app_client.get(f"/p/proj?cursor={cursor}").status_code == 200


def test_a_cursor_this_api_issued_still_pages(app_client, submit) -> None:
    for _ in range(3):
        assert submit(json.dumps({"files": {"r.py": "x = 1\n"}}).encode()).status_code == 202
    first = app_client.get(f"{SUBMIT}?limit=2").json()
    second = app_client.get(f"{SUBMIT}?limit=2&cursor={first['next_cursor']}").json()
    assert [r["id"] for r in first["items"]] == [3, 2] and [r["id"] for r in second["items"]] == [1]


@pytest.mark.parametrize("field", ["pull_request", "seed"])
def test_integers_past_what_the_database_holds_are_422(submit, field: str) -> None:
    # PostgreSQL's integer is 32-bit: 2**31 used to reach the database and answer 500 there
    answer = submit(json.dumps({"files": {"r.py": "x = 1\n"}, field: 2**31}).encode())
    _refused(answer, 422, field)
    assert submit(json.dumps({"files": {"r.py": "x = 1\n"}, field: 2**31 - 1}).encode()).status_code == 202


@pytest.mark.parametrize("files", [{"a": "x = 1", "a/rules.py": "x = 1"}, {"a/rules.py": "x = 1", "a": "x = 1"},
                                   {"a/b/rules.py": "x = 1", "a/b": "x"}])
def test_a_path_that_is_both_a_file_and_a_folder_is_refused(submit, files: dict[str, str]) -> None:
    answer = submit(json.dumps({"files": files}).encode())
    detail = _refused(answer, 422, "is both a file and a folder")
    assert "/tmp" not in answer.text and "Errno" not in answer.text, detail


def test_a_path_that_is_both_a_file_and_a_folder_in_an_archive_is_refused(app_client, submit) -> None:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in ("a", "a/rules.py"):
            info = tarfile.TarInfo(name)
            info.size = 5
            archive.addfile(info, io.BytesIO(b"x = 1"))
    answer = app_client.post(SUBMIT, files={"bundle": ("b.tar.gz", buffer.getvalue(), "application/gzip")},
                             headers={"Authorization": submit.token})
    _refused(answer, 422, "is both a file and a folder")

"""The API's own description: unique operation ids, fetched without a warning, docs served offline."""

from __future__ import annotations

import logging
import re
import warnings
from collections import Counter

from fastapi.testclient import TestClient

from gradguard.service.config import Settings
from gradguard.web.app import create_app


def _app(tmp_path):  # type: ignore[no-untyped-def]
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'o.sqlite3'}", admin_token="openapi-admin-token-0123",
                        local_workers=0)
    return create_app(settings, start_executor=False)


def test_openapi_has_unique_operation_ids_and_fetching_it_warns_nothing(tmp_path, caplog) -> None:
    with TestClient(_app(tmp_path)) as client, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with caplog.at_level(logging.WARNING):
            spec = client.get("/openapi.json").json()
    assert [str(w.message) for w in caught] == []
    assert [r.getMessage() for r in caplog.records] == []
    ids = Counter(op["operationId"] for path in spec["paths"].values() for op in path.values())
    assert [i for i, n in ids.items() if n > 1] == []
    assert "/badge/{project}.svg" in spec["paths"] and set(spec["paths"]["/badge/{project}.svg"]) == {"get"}


def test_docs_pages_load_their_assets_from_the_app_itself(tmp_path) -> None:
    with TestClient(_app(tmp_path)) as client:
        for page in ("/docs", "/redoc"):
            html = client.get(page).text
            assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', html)
            assert assets and all(a.startswith("/") and not a.startswith("//") for a in assets), (page, assets)
            for asset in assets:
                response = client.get(asset)
                assert response.status_code == 200 and len(response.content) > 1000, asset


def test_badges_still_answer_head(tmp_path) -> None:
    with TestClient(_app(tmp_path)) as client:
        assert client.head("/badge/nothing.svg").status_code == 200
        assert client.head("/badge/nothing.json").status_code == 200

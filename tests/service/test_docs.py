"""The README documents every setting; docs/service.md every API route."""

from __future__ import annotations

from pathlib import Path

from gradguard.service.app import create_app
from gradguard.service.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "service.md").read_text()
README = (ROOT / "README.md").read_text()


def test_every_setting_is_documented() -> None:
    missing = [f"GRADGUARD_{name.upper()}" for name in Settings.model_fields if f"`GRADGUARD_{name.upper()}`" not in README]
    assert not missing, f"README.md does not document {missing}"


def test_every_route_is_documented(make_settings) -> None:  # type: ignore[no-untyped-def]
    app = create_app(make_settings())
    paths = set(app.openapi()["paths"])
    assert "/api/v1/runs/{run_id}/report" in paths and "/metrics" in paths
    missing = [p for p in paths if p.replace("{run_id}", "{id}") not in DOC]
    assert not missing, f"docs/service.md does not document {missing}"

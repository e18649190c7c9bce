"""Badges: the flat SVG and the shields.io endpoint, from the cached latest verdict, with revalidation headers."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from gradguard.web.badges import badge_state, render_endpoint, render_svg, text_width

SVG = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    return [t.text or "" for t in root.iter(f"{SVG}text") if t.get("aria-hidden") != "true"]


@pytest.mark.parametrize(
    ("status", "summary", "kind", "message"),
    [
        ("passed", {"rules": 12, "passed": 12}, "pass", "12/12 rules pass"),
        ("failed", {"rules": 12, "passed": 9, "failed": 3}, "fail", "3 failing"),
        ("failed", {"rules": 4, "passed": 2, "failed": 1, "errored": 1}, "fail", "2 failing"),
        ("error", None, "error", "error"),
        (None, None, "unknown", "unknown"),
    ],
)
def test_badge_state(status: str | None, summary: dict[str, int] | None, kind: str, message: str) -> None:
    state = badge_state(status, summary)
    assert (state.kind, state.message) == (kind, message)


def test_svg_is_valid_flat_badge_with_escaped_text() -> None:
    svg = render_svg(badge_state("passed", {"rules": 12, "passed": 12}))
    root = ET.fromstring(svg)
    assert root.get("height") == "20" and root.get("role") == "img"
    assert root.get("aria-label") == "gradguard: 12/12 rules pass"
    assert _texts(svg) == ["gradguard", "12/12 rules pass"]
    assert float(root.get("width")) == pytest.approx(text_width("gradguard") + text_width("12/12 rules pass") + 20)
    hostile = render_svg(badge_state("passed", {"rules": 1, "passed": 1}), label="<x>&")
    assert "<x>" not in hostile and _texts(hostile)[0] == "<x>&"


def test_endpoint_schema() -> None:
    doc = render_endpoint(badge_state("failed", {"rules": 3, "failed": 1}))
    assert doc == {"schemaVersion": 1, "label": "gradguard", "message": "1 failing", "color": "red",
                   "isError": True, "cacheSeconds": 300}


def test_live_badges_follow_the_branch_heads(live: Any, seeded: dict[str, int]) -> None:
    main = live.http.get("/badge/alpha.svg", params={"branch": "main"})
    assert main.status_code == 200 and main.headers["content-type"].startswith("image/svg+xml")
    assert _texts(main.text) == ["gradguard", "2/2 rules pass"]
    assert 'fill="#2e7d32"' in main.text
    default = live.http.get("/badge/alpha.svg")
    assert _texts(default.text) == _texts(main.text)  # no branch: the project's default branch
    feature = live.http.get("/badge/alpha.svg", params={"branch": "feature/x"})
    assert _texts(feature.text) == ["gradguard", "1 failing"] and 'fill="#c62828"' in feature.text
    endpoint = live.http.get("/badge/alpha.json", params={"branch": "feature/x"})
    assert endpoint.headers["content-type"].startswith("application/json")
    assert json.loads(endpoint.text)["message"] == "1 failing"


@pytest.mark.parametrize("path", ["/badge/no-such-project.svg", "/badge/alpha.svg?branch=no-such-branch",
                                  "/badge/secret.svg"])
def test_unknown_gets_the_grey_badge_not_a_404(live: Any, seeded: dict[str, int], path: str) -> None:
    answer = live.http.get(path)
    assert answer.status_code == 200
    assert _texts(answer.text) == ["gradguard", "unknown"]


def test_private_badges_need_the_read_only_token(live: Any, seeded: dict[str, int]) -> None:
    answer = live.http.get("/badge/secret.svg", params={"token": live.read_tokens["secret"]})
    assert _texts(answer.text) == ["gradguard", "1 failing"]
    # a submit token in a README's badge URL would hand out write access: it opens nothing here
    for token in ("ggp_wrong", live.tokens["secret"], live.admin):
        endpoint = live.http.get("/badge/secret.json", params={"token": token})
        assert json.loads(endpoint.text)["message"] == "unknown"


def test_badges_revalidate_with_etags(live: Any, seeded: dict[str, int]) -> None:
    first = live.http.get("/badge/alpha.svg", params={"branch": "main"})
    cache = first.headers["cache-control"]
    assert "no-cache" in cache and "max-age=0" in cache
    tag = first.headers["etag"]
    again = live.http.get("/badge/alpha.svg", params={"branch": "main"}, headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b""
    other = live.http.get("/badge/alpha.svg", params={"branch": "feature/x"}, headers={"If-None-Match": tag})
    assert other.status_code == 200 and other.headers["etag"] != tag


@pytest.mark.parametrize("path,media", [("/badge/alpha.svg", "image/svg+xml"), ("/badge/alpha.json", "application/json")])
def test_badges_answer_head_like_get_without_a_body(live: Any, seeded: dict[str, int], path: str, media: str) -> None:
    got = live.http.get(path, params={"branch": "main"})
    head = live.http.head(path, params={"branch": "main"})
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"].startswith(media)
    assert head.headers["etag"] == got.headers["etag"]

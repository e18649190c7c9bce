"""The pages over HTTP against the live server with real runs: content, escaping, access, headers."""

from __future__ import annotations

import re
from typing import Any

import httpx
import markupsafe
import pytest


CSP_SELF = "default-src 'self'"


def _get(live: Any, path: str, **kwargs: Any) -> httpx.Response:
    return live.http.get(path, **kwargs)


def test_projects_page_lists_public_projects_with_their_verdict(live: Any, seeded: dict[str, int]) -> None:
    page = _get(live, "/")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert CSP_SELF in page.headers["content-security-policy"]
    assert "Alpha &lt;b&gt;rules&lt;/b&gt;" in page.text  # the project name is escaped
    assert 'href="/p/alpha"' in page.text
    assert "/p/secret" not in page.text  # private, no token


def test_project_page_shows_branches_chart_runs_and_badge(live: Any, seeded: dict[str, int]) -> None:
    page = _get(live, "/p/alpha")
    assert page.status_code == 200
    text = page.text
    for branch in ("main", "feature/x", "xss"):
        assert f">{branch}</a>" in text
    assert '<svg class="chart"' in text and "Rules passing over the last 2 finished runs on main" in text
    assert f'href="/runs/{seeded["pass_main"]}"' in text and f'href="/runs/{seeded["fail_main"]}"' in text
    assert "/badge/alpha.svg?branch=main" in text
    other = _get(live, "/p/alpha", params={"branch": "feature/x"})
    assert "History on feature/x" in other.text and f'href="/runs/{seeded["fail_main"]}"' not in other.text


def test_run_page_shows_grid_findings_sources_and_reproducer(live: Any, seeded: dict[str, int]) -> None:
    page = _get(live, f"/runs/{seeded['fail_main']}")
    assert page.status_code == 200
    text = page.text
    assert "Rules × check families" in text
    assert 'class="pill s-fail"' in text and "1 failing" in text
    assert 'href="/checks/GG103"' in text  # the finding links to its catalogue page
    assert "the pullback of scale_rrule must return one tangent per argument (1), but returned 2." in text
    assert "Failing input" in text and "Expected" in text and "Actual" in text
    # The rule's source from the stored submission, its lines highlighted.
    highlighted = re.findall(r'<li class="hl"><span class="ln">(\d+)</span><code>(.*?)</code>', text)
    assert highlighted and any("one tangent too many" in line for _, line in highlighted)
    assert "rules/ops.py" in text
    assert 'data-copy-target="rule-2-finding-1-repro"' in text and 'id="rule-2-finding-1-repro"' in text
    assert "replay(rule, &#39;GG103&#39;" in text
    assert "data-status-url" not in text  # finished: no polling
    # The canonical hazard: right alone, wrong where dot() captured the input first.
    assert 'href="/checks/GG501"' in text and "Safety matrix" in text and "captured-before" in text
    assert 'class="pill s-wrong"' in text


def test_run_status_endpoint(live: Any, seeded: dict[str, int]) -> None:
    status = _get(live, f"/runs/{seeded['pass_main']}/status")
    assert status.json()["status"] == "passed" and status.json()["final"] is True
    assert status.headers["cache-control"] == "no-store"


def test_rule_page_shows_the_verdict_over_commits(live: Any, seeded: dict[str, int]) -> None:
    page = _get(live, "/p/alpha/rules/scale_rrule", params={"branch": "main"})
    assert page.status_code == 200
    rows = re.findall(r'<th scope="row"><a href="/runs/(\d+)">#\d+</a>', page.text)
    assert rows == [str(seeded["pass_main"]), str(seeded["fail_main"])]
    assert "c2eeeeeeee" in page.text and "c1aaaaaaaa" in page.text
    assert "1 passed, 1 failed" in page.text
    everywhere = _get(live, "/p/alpha/rules/scale_rrule")
    assert "f1bbbbbbbb" in everywhere.text


def test_user_supplied_text_is_escaped_everywhere(live: Any, seeded: dict[str, int], xss: str) -> None:
    run = _get(live, f"/runs/{seeded['xss']}").text
    assert "<script>window.__xss" not in run and "<img src=x" not in run
    assert str(markupsafe.escape(xss)) in run  # shown as text
    assert "&lt;script&gt;window.__xss=2&lt;/script&gt;" in run
    rule = _get(live, "/p/alpha/rules/" + httpx.URL(f"/{xss}").raw_path.decode()[1:]).text
    assert "<script>window.__xss" not in rule and "&lt;script&gt;" in rule


def test_check_catalogue_index_and_pages(live: Any) -> None:
    index = _get(live, "/checks")
    assert index.status_code == 200 and 'href="/checks/GG103"' in index.text and "Contract" in index.text
    page = _get(live, "/checks/GG103")
    assert page.status_code == 200
    assert "GG103: pullback raises or returns the wrong number of tangents" in page.text
    lower = _get(live, "/checks/gg103", follow_redirects=False)
    assert lower.status_code == 301 and lower.headers["location"] == "/checks/GG103"
    missing = _get(live, "/checks/GG13")
    assert missing.status_code == 404 and "Did you mean" in missing.text


def test_private_project_needs_a_token_then_a_cookie(live: Any, seeded: dict[str, int]) -> None:
    # a browser sends its page's Origin with every form POST (CSRF protection refuses others)
    with httpx.Client(base_url=live.base, timeout=30, headers={"Origin": live.base}) as browser:
        gate = browser.get(f"/runs/{seeded['secret']}")
        missing = browser.get("/runs/999999")
        # A private run looks exactly like a missing one (no name leaks), and both offer the token form.
        assert gate.status_code == missing.status_code == 404
        def same(text: str, run_id: object) -> str:
            return text.replace(f"run #{run_id}", "run #N").replace(f"/runs/{run_id}", "/runs/N")

        assert same(gate.text, seeded["secret"]) == same(missing.text, 999999)
        assert 'name="token"' in gate.text and '<label for="token">' in gate.text and "secret" not in gate.text
        wrong = browser.post("/token", data={"token": "ggp_wrong", "next": f"/runs/{seeded['secret']}"})
        assert wrong.status_code == 403 and "opens no project" in wrong.text
        submit = browser.post("/token", data={"token": live.tokens["secret"], "next": "/"})
        assert submit.status_code == 403 and "read-only token" in submit.text  # a browser never holds write access
        right = browser.post("/token", data={"token": live.read_tokens["secret"],
                                             "next": f"/runs/{seeded['secret']}"}, follow_redirects=False)
        assert right.status_code == 303 and right.headers["location"] == f"/runs/{seeded['secret']}"
        cookie = right.headers["set-cookie"].lower()
        assert cookie.startswith("gg_token_secret=") and "httponly" in cookie and "samesite=lax" in cookie
        assert browser.get(f"/runs/{seeded['secret']}").status_code == 200
        assert browser.get("/p/secret").status_code == 200
        assert "/p/secret" in browser.get("/").text
    with httpx.Client(base_url=live.base, timeout=30, follow_redirects=True, headers={"Origin": live.base}) as admin:
        assert admin.post("/token", data={"token": live.admin, "next": "/p/secret"}).status_code == 200
        assert "/p/secret" in admin.get("/").text
    # a token in the URL would be written to access logs: pages take it only from a header or the cookie
    assert live.http.get("/p/secret", params={"token": live.read_tokens["secret"]}).status_code == 404
    assert live.http.get("/p/secret", headers={"Authorization": f"Bearer {live.tokens['secret']}"}).status_code == 200
    with httpx.Client(base_url=live.base, timeout=30, headers={"Origin": live.base}) as other:
        open_redirect = other.post("/token", data={"token": live.read_tokens["secret"], "next": "//evil.example"})
        assert open_redirect.headers["location"] == "/"


@pytest.mark.parametrize("path", ["/p/nope", "/runs/999999", "/runs/abc", "/p/nope/rules/x"])
def test_missing_things_get_a_404_page(live: Any, path: str) -> None:
    page = _get(live, path)
    assert page.status_code == 404 and "text/html" in page.headers["content-type"] and "Not found" in page.text


def test_pages_load_nothing_external(live: Any, seeded: dict[str, int]) -> None:
    for path in ("/", "/p/alpha", f"/runs/{seeded['fail_main']}", "/checks", "/checks/GG201"):
        text = _get(live, path).text
        assert not re.search(r'src="(https?:)?//', text), path  # links may point out; nothing is loaded from outside
        assert not re.search(r'<link[^>]+href="(https?:)?//', text), path
        assert "<script>" not in text and " style=" not in text and "onclick" not in text, path
    static = _get(live, "/static/app.js")
    assert static.status_code == 200 and "immutable" in static.headers["cache-control"]


def test_a_module_that_fails_to_import_shows_its_traceback(live: Any, seeded: dict[str, int]) -> None:
    run_id = live.submit("alpha", {"rules/broken.py": "def broken(:\n    pass\n"}, branch="broken", select=["GG1"])
    run = live.wait(run_id)
    assert run["status"] == "error", run
    page = live.http.get(f"/runs/{run_id}").text
    assert "failed to import" in page and "rules/broken.py" in page and "SyntaxError" in page
    badge = live.http.get("/badge/alpha.json", params={"branch": "broken"}).json()
    assert badge["message"] == "error" and badge["color"] == "orange"


def test_markdown_summary_links_check_ids_to_this_servers_pages(live: Any, seeded: dict[str, int]) -> None:
    answer = _get(live, f"/api/v1/runs/{seeded['fail_main']}/summary.md")
    assert answer.status_code == 200
    links = re.findall(r"\]\((http[^)]*)\)", answer.text)
    assert f"{live.base}/checks/GG103" in links
    assert all(link.startswith(live.base) for link in links)  # no link leaves this server
    for link in {link for link in links if "/checks/" in link}:
        assert _get(live, link.removeprefix(live.base)).status_code == 200

"""The pages in headless Chromium (Debian's chromium driven by Playwright) against the live server.

Each page renders with no console error (a CSP violation is one), live status reaches the final
verdict with and without JavaScript, the reproducer button copies the script, a finding links to
its catalogue page, a hostile rule name stays text, forms are labelled, text has AA contrast and
the keyboard reaches the content. Every page is also screenshotted: into a temporary folder by
default, so a test run leaves the checkout alone, or into $GRADGUARD_SCREENSHOTS; the pictures in
docs/screenshots/ are refreshed with
``GRADGUARD_SCREENSHOTS=docs/screenshots python3 -m pytest tests/web/test_web_browser.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = Path(os.environ.get("GRADGUARD_SCREENSHOTS") or Path(tempfile.gettempdir()) / "gradguard-screenshots")

CONTRAST_JS = """
() => {
  function rgb(s) { const m = s.match(/[\\d.]+/g); return m ? m.map(Number) : [0, 0, 0, 0]; }
  function lum(c) { const a = c.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
                    return 0.2126 * a[0] + 0.7152 * a[1] + 0.0722 * a[2]; }
  function bg(el) { for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
                    if (c.length < 4 || c[3] > 0) return c; } return [255, 255, 255, 1]; }
  const bad = [];
  for (const el of document.querySelectorAll('body *')) {
    const own = Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.offsetParent && el.tagName !== 'BODY') continue;
    const fg = rgb(getComputedStyle(el).color), b = bg(el);
    const [l1, l2] = [lum(fg), lum(b)].sort((x, y) => y - x);
    const ratio = (l1 + 0.05) / (l2 + 0.05);
    if (ratio < 4.5) bad.push(el.tagName + '.' + el.className + ' ' + ratio.toFixed(2) + ' ' + el.textContent.trim().slice(0, 30));
  }
  return bad;
}
"""

UNLABELLED_JS = """
() => Array.from(document.querySelectorAll('input:not([type=hidden]), select, textarea'))
  .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')).map(el => el.outerHTML)
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip("no chromium binary (.ci/run installs Debian's chromium)")
    with sync_api.sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser: Any, live: Any) -> Iterator[Any]:
    context = browser.new_context(base_url=live.base, viewport={"width": 1200, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live.base)
    tab = context.new_page()
    tab.console_errors = []  # type: ignore[attr-defined]
    tab.on("console", lambda m: m.type == "error" and tab.console_errors.append(m.text))  # type: ignore[attr-defined]
    tab.on("pageerror", lambda e: tab.console_errors.append(str(e)))  # type: ignore[attr-defined]
    yield tab
    context.close()


def _visit(page: Any, path: str, shot: str | None = None, status: int = 200) -> None:
    page.console_errors.clear()
    answer = page.goto(path)
    assert answer is not None and answer.status == status, path
    page.wait_for_load_state("load")
    errors = [e for e in page.console_errors if f"status of {status}" not in e]  # the page's own status
    assert errors == [], (path, errors)
    assert page.evaluate(CONTRAST_JS) == [], path
    assert page.evaluate(UNLABELLED_JS) == [], path
    if shot:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{shot}.png"), full_page=True)


def test_every_page_renders(page: Any, seeded: dict[str, int]) -> None:
    _visit(page, "/", "projects")
    assert page.locator("h1").inner_text() == "Projects"
    _visit(page, "/p/alpha", "project")
    assert page.locator("svg.chart circle").count() == 2
    _visit(page, f"/runs/{seeded['fail_main']}", "run")
    assert page.locator("table.grid tbody tr").count() == 3
    ids = set(page.locator("article.finding h3 > a").all_inner_texts())
    assert ids == {"GG103", "GG501"}, ids
    matrix = page.locator("#rule-3 table.matrix")
    assert matrix.locator("th[scope=row]", has_text="captured-before").count() == 1
    assert matrix.locator(".pill.s-wrong").count() >= 2
    _visit(page, "/p/alpha/rules/scale_rrule", "rule")
    runs = page.locator("tbody th a").all_inner_texts()
    assert runs == [f"#{seeded[k]}" for k in ("pass_main", "xss", "feature", "fail_main")], runs
    _visit(page, "/checks", "catalogue")
    _visit(page, "/checks/GG202", "check")
    assert "GG202" in page.locator("h1").inner_text()
    _visit(page, f"/runs/{seeded['secret']}", "private-project", status=404)
    assert page.locator("label[for=token]").inner_text() == "Project token"


def test_live_status_reaches_the_final_verdict(page: Any, browser: Any, live: Any, seeded: dict[str, int],
                                               rule_sources: dict[str, str], quick: list[str]) -> None:
    run_id = live.submit("alpha", {"rules/ops.py": rule_sources["good"]}, commit="c3ffffffffff", branch="live",
                         select=quick)
    page.goto(f"/runs/{run_id}")
    first = page.locator("#run-status").get_attribute("data-status")
    assert first in ("queued", "running", "passed"), first
    if first != "passed":
        page.screenshot(path=str(SHOTS / "run-live.png"), full_page=True)
    page.wait_for_selector("#run-status .pill.s-passed", timeout=120_000)
    assert page.locator("#run-status").get_attribute("data-status-url") is None
    assert page.locator("table.grid").count() == 1 and page.console_errors == []

    # Without JavaScript the page refreshes itself (a <noscript> meta refresh) until the verdict is in.
    run_id = live.submit("alpha", {"rules/ops.py": rule_sources["good"]}, commit="c4ffffffffff", branch="live",
                         select=quick)
    plain = browser.new_context(base_url=live.base, java_script_enabled=False)
    try:
        tab = plain.new_page()
        tab.goto(f"/runs/{run_id}")
        if tab.locator("#run-status").get_attribute("data-status") != "passed":
            assert tab.locator("a", has_text="Reload now").count() == 1
        tab.wait_for_selector("#run-status .pill.s-passed", timeout=120_000)
    finally:
        plain.close()


def test_copy_reproducer_button_copies_the_script(page: Any, seeded: dict[str, int]) -> None:
    _visit(page, f"/runs/{seeded['fail_main']}")
    button = page.get_by_role("button", name="Copy reproducer").first
    button.focus()
    page.keyboard.press("Enter")  # reachable and usable from the keyboard
    page.wait_for_selector("text=Copied.")
    copied = page.evaluate("navigator.clipboard.readText()")
    script = page.locator("pre[id$=-repro]").first.inner_text()
    assert copied.strip() == script.strip()
    assert "replay(rule, 'GG103'" in copied and "load_rule('rules/ops.py', 'scale_rrule', near=globals().get(\"__file__\"))" in copied


def test_finding_links_to_its_catalogue_page(page: Any, seeded: dict[str, int]) -> None:
    _visit(page, f"/runs/{seeded['fail_main']}")
    page.locator("article.finding h3 a").first.click()
    page.wait_for_url("**/checks/GG103")
    assert page.locator("h1").inner_text().startswith("GG103: pullback raises or returns the wrong number of tangents")


def test_hostile_rule_name_is_shown_as_text(page: Any, seeded: dict[str, int], xss: str) -> None:
    _visit(page, f"/runs/{seeded['xss']}", "run-hostile-name")
    assert page.evaluate("window.__xss") is None
    assert page.locator("section.rule h2").first.inner_text() == xss
    assert page.locator("section.rule img").count() == 0 and page.locator("main script").count() == 0
    page.locator("section.rule header a", has_text="verdict over commits").first.click()
    page.wait_for_load_state("load")
    assert page.locator("h1").inner_text() == xss and page.evaluate("window.__xss") is None


def test_keyboard_reaches_the_content_first(page: Any, seeded: dict[str, int]) -> None:
    _visit(page, "/p/alpha")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("location.hash") == "#main"
    outline = page.evaluate("""() => { const a = document.querySelector('main a'); a.focus();
                                       return getComputedStyle(a).outlineStyle; }""")
    assert outline != "none"


def test_api_docs_work_offline(browser: Any, live: Any) -> None:
    """/docs draws every operation with no request leaving the server (no CDN)."""
    context = browser.new_context(base_url=live.base, viewport={"width": 1200, "height": 900})
    outside: list[str] = []

    def only_local(route: Any) -> None:
        if route.request.url.startswith(live.base):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_local)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    answer = tab.goto("/docs")
    assert answer is not None and answer.status == 200
    tab.wait_for_selector(".opblock", timeout=30_000)
    paths = set(tab.locator(".opblock-summary-path").all_inner_texts())
    assert {"/api/v1/projects", "/api/v1/runs/{run_id}"} <= {p.replace("\u200b", "") for p in paths}, paths
    assert outside == [] and errors == []
    SHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SHOTS / "docs.png"), full_page=False)
    context.close()


BROKEN_MODULE = (
    "import numpy as np\n"
    "CONSTANTS = {'a_very_long_name_that_makes_this_line_wider_than_any_page': np.arange(3)}\n"
    "raise RuntimeError('this rule module cannot be imported because ' + 'of a deliberately very long reason ' * 6)\n"
)

WARNING_RULES = '''\
import numpy as np
from gradguard import arrays, rrule


def transpose(x):
    return x.T


@rrule(transpose, arrays(shape=(2, 3)))
def transpose_rrule(x):
    return x.T, lambda ybar: (ybar.T.copy(),)    # a right rule whose output is a view of x: GG405, a warning
'''


def test_a_run_whose_module_failed_to_import_says_so_with_the_users_paths(page: Any, live: Any, seeded: Any,
                                                                         rule_sources: dict[str, str]) -> None:
    run_id = live.submit("alpha", {"rules/good.py": rule_sources["good"], "rules/broken.py": BROKEN_MODULE},
                         commit="i1ffffffffff", branch="imports", select=["GG1"])
    assert live.wait(run_id)["status"] == "error"
    _visit(page, f"/runs/{run_id}", "run-import-errors")
    text = page.locator("main").inner_text()
    assert "1 module failed to import" in text and "rules checked pass" in text
    assert "1 module failed to import: rules/broken.py (the tracebacks are in the report)" in text
    assert "1/1 rules pass" not in text
    assert "/bundle/" not in text and 'File "rules/broken.py", line 3' in text
    tb = page.locator("pre.traceback").first
    assert tb.evaluate("el => el.scrollWidth <= el.clientWidth + 1"), "the traceback is clipped on the right"


def test_a_warning_never_looks_like_a_failure(page: Any, live: Any, seeded: Any) -> None:
    run_id = live.submit("alpha", {"rules/soft_rules.py": WARNING_RULES}, commit="w1aaaaaaaaaa", branch="warnings",
                         select=["GG1", "GG405"])
    assert live.wait(run_id)["status"] == "passed"
    _visit(page, f"/runs/{run_id}", "run-passing")
    pill = page.locator("article.finding .pill.s-warning").first
    assert pill.inner_text() == "warning"
    assert page.locator("article.finding .pill.s-fail").count() == 0
    assert page.locator("table.grid .pill.s-warning").count() == 1 and page.locator("table.grid .pill.s-fail").count() == 0
    fail_bg = page.evaluate("""() => { const s = document.createElement('span'); s.className = 'pill s-fail';
        document.body.appendChild(s); const c = getComputedStyle(s).backgroundColor; s.remove(); return c; }""")
    style = pill.evaluate("el => [getComputedStyle(el).backgroundColor, getComputedStyle(el).borderStyle]")
    assert style[0] != fail_bg and style[1] == "dashed"

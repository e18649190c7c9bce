"""The Markdown report renders as written on GitHub: code spans hold the exact text, no entity or
escape shows literally, and check ids point at pages that exist."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from gradguard.checker.render import render_markdown
from gradguard.checker.report import Finding, LoadFailure, Report, RuleResult

EXPECTED = "array(dtype='<f8') -> <unknown>"
ACTUAL = "a `tuple` | None & more"


def _report(**extra) -> Report:
    finding = Finding(
        check_id="GG201", severity="error", title="a <gradient> is wrong", rule="my_rule",
        message="the cotangent for `x` differs: 1 < 2 and a|b, see ``np.add.at``; *not* [a link](x)",
        expected=EXPECTED, actual=ACTUAL, fix="declare `mutates=(0,)` & retry <now>",
        counterexample={"call": "f(a=array([0.]), b='`')"},
        reproducer="print('```')\nraise SystemExit(1)\n",
    )
    rule = RuleResult(name="my_rule<T>", source_file="rules/a_rules.py", source_lines=[3, 9], verdict="fail",
                      findings=[finding], checks_run=["GG201"])
    return Report(rules=[rule], **extra)


def _html(markdown: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


def _code_spans(html: str) -> list[str]:
    import html as html_lib

    return [html_lib.unescape(c) for c in re.findall(r"<code>(.*?)</code>", html, re.S)]


def test_code_spans_show_the_exact_text_with_no_entities_or_escapes():
    html = _html(render_markdown(_report()))
    spans = _code_spans(html)
    assert EXPECTED in spans and ACTUAL in spans
    assert "f(a=array([0.]), b='`')" in spans
    assert "x" in spans and "np.add.at" in spans and "mutates=(0,)" in spans
    assert "my_rule<T>" in spans
    # no entity or backslash shows literally anywhere in the rendered page
    text = re.sub(r"<[^>]+>", "", html)
    assert "&amp;lt;" not in html and "&lt;" not in "".join(spans) and "\\" not in text


def test_plain_text_is_escaped_so_it_is_not_read_as_markup():
    html = _html(render_markdown(_report()))
    assert "<em>" not in html and '<a href="x"' not in html  # *not* and [a link](x) stay text
    assert "1 &lt; 2 and a|b" in html and "retry &lt;now&gt;" in html
    assert "&lt;gradient&gt;" in html  # the raw-HTML summary line is escaped as HTML


def test_a_reproducer_holding_a_fence_is_not_cut_short():
    html = _html(render_markdown(_report()))
    (block,) = re.findall(r'<pre><code class="language-python">(.*?)</code></pre>', html, re.S)
    assert block == "print('```')\nraise SystemExit(1)\n"


def test_table_cells_stay_in_their_columns():
    html = _html(render_markdown(_report()))
    row = re.search(r"<tbody>\s*<tr>(.*?)</tr>", html, re.S).group(1)
    assert len(re.findall(r"<td>", row)) == 4


def test_check_ids_link_to_the_server_pages_or_name_the_explain_command():
    with_server = render_markdown(_report(), server_url="https://gg.example.org/")
    assert "[GG201](https://gg.example.org/checks/GG201)" in with_server
    offline = render_markdown(_report())
    assert "`gradguard explain GG201`" in offline
    assert "http" not in offline  # no link to a web site that is not there


def test_a_report_whose_modules_failed_to_import_does_not_say_all_rules_pass():
    report = Report(rules=[RuleResult(name="ok", verdict="pass", checks_run=["GG101"])],
                    load_errors=[LoadFailure(path="rules/broken_rules.py", traceback="ImportError: no")])
    first = render_markdown(report).splitlines()[0]
    assert "1 module failed to import" in first and "1/1 rules pass" not in first

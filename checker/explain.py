"""`gradguard explain`: a check's explanation as plain terminal text, and close matches for a wrong id.

Explanations are written as docstrings with reStructuredText literals (````x````) and hard line
breaks; here literals become `x` and each paragraph is reflowed to the terminal's width. Code
examples are printed exactly as written.
"""

from __future__ import annotations

import difflib
import re
import shutil
import textwrap
from typing import Any

__all__ = ["explain_text", "suggest", "plain"]

_LITERAL = re.compile(r"``(.+?)``")
_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj):`~?([^`]+)`")


def plain(text: str) -> str:
    """reStructuredText markup as terminal text: ``x`` and :func:`x` become `x`."""
    return _ROLE.sub(r"`\1`", _LITERAL.sub(r"`\1`", text))


def _reflow(text: str, width: int) -> str:
    paragraphs = re.split(r"\n\s*\n", text.strip())
    return "\n\n".join(textwrap.fill(" ".join(p.split()), width=width, break_on_hyphens=False,
                                     break_long_words=False) for p in paragraphs)


def _width() -> int:
    return max(40, min(100, shutil.get_terminal_size((88, 24)).columns) - 1)


def _indent(text: str) -> str:
    return "\n".join(("    " + line).rstrip() for line in text.splitlines())


def explain_text(info: Any, width: int | None = None) -> str:
    width = width or _width()
    out = [_reflow(f"{info.id} ({info.family}, {info.severity}): {plain(info.title)}", width), "",
           _reflow(plain(info.explanation), width)]
    if info.given_example:
        out += ["", "Given:", _indent(info.given_example)]
    if info.broken_example:
        out += ["", "Broken:", _indent(info.broken_example), "Fixed:", _indent(info.fixed_example)]
    return "\n".join(out) + "\n"


def suggest(query: str, checks: list[Any]) -> str:
    """A usage message for an unknown id: close ids, or the checks whose title mentions the words given."""
    ids = [c.id for c in checks]
    close = difflib.get_close_matches(query.upper(), ids, n=3, cutoff=0.5)
    words = [w for w in re.findall(r"[a-z0-9]+", query.lower()) if len(w) > 2]
    about = [c for c in checks if words and all(
        any(difflib.SequenceMatcher(None, w, t).ratio() > 0.8 or t.startswith(w[:5]) for t in
            re.findall(r"[a-z0-9]+", (c.title + " " + c.family).lower())) for w in words)]
    message = f"Got {query!r}, which is not a check id."
    if close:
        message += f" Did you mean {', '.join(close)}?"
    if about:
        message += " Checks about it: " + "; ".join(f"{c.id} ({c.title})" for c in about[:5]) + "."
    if not close and not about:
        message += " Run `gradguard explain` with no id to list them all."
    return message

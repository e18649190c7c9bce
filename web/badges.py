"""Badges: an SVG in the standard "flat" style and a shields.io endpoint document.

    gradguard | 12/12 rules pass     green   the latest finished run on the branch passed
    gradguard | 3 failing            red     3 rules failed
    gradguard | error                orange  the run could not check the rules
    gradguard | unknown              grey    no finished run, unknown project, or no access

Both are pure functions of a :class:`BadgeState`; the route reads that state from the
``branch_heads`` cache (one indexed row) and sends ``Cache-Control: no-cache`` with an ETag,
so GitHub's image proxy revalidates instead of showing a stale verdict.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

__all__ = ["BadgeState", "badge_state", "render_svg", "render_endpoint", "etag", "text_width"]

LABEL = "gradguard"
COLORS = {"pass": "#2e7d32", "fail": "#c62828", "error": "#e65100", "unknown": "#6e6e6e"}
SHIELDS_COLORS = {"pass": "brightgreen", "fail": "red", "error": "orange", "unknown": "lightgrey"}

# Advance widths of Verdana at 11 px (the font of the flat style), ASCII only; others count as 7.
_WIDTHS = dict(zip(
    " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~",
    [3.87, 4.33, 5.05, 9.0, 7.0, 11.84, 7.99, 2.95, 4.99, 4.99, 7.0, 9.0, 4.0, 4.99, 4.0, 4.99,
     7.0, 7.0, 7.0, 7.0, 7.0, 7.0, 7.0, 7.0, 7.0, 7.0, 4.99, 4.99, 9.0, 9.0, 9.0, 6.0, 11.0,
     7.52, 7.54, 7.68, 8.48, 6.96, 6.32, 8.53, 8.27, 4.63, 5.0, 7.62, 6.12, 9.27, 8.23, 8.66, 6.63,
     8.66, 7.65, 7.52, 6.78, 8.05, 7.52, 10.88, 7.54, 6.77, 7.54, 4.99, 4.99, 4.99, 9.0, 7.0, 7.0,
     6.61, 6.85, 5.73, 6.85, 6.55, 3.87, 6.85, 6.96, 3.02, 3.79, 6.51, 3.02, 10.7, 6.96, 6.68, 6.85,
     6.85, 4.69, 5.73, 4.33, 6.96, 6.51, 9.0, 6.51, 6.51, 5.78, 6.98, 4.99, 6.98, 9.0],
))


@dataclass(frozen=True)
class BadgeState:
    kind: str  # "pass" | "fail" | "error" | "unknown"
    message: str

    @property
    def color(self) -> str:
        return COLORS[self.kind]


UNKNOWN = BadgeState("unknown", "unknown")


def badge_state(status: str | None, summary: dict[str, Any] | None) -> BadgeState:
    """What the badge says for a run ``status`` (``passed``/``failed``/``error``) and its report summary."""
    summary = summary or {}
    rules = int(summary.get("rules") or 0)
    passed = int(summary.get("passed") or 0)
    failing = int(summary.get("failed") or 0) + int(summary.get("errored") or 0)
    if status == "passed":
        return BadgeState("pass", f"{passed}/{rules} rules pass" if rules else "pass")
    if status == "failed":
        if failing:
            return BadgeState("fail", f"{failing} failing")
        return BadgeState("fail", "failing")
    if status == "error":
        return BadgeState("error", "error")
    return UNKNOWN


def text_width(text: str) -> float:
    """Width of ``text`` in Verdana 11 px, to one decimal (what the flat style lays out with)."""
    return round(sum(_WIDTHS.get(ch, 7.0) for ch in text), 1)


def render_svg(state: BadgeState, label: str = LABEL) -> str:
    """The badge as an SVG document in the shields.io flat style."""
    lw, mw = text_width(label) + 10, text_width(state.message) + 10
    width = lw + mw
    title = escape(f"{label}: {state.message}")
    lab, msg = escape(label), escape(state.message)

    def text(value: str, x: float, tw: float) -> str:
        x10, t10 = round(x * 10), round(tw * 10)
        return (f'<text aria-hidden="true" x="{x10}" y="150" fill="#010101" fill-opacity=".3" '
                f'transform="scale(.1)" textLength="{t10}">{value}</text>'
                f'<text x="{x10}" y="140" transform="scale(.1)" fill="#fff" textLength="{t10}">{value}</text>')

    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="20" role="img" aria-label="{title}">'
        f"<title>{title}</title>"
        '<linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/>'
        '<stop offset="1" stop-opacity=".1"/></linearGradient>'
        f'<clipPath id="r"><rect width="{width:g}" height="20" rx="3" fill="#fff"/></clipPath>'
        f'<g clip-path="url(#r)"><rect width="{lw:g}" height="20" fill="#555"/>'
        f'<rect x="{lw:g}" width="{mw:g}" height="20" fill="{state.color}"/>'
        f'<rect width="{width:g}" height="20" fill="url(#s)"/></g>'
        '<g fill="#fff" text-anchor="middle" font-family="Verdana,Geneva,DejaVu Sans,sans-serif" '
        'text-rendering="geometricPrecision" font-size="110">'
        f"{text(lab, lw / 2, lw - 10)}{text(msg, lw + mw / 2, mw - 10)}</g></svg>"
    )


def render_endpoint(state: BadgeState, label: str = LABEL) -> dict[str, Any]:
    """The shields.io endpoint document (https://shields.io/badges/endpoint-badge)."""
    return {
        "schemaVersion": 1,
        "label": label,
        "message": state.message,
        "color": SHIELDS_COLORS[state.kind],
        "isError": state.kind in ("fail", "error"),
        "cacheSeconds": 300,
    }


def etag(body: str | bytes | dict[str, Any]) -> str:
    """A strong ETag for a badge body."""
    if isinstance(body, dict):
        body = json.dumps(body, sort_keys=True)
    if isinstance(body, str):
        body = body.encode("utf-8")
    return '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
